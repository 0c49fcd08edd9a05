"""Services only the case sets and the tests use. They check no permission, so they stay out
of the product: no page, command or task of a deployment can reach them."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.db import transaction

from audit.models import AuditAction
from automation.models import Checkpoint, Run
from automation.pipeline.operations import refuse_transition, run_resume_in_transaction
from automation.runs.journal import add_checkpoint, record_audit
from automation.runs.sending import run_send


def checkpoint_import(
    *, run_id: int, classification: Any, actor_label: str, actor: User | None = None
) -> Checkpoint:
    """Store an authored classification as a checkpoint to resume from (validated on resume)."""
    with transaction.atomic(durable=True):
        run = Run.objects.select_for_update().get(pk=run_id)
        checkpoint = add_checkpoint(run, {"classification": classification}, source="import")
        record_audit(
            run,
            AuditAction.CHECKPOINT_IMPORTED,
            actor=actor,
            actor_label=actor_label,
            from_state=run.state,
            checkpoint=checkpoint.sequence,
        )
        return checkpoint


def checkpoint_resume(*, run_id: int, actor_label: str) -> str:
    """Resume from the latest checkpoint with no person behind it (a case set's resume)."""
    with transaction.atomic(durable=True):
        return run_resume_in_transaction(run_id=run_id, actor_label=actor_label)


def run_nudge(
    *,
    run_id: int,
    target: str,
    reason: str,
    actor_label: str,
    actor: User | None = None,
) -> str:
    """Record a nudge towards `target` and send the run's next message; nothing moves here.

    The state machine stays the only authority: a target that no transition reaches from the
    current state is refused and recorded (`state_conflict`), the run untouched. A reachable
    one is handed to the pipeline, which makes the move with all its own checks.
    """
    with transaction.atomic(durable=True):
        run = Run.objects.select_for_update().get(pk=run_id)
        reachable = {t.target for t in run.get_available_state_transitions()}
        if target not in reachable:
            return refuse_transition(run, f"move to {target}", actor, actor_label, reason=reason)
        record_audit(
            run,
            AuditAction.RUN_NUDGED,
            actor=actor,
            actor_label=actor_label,
            from_state=run.state,
            requested=target,
            reason=reason,
        )
        run_send(run)
        return "queued"
