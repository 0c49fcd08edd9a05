"""Shared pieces of every run use case: stage timing, checkpoints, audit, one transition."""

from __future__ import annotations

import contextlib
import contextvars
import functools
import hashlib
import logging
import random
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, ParamSpec, Protocol, TypeVar

from django.contrib.auth.models import User
from django.db import connection, transaction
from django.utils import timezone

from audit.services import SYSTEM, audit_record
from automation import extraction
from automation.conf import setting
from automation.models import (
    AuditEvent,
    Checkpoint,
    IntakeRecord,
    Run,
    StageRecord,
)
from automation.schemas import is_mail
from config.dispatch import Priority, enqueue_after_commit
from policy.evaluation import EventFacts, Interpretation
from policy.models import PolicyVersion
from policy.services import policy_get

ADVANCE_RUN_TASK = "automation.tasks.advance_run"
DELIVER_EFFECT_TASK = "automation.tasks.deliver_effect"

RUN_LOG = logging.getLogger("gatehouse.runs")


# --- small helpers shared by the stages ---------------------------------------------------


@dataclass
class Stage:
    """Times one stage attempt; written as a StageRecord in the same transaction."""

    name: str
    attempt: int = 1
    started_at: datetime = field(default_factory=timezone.now)
    _clock: float = field(default_factory=time.monotonic)

    def record(self, run: Run, outcome: str, error_class: str = "") -> StageRecord:
        elapsed_ms = int((time.monotonic() - self._clock) * 1000)
        row = StageRecord(
            run=run,
            stage=self.name,
            attempt=self.attempt,
            started_at=self.started_at,
            finished_at=self.started_at + timedelta(milliseconds=elapsed_ms),
            duration_ms=elapsed_ms,
            outcome=outcome,
            error_class=error_class,
        )
        return _write(run, row)


@dataclass
class _Journal:
    """The history rows of one run's transaction, written together when it is done."""

    run_id: int
    rows: list[StageRecord | Checkpoint | AuditEvent] = field(default_factory=list)
    last_sequence: int | None = None

    def flush(self) -> None:
        stages = [row for row in self.rows if isinstance(row, StageRecord)]
        checkpoints = [row for row in self.rows if isinstance(row, Checkpoint)]
        audits = [row for row in self.rows if isinstance(row, AuditEvent)]
        StageRecord.objects.bulk_create(stages)
        Checkpoint.objects.bulk_create(checkpoints)
        AuditEvent.objects.bulk_create(audits)
        self.rows.clear()


_journal: contextvars.ContextVar[_Journal | None] = contextvars.ContextVar(
    "gatehouse_run_journal", default=None
)


@contextlib.contextmanager
def journal(run: Run, *, last_sequence: int | None = None) -> Iterator[_Journal]:
    """Write the run's stage records, checkpoints and audit rows made in the block with one
    INSERT per table when it ends, in the order they were made. Only inside the run's
    transaction, and only for the pipeline's own steps: nothing in the block may read back
    the rows it made (checkpoint numbers are counted here)."""
    current = _Journal(run.pk, last_sequence=last_sequence)
    token = _journal.set(current)
    try:
        yield current
    finally:
        _journal.reset(token)
    current.flush()  # not reached when the block raised: its transaction rolls back


R = TypeVar("R", StageRecord, Checkpoint, AuditEvent)


def _write(run: Run | None, row: R) -> R:
    current = _journal.get()
    if current is not None and run is not None and current.run_id == run.pk:
        current.rows.append(row)
        return row
    row.save()
    return row


def versions_of(run: Run) -> dict[str, str]:
    return {
        "workflow": run.workflow_version,
        "classifier": run.classifier_version,
        "prompt": run.prompt_version,
        "policy": run.policy_version,
    }


def add_checkpoint(run: Run, data: dict[str, Any], source: str = "pipeline") -> Checkpoint:
    current = _journal.get()
    counted = current is not None and current.run_id == run.pk
    if counted and current is not None and current.last_sequence is not None:
        last: int | None = current.last_sequence
    else:
        last = run.checkpoints.order_by("-sequence").values_list("sequence", flat=True).first()
    sequence = (last or 0) + 1
    if counted and current is not None:
        current.last_sequence = sequence
    checkpoint = Checkpoint(
        run=run,
        sequence=sequence,
        state=run.state,
        versions=versions_of(run),
        data=data,
        source=source,
    )
    return _write(run, checkpoint)


def record_audit(
    run: Run | None,
    action: str,
    *,
    actor: User | None = None,
    actor_label: str = SYSTEM,
    from_state: str = "",
    intake: IntakeRecord | None = None,
    **data: Any,
) -> AuditEvent:
    current = _journal.get()
    if current is None or run is None or current.run_id != run.pk:
        return audit_record(
            action=action,
            actor=actor,
            actor_label=actor_label,
            run_id=run.pk if run is not None else None,
            intake_id=intake.pk if intake is not None else None,
            from_state=from_state,
            to_state=run.state if run is not None else "",
            **data,
        )
    return _write(
        run,
        AuditEvent(
            run_id=run.pk,
            intake_id=intake.pk if intake is not None else None,
            actor=actor,
            actor_label=actor.get_username() if actor is not None else actor_label,
            action=action,
            from_state=from_state,
            to_state=run.state,
            data=data,
        ),
    )


def move(
    run: Run,
    name: str,
    *,
    stage: Stage | None = None,
    stage_outcome: str = "ok",
    checkpoint: dict[str, Any] | None = None,
    actor: User | None = None,
    note: dict[str, Any] | None = None,
    save: bool = True,
    **kwargs: Any,
) -> None:
    """Apply one transition and write everything that commits with it.

    `kwargs` go to the transition method; `note` only to the audit row (a reason, say).
    With save=False the caller saves the run once after several transitions, in the same
    transaction (the pipeline carrying a run through its steps).
    """
    before = run.state
    getattr(run, name)(**kwargs)
    if save:
        run.save()
    if stage is not None:
        stage.record(run, stage_outcome)
    if checkpoint is not None:
        add_checkpoint(run, checkpoint)
    record_audit(
        run, f"run.{name}", actor=actor, from_state=before, outcome=run.outcome, **(note or {})
    )
    log_run(
        run,
        f"run {run.pk} {name}: {before} -> {run.state}",
        transition=name,
        from_state=before,
        to_state=run.state,
        actor=actor.get_username() if actor is not None else SYSTEM,
    )


def run_send(run: Run, *, priority: Priority = Priority.URGENT) -> None:
    """Send the run to the workers with this transaction, and note that a message is out
    (the sweep leaves a run alone while its message waits). Urgent by default: people's
    operations call this, and a person is waiting for the result."""
    run.dispatched_at = timezone.now()
    Run.objects.filter(pk=run.pk).update(dispatched_at=run.dispatched_at)
    enqueue_after_commit(ADVANCE_RUN_TASK, run.pk, priority=priority)


# --- logs about runs ----------------------------------------------------------------------


def log_run(run: Run, message: str, *, level: int = logging.INFO, **fields: Any) -> None:
    """Log one line about a run once its transaction commits: a rolled-back step never shows.

    The line carries the run's id, event id, state and outcome as fields, so a log collector
    follows one run or one event across web and worker processes. Callers add facts, never
    secrets or request bodies.
    """
    extra = {
        "run_id": run.pk,
        "event_id": run.event_id,
        "state": run.state,
        "outcome": run.outcome,
        **fields,
    }
    transaction.on_commit(lambda: RUN_LOG.log(level, message, extra=extra))


def log_run_id(run_id: int | None, message: str, **fields: Any) -> None:
    """Log about a run known only by its id (a worker that lost a race): one small query."""
    if run_id is None:
        return
    run = Run.objects.filter(pk=run_id).only("event_id", "state", "outcome").first()
    if run is not None:
        log_run(run, message, **fields)


class _Admission(Protocol):
    @property
    def code(self) -> str: ...
    @property
    def run(self) -> Run | None: ...
    @property
    def intake(self) -> IntakeRecord: ...


P = ParamSpec("P")
A = TypeVar("A", bound=_Admission)


def logs_intake(admit: Callable[P, A]) -> Callable[P, A]:
    """Log what intake answered (accepted, a duplicate, invalid...) with the run it names."""

    @functools.wraps(admit)
    def admit_and_log(*args: P.args, **kwargs: P.kwargs) -> A:
        result = admit(*args, **kwargs)
        if result.run is not None:
            code = str(result.code)
            log_run(
                result.run,
                f"intake {result.intake.pk}: {code}",
                intake_id=result.intake.pk,
                code=code,
            )
        return result

    return admit_and_log


def lock_run(run_id: int, *, wait: bool = False) -> Run | None:
    """Lock the run row.

    By default SKIP LOCKED: None when another worker holds the row, because that worker is
    taking this very step and a duplicate message should simply stand aside. With wait=True
    (used by whoever already owns the work, such as a worker holding the classifier lease
    with an answer in hand) it queues for the lock instead, so finished work is never dropped.
    """
    skip = not wait and connection.features.has_select_for_update_skip_locked
    # of=("self",): lock the run's row only. The channel is read in the same query, but
    # every run of a channel shares its row: locking it too would make one run's step skip
    # (or wait for) every other run's.
    query = Run.objects.select_for_update(skip_locked=skip, of=("self",))
    return query.filter(pk=run_id).select_related("channel").first()


def backoff_delay(attempt: int) -> float:
    """Exponential backoff with full jitter, so retries of many runs do not stampede."""
    cap = min(
        setting("RETRY_BACKOFF_CAP_SECONDS"), setting("RETRY_BACKOFF_BASE_SECONDS") * 2**attempt
    )
    return random.uniform(0, cap)  # noqa: S311 - full jitter, not cryptography


def effect_key(*, scope: str, fingerprint: str, effect: str) -> str:
    """From the request, never the attempt: every retry, replay or racing worker agrees on it.

    The scope is the run's identity scope (Run.identity_scope): one for all e-mail, so two runs
    of one message reach one effect whichever path brought them; a JSON event's channel name,
    which is what the keys of JSON events have always been made of.
    """
    return hashlib.sha256(f"{scope}\n{fingerprint}\n{effect}".encode()).hexdigest()


def interpretation_of(classification: dict[str, Any]) -> Interpretation:
    """The reading policy judges: category, route, effect, confidence and any amount."""
    fields = classification.get("fields") or {}
    return Interpretation(
        category=classification["category"],
        route=classification["recommended_route"],
        effect=classification["requested_effect"],
        confidence=classification.get("confidence"),
        amount=parse_amount((fields.get("amount") or {}).get("value")),
    )


def parse_amount(value: Any) -> Decimal | None:
    """'1,250.00 EUR' -> Decimal('1250.00'); unreadable -> None (extraction checks catch it)."""
    if value is None:
        return None
    try:
        return extraction.parse_amount(str(value))[0]
    except ValueError:
        return None


def facts_of(run: Run) -> EventFacts:
    if run.normalized is None:
        raise ValueError(f"run {run.pk} has no normalized event yet")
    if is_mail(run.normalized):
        # A message states neither type nor action; its tier is the known customer's.
        return EventFacts(
            request_type=None,
            requested_action=None,
            account_tier=(run.enrichment or {}).get("account_tier") or "standard",
        )
    return EventFacts(
        request_type=run.normalized["request_type"],
        requested_action=run.normalized["requested_action"],
        account_tier=run.normalized["account_tier"],
    )


def policy_for(run: Run) -> PolicyVersion:
    return policy_get(name=run.channel.policy_version or None)


def binding_of(run: Run) -> dict[str, str]:
    return {
        "fingerprint": run.fingerprint,
        "workflow_version": run.workflow_version,
        "policy_version": run.policy_version,
        "effect": run.effect_name,
    }


def effect_payload_of(run: Run) -> dict[str, Any]:
    """The full, canonical parameters of the effect: what the approver sees and approves."""
    event = run.normalized or {}
    payload = {
        "effect": run.effect_name,
        "route": run.route,
        "event_id": event.get("event_id"),
        "request_type": event.get("request_type") or run.category,
        "account_tier": event.get("account_tier") or (run.enrichment or {}).get("account_tier"),
        "subject": event.get("subject"),
    }
    if is_mail(event):
        payload["sender"] = event.get("sender")
    # The facts the effect acts on (an account reference, an amount) are part of what is
    # approved and delivered, not only evidence beside it.
    fields = (run.classification or {}).get("fields") or {}
    for name, extracted in sorted(fields.items()):
        payload.setdefault(name, extracted["value"])
    return payload


def decided_policy_of(run: Run) -> PolicyVersion:
    return PolicyVersion.objects.get(name=run.policy_version)
