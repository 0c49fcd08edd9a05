"""Writing audit rows. Callers own the transaction, so an action and its record commit together."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User

from audit.models import AuditAction, AuditEvent

SYSTEM = "system"


def audit_record(
    *,
    action: AuditAction,
    actor: User | None = None,
    actor_label: str = SYSTEM,
    run_id: int | None = None,
    intake_id: int | None = None,
    approval_id: int | None = None,
    from_state: str = "",
    to_state: str = "",
    **data: Any,
) -> AuditEvent:
    return AuditEvent.objects.create(
        run_id=run_id,
        intake_id=intake_id,
        approval_id=approval_id,
        actor=actor,
        actor_label=actor.get_username() if actor is not None else actor_label,
        action=action,
        from_state=from_state,
        to_state=to_state,
        data=data,
    )
