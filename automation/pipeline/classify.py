"""The pipeline's first part: a run's request read, up to its classification.

Validate, normalize and enrich record what intake established; then the classifier call: a
local classifier reads in the carrying transaction, a remote one is leased there
(`classifier_attempt_claim`), called outside any transaction (`classifier_call_make`), and its
answer recorded in a transaction of its own. A read that fails its contract holds the run with
the fields named (`hold_with_problems`). Composed by automation/pipeline/services.py.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from pydantic import ValidationError

from audit.models import AuditAction
from automation.classifiers import get_classifier, servers
from automation.classifiers.base import (
    Answer,
    Classifier,
    ClassifierInput,
    ClassifierRateLimited,
    ClassifierRefused,
    ClassifierTimeout,
    ClassifierUnavailable,
    Usage,
    answer_of,
)
from automation.classifiers.heuristic import intent_text
from automation.classifiers.models import ClassificationAttempt, ClassifierResult
from automation.conf import setting
from automation.extraction import extraction_problems
from automation.intake.customers import customer_find, customers_known
from automation.language import request_language
from automation.pipeline.shadow import shadows_send
from automation.runs.backoff import retry_delay
from automation.runs.journal import Stage, journal, record_audit, record_transition, write_row
from automation.runs.locking import lock_run
from automation.runs.models import TERMINAL_STATE_LIST, Run, StageName, StageOutcome, State
from automation.runs.payloads import default_tier, policy_for, policy_forget
from automation.runs.sendable import effect_problems
from automation.runs.sending import ADVANCE_RUN_TASK
from automation.schemas import (
    ClassifierDecision,
    FieldProblem,
    decision_contract,
    event_text,
    is_mail,
    validation_problems,
)
from automation.signals import classifier_call_starting
from core.codes import Outcome
from policy.catalogue import Catalogue
from worker import pools
from worker.dispatch import MAX_DELAY, batch, enqueue_after_commit

# Open runs beside this one are counted up to this many (enrichment evidence: "how busy").
# Each count walks that many index entries for every run taken, so in a backlog a larger cap
# costs every run more work in PostgreSQL than all its own writes; 100 says "busy" as well.
OPEN_RUNS_COUNTED = 100


@dataclass
class ClassifierCall:
    """A leased classifier attempt: made outside any transaction, recorded in the next."""

    run: Run
    attempt: int
    stage: Stage
    last_checkpoint: int | None = None  # the run's last checkpoint number when leased


# What carries a run on once its classification is recorded: the pipeline's own carry
# (automation/pipeline/services.py), passed in, since its steps are above this module.
Carry = Callable[[Run, datetime], object]


def message_done(run: Run, moved: bool) -> None:
    """The message that carried the run is spent; save what the steps changed.

    With no message out, the sweep may nudge the run again should it stall. (Nothing
    in a carry sends the run another message: it goes on in the same task instead.)
    """
    if run.dispatched_at is not None:
        run.dispatched_at = None
        if not moved:  # bookkeeping only: not a change of the run (no version, no time)
            Run.objects.filter(pk=run.pk).update(dispatched_at=None)
    if moved:
        run.save()


# --- the steps, each on the locked run: True when the run moved and may go on --------------


def step_validate(run: Run, now: datetime) -> bool:
    # Intake validated the event against its contract and stored it normalized: this step
    # records that, without reading the event again.
    record_transition(
        run, run.validate, stage=Stage(StageName.VALIDATE), event_id=run.event_id, save=False
    )
    return True


def step_normalize(run: Run, now: datetime) -> bool:
    # Intake stored the normalized event and its fingerprint; they are recorded as this step.
    record_transition(
        run,
        run.normalize,
        stage=Stage(StageName.NORMALIZE),
        normalized=run.normalized or {},
        fingerprint=run.fingerprint,
        save=False,
    )
    return True


def step_enrich(run: Run, now: datetime) -> bool:
    enrichment = _enrichment(run)
    record_transition(
        run,
        run.enrich,
        stage=Stage(StageName.ENRICH),
        checkpoint={"enrichment": enrichment},
        enrichment=enrichment,
        save=False,
    )
    return True


def _enrichment(run: Run) -> dict[str, Any]:
    """Deterministic local evidence: the known customer, its tier, the open work beside it."""
    normalized = run.normalized or {}
    # Written as the partial indexes' condition (Run.Meta), so the counts use them.
    unfinished = Run.objects.exclude(state__in=TERMINAL_STATE_LIST).exclude(pk=run.pk)
    # The business of the version that decides the run (policy_for) says how its customers
    # are matched, and the tier a customer nobody knows is given: its first.
    business = policy_for(run).parsed.business
    match = customer_find(
        text=event_text(normalized),
        sender=normalized.get("sender", ""),
        matching=business.matching,
    )
    enrichment: dict[str, Any] = match.as_enrichment()
    if match.customer is not None:
        same_customer = unfinished.filter(enrichment__customer__reference=match.customer.reference)
        enrichment["open_runs_same_customer"] = same_customer[:OPEN_RUNS_COUNTED].count()
    default = default_tier(business)
    if is_mail(normalized):
        tier = match.customer.account_tier if match.customer is not None else default
        enrichment["sender"] = normalized.get("sender")
        enrichment["thread_parent"] = run.thread_parent_id
        # What a reply is written in: the language of the sender's own words.
        enrichment["language"] = request_language(intent_text(normalized))
    else:
        tier = normalized["account_tier"]
        same_type = unfinished.filter(
            channel=run.channel, normalized__request_type=normalized["request_type"]
        )
        # Counted up to OPEN_RUNS_COUNTED: the evidence is "how busy", and an exact count
        # would read the whole backlog for every run taken from it.
        enrichment["open_runs_same_request_type"] = same_type[:OPEN_RUNS_COUNTED].count()
    enrichment["account_tier"] = tier
    # Whether the customer is in a tier of its own, not the default one (docs/business.md).
    enrichment["tier_is_default"] = tier == default
    return enrichment


def classifier_attempt_claim(run: Run, now: datetime) -> ClassifierCall | None:
    """Take the lease on one classifier call; the call itself happens outside any transaction."""
    if run.next_attempt_at and run.next_attempt_at > now:
        return None  # a message that arrived before its backoff ran out
    if run.lease_expires_at and run.lease_expires_at > now:
        return None  # another worker is calling the classifier for this run right now
    run.classify_attempts += 1
    run.lease_expires_at = now + timedelta(seconds=setting("STAGE_LEASE_SECONDS"))
    run.save()  # with the steps carried before it, in one statement
    return ClassifierCall(
        run, run.classify_attempts, Stage(StageName.CLASSIFY, attempt=run.classify_attempts)
    )


def local_classifier(run: Run) -> Classifier | None:
    """The run's classifier when it is local (`local = True`: pure, in-process, no network
    and no model, like the heuristic); None for any other, or one that cannot be loaded."""
    try:
        classifier = get_classifier(run.channel.classifier)
    except ClassifierUnavailable:
        return None  # the lease path reports it
    return classifier if getattr(classifier, "local", False) else None


def classify_locally(run: Run, classifier: Classifier, now: datetime) -> bool:
    """A local classifier reads the run in the carrying transaction, under the run's lock, as
    a local effect is delivered in it: no lease and no second transaction, since there is no
    call to wait for. The reading is recorded exactly as a remote one. False when a backoff
    has not run out."""
    if run.next_attempt_at and run.next_attempt_at > now:
        return False
    run.classify_attempts += 1
    attempt = run.classify_attempts
    stage = Stage(StageName.CLASSIFY, attempt=attempt)
    classifier_call_starting.send(sender=Run, run_id=run.pk)
    answer, error = _call_classifier(classifier, run, attempt)
    _record_classification(run, attempt, stage, answer, error, now)
    return True


def _classifier_input(run: Run) -> ClassifierInput:
    """What the classifier reads of the run (read here, where the run's transaction is: a
    call made in another thread touches no database)."""
    document = policy_for(run).parsed
    return ClassifierInput(
        run.channel.name,
        run.event_id,
        run.normalized or {},
        business=document.business,
        routes=document.routes,
    )


def _call_classifier(
    classifier: Classifier, run: Run, attempt: int, event: ClassifierInput | None = None
) -> tuple[Answer, Exception | None]:
    """(the answer, None), or (an empty answer, the retryable error)."""
    try:
        raw = classifier.classify(
            event or _classifier_input(run),
            attempt,
            deadline=float(setting("CLASSIFIER_DEADLINE_SECONDS")),
        )
    except (ClassifierTimeout, ClassifierUnavailable) as exc:
        return Answer(None), exc
    return answer_of(raw), None


def classifier_call_make(
    call: ClassifierCall, now: datetime, *, durable: bool, carry: Carry
) -> str | None:
    """Call the classifier (no transaction, no lock held), then record the answer and carry
    the run on from it.

    A remote classifier's call is first admitted by its model server's limits
    (automation.classifiers.servers), which may turn it away: the run then waits, without
    spending an attempt, or is held for a person. In a worker with calls in flight
    (worker.pools), the call is handed to the server's pool and this returns at
    once; the pool's writer records the answer."""
    run = call.run
    classifier = get_classifier(run.channel.classifier)
    server = getattr(classifier, "server", None)
    event = _classifier_input(run)
    if server is None:
        answer, error = _made(call, classifier, event)
        return _record_answer(call, answer, error, now, durable=durable, carry=carry)
    pool = None
    if durable and pools.enabled():
        size = pools.pool_size(setting("OPENAI_CONCURRENCY"), settings.Q_CLUSTER["workers"])
        pool = pools.pool_for(server, size)
    slot = pool.take() if pool is not None else None
    if pool is not None and slot is None:  # every slot stayed taken: back to the queue
        return _turn_away(call, servers.Admission(False, now + SLOT_RETRY), now, durable=durable)
    estimate = _estimated_tokens(classifier, event)
    admission = servers.admit(
        server,
        tokens=estimate,
        now=now,
        deadline=float(setting("CLASSIFIER_DEADLINE_SECONDS")),
        longest_wait=_longest_wait(),
        reserved=run.waiting_for == servers.Waiting.CAPACITY,
        durable=durable,
    )
    if not admission.go:
        if slot is not None:
            slot.release()
        return _turn_away(call, admission, now, durable=durable)
    # From the clock, not from when the step began: the moment is of the clock.
    wait = max((admission.at - max(now, timezone.now())).total_seconds(), 0.0)

    def answered(result: tuple[Answer, Exception | None]) -> str | None:
        answer, error = result
        at = now if pool is None else timezone.now()  # a worker's answer comes later
        closed = servers.report(
            server,
            error=error,
            now=at,
            tokens_estimated=estimate,
            tokens_used=_tokens(answer),
            cost=answer.usage.cost,
            durable=durable,
        )
        if closed:
            _wake_after_breaker(at, durable=durable)
        if isinstance(error, ClassifierRateLimited):
            # The server's pause, not the reader's failure: the call is not counted.
            return _rate_limited(call, error, at, durable=durable)
        return _record_answer(call, answer, error, at, durable=durable, carry=carry)

    if pool is not None and slot is not None:
        pool.start(
            slot,
            lambda: _made(call, classifier, event),
            answered,
            not_before=time.monotonic() + wait,
        )
        return run.state
    if wait:
        time.sleep(wait)
    return answered(_made(call, classifier, event))


# A run that found no free slot in its worker's pool comes back this much later.
SLOT_RETRY = timedelta(seconds=1)


def _longest_wait() -> float:
    """How long a call may wait in its worker for its moment under the rate limit: what its
    lease leaves beyond the call's deadline, with room to write the answer."""
    lease = float(setting("STAGE_LEASE_SECONDS"))
    deadline = float(setting("CLASSIFIER_DEADLINE_SECONDS"))
    return max((lease - deadline) / 2, 1.0)


def _estimated_tokens(classifier: Classifier, event: ClassifierInput) -> int:
    estimate = getattr(classifier, "estimated_tokens", None)
    if estimate is None or not setting("OPENAI_TPM"):
        return 0
    return int(estimate(event))


def _tokens(answer: Answer) -> int | None:
    usage = answer.usage
    if usage.prompt_tokens is None or usage.completion_tokens is None:
        return None
    return usage.prompt_tokens + usage.completion_tokens


def add_usage(run: Run, usage: Usage) -> None:
    """Add a call's tokens and cost to the run's totals (saved with the run)."""
    run.prompt_tokens += usage.prompt_tokens or 0
    run.completion_tokens += usage.completion_tokens or 0
    run.model_cost += usage.cost or 0


def _made(
    call: ClassifierCall, classifier: Classifier, event: ClassifierInput
) -> tuple[Answer, Exception | None]:
    """The call itself, timed from its start (a wait for a slot or a moment is not in it)."""
    call.stage = Stage(StageName.CLASSIFY, attempt=call.attempt)
    classifier_call_starting.send(sender=Run, run_id=call.run.pk)
    return _call_classifier(classifier, call.run, call.attempt, event)


def _record_answer(
    call: ClassifierCall,
    answer: Answer,
    error: Exception | None,
    now: datetime,
    *,
    durable: bool,
    carry: Carry,
) -> str | None:
    run, attempt = call.run, call.attempt
    with transaction.atomic(durable=durable):
        # Wait for the lock: whoever holds the row now is not taking this attempt (we hold
        # its lease), and an answer in hand is never dropped.
        locked = _relock(run)
        if locked is None or locked.state != State.ENRICHED or locked.classify_attempts != attempt:
            return None  # our lease ran out and another worker took this attempt over
        same = locked is run  # unchanged since the lease: its checkpoint count holds too
        policy_forget(locked)  # read in this transaction: the version active now decides
        locked.waiting_for = ""
        with journal(locked, last_sequence=call.last_checkpoint if same else None):
            _record_classification(locked, attempt, call.stage, answer, error, now)
            if locked.state == State.CLASSIFIED:
                carry(locked, now)  # on to the decision, in this transaction
            message_done(locked, True)
        return locked.state


def _leased(run: Run, attempt: int) -> Run | None:
    """The run, locked, when it is still ours: at `enriched` with our attempt's lease."""
    locked = _relock(run)
    if locked is None or locked.state != State.ENRICHED or locked.classify_attempts != attempt:
        return None
    return locked


def _turn_away(
    call: ClassifierCall, admission: servers.Admission, now: datetime, *, durable: bool
) -> str | None:
    """The server's limits turned the call away before it was made: the lease is given back
    and the attempt with it (no call, nothing spent). The run waits in the queue until the
    admission's moment, or is held for a person, as the admission says; either way it names
    why."""
    with transaction.atomic(durable=durable):
        locked = _leased(call.run, call.attempt)
        if locked is None:
            return None
        locked.classify_attempts -= 1
        locked.lease_expires_at = None
        if admission.hold:
            locked.waiting_for = ""
            with journal(locked):
                Stage(StageName.CLASSIFY, attempt=call.attempt).record(
                    locked, StageOutcome.RETRY_EXHAUSTED, "ModelServerUnavailable"
                )
                record_transition(
                    locked,
                    locked.hold,
                    outcome=Outcome.RETRY_EXHAUSTED,
                    field="classifier",
                    detail=admission.why,
                    save=False,
                )
                message_done(locked, True)
            return locked.state
        waiting = str(admission.waiting or "")
        if admission.why and (waiting != locked.waiting_for or not locked.next_attempt_at):
            record_audit(
                locked,
                AuditAction.RUN_WAITING,
                waiting_for=waiting,
                until=admission.at.isoformat(),
                why=admission.why,
            )
        _wait_in_queue(locked, admission.at, waiting, now)
        return locked.state


def _rate_limited(
    call: ClassifierCall, error: ClassifierRateLimited, now: datetime, *, durable: bool
) -> str | None:
    """A 429: the call was made but not counted (the server paused everybody, servers.report);
    the run waits out the pause in the queue and keeps its attempts."""
    with transaction.atomic(durable=durable):
        locked = _leased(call.run, call.attempt)
        if locked is None:
            return None
        # The attempt's number stays taken (each call its own row), but not from the budget.
        locked.classify_attempts_spent += 1
        locked.lease_expires_at = None
        with journal(locked):
            write_row(
                locked,
                ClassificationAttempt(
                    run=locked,
                    attempt=call.attempt,
                    classifier=locked.channel.classifier,
                    classifier_version=locked.classifier_version,
                    prompt_version=locked.prompt_version,
                    outcome=ClassifierResult.RATE_LIMITED,
                    raw_output={"error": str(error)},
                    latency_ms=int((timezone.now() - call.stage.started_at).total_seconds() * 1000),
                ),
            )
        pause = timedelta(seconds=error.retry_after or servers.DEFAULT_PAUSE)
        _wait_in_queue(locked, now + pause, "", now)
        return locked.state


# Runs woken at once when a probe closes the breaker; any beyond come back on their own.
WOKEN_AT_ONCE = 5000


def _wake_after_breaker(now: datetime, *, durable: bool) -> None:
    """The breaker closed: the runs that wait for it go on now, in one statement."""
    with transaction.atomic(durable=durable), batch():
        waiting = list(
            Run.objects.filter(state=State.ENRICHED, waiting_for=servers.Waiting.BREAKER)
            .order_by("next_attempt_at")
            .values_list("pk", flat=True)[:WOKEN_AT_ONCE]
        )
        Run.objects.filter(pk__in=waiting).update(next_attempt_at=now, dispatched_at=now)
        for run_id in waiting:
            enqueue_after_commit(ADVANCE_RUN_TASK, run_id)


def _wait_in_queue(run: Run, until: datetime, waiting: str, now: datetime) -> None:
    """Save the run as waiting until `until` and send it a message due then (or, further off
    than a message is delayed, leave it to the sweep, which sends it when it is due)."""
    run.next_attempt_at = until
    run.waiting_for = waiting
    if until - now <= MAX_DELAY:
        run.dispatched_at = now
        enqueue_after_commit(ADVANCE_RUN_TASK, run.pk, not_before=until)
    else:
        run.dispatched_at = None
    run.save()


def _relock(run: Run) -> Run | None:
    """Lock the run again after the classifier call. Unchanged since we saved it (same
    version), the copy in hand is the row: only the version is read. Otherwise, the row."""
    version = (
        Run.objects.select_for_update(of=("self",))
        .filter(pk=run.pk)
        .values_list("version", flat=True)
        .first()
    )
    if version is None:
        return None
    return run if version == run.version else lock_run(run.pk, wait=True)


def _record_classification(
    run: Run, attempt: int, stage: Stage, answer: Answer, error: Exception | None, now: datetime
) -> None:
    business = policy_for(run).parsed.business
    raw = answer.output
    outcome, decision, problems = _judge_output(raw, error, business)
    if answer.cut_at is not None and error is None:
        # Stopped at the token limit: whatever it parses as, the model had not finished.
        outcome, decision = ClassifierResult.INVALID, None
        problems = [
            FieldProblem(
                field="output",
                message=f"was cut at the limit of {answer.cut_at} tokens: the model did not "
                "finish its answer",
            )
        ]
    usage = answer.usage
    add_usage(run, usage)
    row = ClassificationAttempt(
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        cost=usage.cost,
        run=run,
        attempt=attempt,
        classifier=run.channel.classifier,
        classifier_version=run.classifier_version,
        prompt_version=run.prompt_version,
        outcome=outcome,
        raw_output=raw if error is None else {"error": str(error)},
        errors=[p.model_dump() for p in problems],
        latency_ms=int((timezone.now() - stage.started_at).total_seconds() * 1000),
    )
    write_row(run, row)
    if error is not None:
        _classifier_failed(run, stage, error, now)
    elif decision is None:
        hold_with_problems(run, stage, Outcome.CLASSIFICATION_INVALID, problems)
    else:
        _accept_classification(run, stage, decision, business)


def _judge_output(
    raw: Any, error: Exception | None, business: Catalogue
) -> tuple[ClassifierResult, ClassifierDecision | None, list[FieldProblem]]:
    """The classifier's answer held to what the run's catalogue version lists."""
    if isinstance(error, ClassifierTimeout):
        return ClassifierResult.TIMEOUT, None, []
    if error is not None:
        return ClassifierResult.UNAVAILABLE, None, []
    if not isinstance(raw, dict):
        shown = raw if isinstance(raw, str) else type(raw).__name__
        problem = FieldProblem(field="output", message=f"is not a JSON object: {shown!r:.200}")
        return ClassifierResult.INVALID, None, [problem]
    try:
        return ClassifierResult.VALID, decision_contract(business).model_validate(raw), []
    except ValidationError as exc:
        return ClassifierResult.INVALID, None, validation_problems(exc)


def _classifier_failed(run: Run, stage: Stage, error: Exception, now: datetime) -> None:
    error_class = type(error).__name__
    spent = run.classify_attempts - run.classify_attempts_spent
    # A refused request would be refused again: held now, not after every attempt.
    if isinstance(error, ClassifierRefused) or spent >= run.channel.max_classifier_attempts:
        stage.record(run, StageOutcome.RETRY_EXHAUSTED, error_class)
        record_transition(
            run,
            run.hold,
            outcome=Outcome.RETRY_EXHAUSTED,
            field="classifier",
            detail=f"{run.classify_attempts} attempts, last: {error}",
        )
        return
    stage.record(run, StageOutcome.RETRY_SCHEDULED, error_class)
    delay = retry_delay(run.classify_attempts - run.classify_attempts_spent)
    record_transition(
        run,
        run.schedule_classifier_retry,
        next_attempt_at=now + timedelta(seconds=delay),
    )


def hold_with_problems(
    run: Run,
    stage: Stage,
    outcome: Outcome,
    problems: list[FieldProblem],
    decided: dict[str, Any] | None = None,
) -> None:
    """Hold the run for a person, naming the first offending field and listing them all
    (with the decision policy took, when it took one)."""
    record_transition(
        run,
        run.hold,
        stage=stage,
        stage_outcome=StageOutcome(outcome),
        outcome=outcome,
        field=problems[0].field,
        detail=json.dumps([p.model_dump() for p in problems]),
        decided=decided,
        save=False,
    )


def _accept_classification(
    run: Run, stage: Stage, decision: ClassifierDecision, business: Catalogue
) -> None:
    payload = decision.model_dump(mode="json")
    # Read in the request's language: `03.04.2026` in a German mail is the 3rd of April.
    language = (run.enrichment or {}).get("language") or None
    problems = extraction_problems(
        payload["fields"], known_customers=customers_known, language=language
    )
    # The effect's parameters are made from this reading: a missing or malformed one is a
    # problem of the reading, for a person to correct before anything is decided.
    named = {problem.field for problem in problems}
    problems += [
        problem
        for problem in effect_problems(business, decision.requested_effect, run, payload)
        if problem.field not in named
    ]
    if problems:
        hold_with_problems(run, stage, Outcome.EXTRACTION_INVALID, problems)
        return
    record_transition(
        run,
        run.classify,
        stage=stage,
        checkpoint={"classification": payload},
        decision=payload,
        save=False,
    )
    shadows_send(run)  # candidates read it too, later, on their own
