from __future__ import annotations

from django.apps import AppConfig
from django.db.models.signals import m2m_changed, post_delete, post_save


class ConsoleConfig(AppConfig):
    """The pages people use: views, forms, templates and static files, over the domain apps."""

    name = "console"
    verbose_name = "Console"

    def ready(self) -> None:
        from django.contrib.auth.models import User

        from approvals.models import ApprovalDecision, ApprovalRequest, Delegation
        from console.context_processors import counts_changed

        # What the navigation's inbox count depends on (console.context_processors).
        for model in (ApprovalRequest, ApprovalDecision, Delegation):
            post_save.connect(counts_changed, sender=model, dispatch_uid=f"nav-{model.__name__}")
            post_delete.connect(
                counts_changed, sender=model, dispatch_uid=f"nav-d-{model.__name__}"
            )
        m2m_changed.connect(counts_changed, sender=User.groups.through, dispatch_uid="nav-groups")
