from __future__ import annotations

from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "audit"
    verbose_name = "Audit trail"

    def ready(self) -> None:
        # Here, as Django asks: the receivers write models, which exist only once every app
        # is loaded; importing the module connects them.
        from audit import receivers  # noqa: F401
