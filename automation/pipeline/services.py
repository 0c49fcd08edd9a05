"""The pipeline: one worker message carries a run as far as it can go.

This module is its entry point: it composes the steps of classify.py (validate, normalize,
enrich, the classifier call), decide.py (the decision, the approval) and execute.py (the
outbox row, its delivery).

A worker locks the run and takes every consecutive automatic step in one transaction:
validate, normalize and enrich (intake already validated and fingerprinted the event, so
these record what was established), then the lease on the classifier call. The call itself
runs outside any transaction. Its answer, the decision, the outbox row and, for a local
effect, the delivery and the completion commit in a second transaction. Each step still
writes its own stage record, checkpoint and audit row, so the run's history is the same as
when every step was a message of its own.

A run stops where it must wait: a classifier backoff, a person (approval, a hold), a remote
delivery (a message of its own, since it calls out), or an end. A message that arrives
twice or late finds the run locked by the worker carrying it, or moved on, and does nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from automation.pipeline.classify import (
    ClassifierCall,
    classifier_attempt_claim,
    classifier_call_make,
    classify_locally,
    local_classifier,
    message_done,
    step_enrich,
    step_normalize,
    step_validate,
)
from automation.pipeline.decide import step_await_approval, step_decide, step_execute_approved
from automation.pipeline.execute import step_executing
from automation.runs.journal import journal
from automation.runs.locking import lock_run
from automation.runs.models import Run, State

# --- carrying a run -----------------------------------------------------------------------

# A run never takes more steps in one message than this (a guard against a loop in the table).
MAX_STEPS = 16


def run_advance(*, run_id: int, now: datetime | None = None) -> str | None:
    """Carry the run through every step it can take now, in transactions of its own.

    Returns the state reached, or None when the message found nothing to do (the run is
    being carried by another worker, waits for a backoff or a person, or has ended).
    """
    return _advance(run_id, now or timezone.now(), durable=True)


def run_advance_in_transaction(*, run_id: int, now: datetime | None = None) -> str | None:
    """run_advance inside the caller's transaction, each of its transactions a savepoint: for
    a dry run that rolls back everything it did (the classifier evaluation)."""
    return _advance(run_id, now or timezone.now(), durable=False)


def _advance(run_id: int, now: datetime, *, durable: bool) -> str | None:
    with transaction.atomic(durable=durable):
        run = lock_run(run_id)
        if run is None:
            return None
        # A run still at `received` has no checkpoint yet (no transition leads back to it).
        with journal(run, last_sequence=0 if run.state == State.RECEIVED else None) as written:
            moved, call = _carry(run, now)
            if call is None:
                message_done(run, moved)
            else:
                call.last_checkpoint = written.last_sequence
    if call is None:
        return run.state if moved else None
    return classifier_call_make(call, now, durable=durable, carry=_carry)


def _carry(run: Run, now: datetime) -> tuple[bool, ClassifierCall | None]:
    """Take the locked run's consecutive local steps. Stops before a classifier call (its
    lease is taken and returned), at a person, a remote delivery or an end."""
    moved = False
    for _ in range(MAX_STEPS):
        if run.state == State.ENRICHED:
            classifier = local_classifier(run)
            if classifier is not None:
                if not classify_locally(run, classifier, now):
                    return moved, None
                moved = True
                continue
            call = classifier_attempt_claim(run, now)
            return moved or call is not None, call
        step = LOCAL_STEPS.get(run.state)
        if step is None or not step(run, now):
            return moved, None
        moved = True
        if step in LAST_STEPS:
            return moved, None
    return moved, None


# Steps taken inside the carrying transaction, by the state they start from.
LOCAL_STEPS: dict[str, Callable[[Run, datetime], bool]] = {
    State.RECEIVED: step_validate,
    State.VALIDATED: step_normalize,
    State.NORMALIZED: step_enrich,
    State.CLASSIFIED: step_decide,
    State.APPROVAL_REQUIRED: step_await_approval,
    State.APPROVED: step_execute_approved,
    State.EXECUTING: step_executing,
}
# Steps after which a run has nothing more to do now: decided (and delivered, held,
# blocked or waiting for a person) or executing an approval (delivered or sent).
LAST_STEPS = frozenset([step_decide, step_execute_approved])
# States in which a message may move the run (the sweep looks for stalled ones among these).
STEPS = frozenset([*LOCAL_STEPS, State.ENRICHED])
