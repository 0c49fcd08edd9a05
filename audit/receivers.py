"""What the trail records on other apps' announcements.

History is written by the services that act (see audit.services), with one exception:
policy may not import audit (it imports no other app), so policy activation is recorded
here, on the signal the activating service sends inside its own transaction.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.dispatch import receiver

from audit.models import AuditAction
from audit.services import audit_record
from policy.signals import version_activated


@receiver(version_activated, dispatch_uid="audit.policy_activated")
def record_policy_activation(
    *, name: str, previous: str | None, user: User | None, **_: Any
) -> None:
    audit_record(action=AuditAction.POLICY_ACTIVATED, actor=user, version=name, previous=previous)
