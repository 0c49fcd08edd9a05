"""Effects delivered over HTTP to a real receiver on 127.0.0.1, with time under the test's control.

The receiver (tests/downstream.py) records every request, performs each Idempotency-Key at most
once, and fails on cue. Runs go through intake to `executing`; `pipeline.drain()` makes the first
attempt; later attempts are made by calling `effect_deliver(now=...)` at the time the outbox
asked for, so backoffs, leases and rates are checked without sleeping.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from email.utils import formatdate
from io import StringIO
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import time_machine
from django.contrib.auth.models import Group, User
from django.core.exceptions import PermissionDenied
from django.core.management import call_command
from django.db import connection
from django.utils import timezone
from django_q.models import OrmQ
from django_q.signing import SignedPackage

from accounts.roles import roles_ensure
from automation.effects.http import verify
from automation.effects.services import PAUSE_RECHECK, effect_deliver, effect_pause, effect_resume
from automation.models import (
    AuditEvent,
    BatchStatus,
    Effect,
    EffectAttempt,
    EffectStatus,
    Outcome,
    RecoveryAction,
    RecoveryBatch,
    RecoveryKind,
    Run,
    State,
)
from automation.pipeline.operations import sweep_due
from automation.recovery.services import effects_retry_held
from automation.runs.sending import DELIVER_EFFECT_TASK
from core import backoff as retry_timing
from policy.models import PolicyVersion
from policy.services import (
    DEFAULTS_DIR,
    parse_policy_text,
    policy_version_activate,
    policy_version_create,
)
from tests.catalogues import SIGNING_VARIABLE, activate_effects
from tests.catalogues import http_effect as catalogue_http_effect
from tests.conftest import Pipeline, decision_for, make_event
from tests.database import database_url
from tests.downstream import Downstream, running_downstream
from worker.dispatch import MAX_DELAY, Message, inline


def counts(batch: RecoveryBatch) -> tuple[int, int, int]:
    """Selected, retried and refused runs of a held-effect batch."""
    return batch.total, batch.succeeded, len(batch.failures)


REPO = Path(__file__).resolve().parents[3]
SECRET = "s" * 32
EFFECT = "send_internal_notification"
FAIL_503 = ("status", 503, {})
GATEWAY_503 = ("down", 503, {})


def billing_event(event_id: str = "evt-bill-1") -> dict[str, Any]:
    return make_event(
        event_id=event_id,
        request_type="billing",
        subject="Invoice copy",
        body="Please let finance know about this invoice.",
        requested_action=EFFECT,
    )


# --- fixtures ------------------------------------------------------------------------------


@pytest.fixture
def downstream() -> Iterator[Downstream]:
    with running_downstream(SECRET) as server:
        yield server


@pytest.fixture
def http_effect(
    settings: Any, monkeypatch: pytest.MonkeyPatch, policy: None, downstream: Downstream
) -> Callable[..., PolicyVersion]:
    """Deliver send_internal_notification over HTTP to the receiver; returns `configure`.

    Each `configure(**overrides)` stores and activates a version whose catalogue says so:
    only effects written after it (under that version) are delivered with those settings."""
    monkeypatch.setenv(SIGNING_VARIABLE, SECRET)
    settings.GATEHOUSE = {
        **settings.GATEHOUSE,
        "RETRY_BACKOFF_BASE_SECONDS": 5,
        "RETRY_BACKOFF_CAP_SECONDS": 300,
        "EFFECT_LEASE_SECONDS": 60,
    }
    settings.FAULT_KILL_AFTER_DOWNSTREAM = False  # only ever in the worker subprocess
    roles_ensure()  # a version is stored only if the groups its catalogue names exist

    def configure(**overrides: Any) -> PolicyVersion:
        http = {
            "url": downstream.url,
            "read_timeout": 0.3,
            "connect_timeout": 0.5,
            "max_attempts": 6,
            "deadline_seconds": 3600,
            "honours_idempotency_keys": True,
            **overrides,
        }
        return activate_effects({EFFECT: catalogue_http_effect(**http)})

    configure()
    return configure


@pytest.fixture
def jitter_at_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    """Full jitter draws its upper bound: attempt n waits exactly min(cap, 5 * 2**n) seconds."""
    monkeypatch.setattr(retry_timing, "random", SimpleNamespace(uniform=lambda low, high: high))


@pytest.fixture
def operator(db: None) -> User:
    """An ops lead: may pause and resume effects."""
    roles_ensure()
    user = User.objects.create_user(username="operator", is_staff=True)
    user.groups.add(Group.objects.get(name="ops-leads"))
    return user


# --- helpers -------------------------------------------------------------------------------


def first_attempt(pipeline: Pipeline, event: dict[str, Any]) -> tuple[Run, Effect]:
    """Submit; the drain takes the run to `executing` and makes the effect's first attempt."""
    result = pipeline.submit(event, [decision_for(event)])
    run = pipeline.run(result)
    return run, Effect.objects.get(run=run)


def attempt_rows(effect: Effect) -> list[tuple[int, str, int | None, str]]:
    return list(
        EffectAttempt.objects.filter(effect=effect)
        .order_by("attempt")
        .values_list("attempt", "outcome", "status_code", "error_class")
    )


def deliver_at(effect: Effect, now: datetime) -> str | None:
    return effect_deliver(effect_id=effect.pk, now=now)


def refreshed(*rows: Any) -> None:
    for row in rows:
        row.refresh_from_db()


def hold_unavailable(pipeline: Pipeline, event_id: str) -> tuple[Run, Effect]:
    """Two 503s on a budget of two attempts: the run is held as effect_unavailable."""
    run, effect = first_attempt(pipeline, billing_event(event_id))
    assert effect.status == EffectStatus.RETRY_WAIT
    deliver_at(effect, effect.next_attempt_at)
    refreshed(run, effect)
    assert (run.state, run.outcome) == (State.NEEDS_REVIEW, Outcome.EFFECT_UNAVAILABLE)
    return run, effect


def activate_policy_with_confidence_threshold() -> None:
    """policy-1 with a confidence threshold of 0.8, made the active version."""
    text = (DEFAULTS_DIR / "policy-1.yaml").read_text(encoding="utf-8")
    text = text.replace("version: policy-1", "version: policy-2")
    text = text.replace("  default: 0.0", "  default: 0.8")
    policy_version_create(document=parse_policy_text(text))
    policy_version_activate(name="policy-2")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# --- retries on the backoff ----------------------------------------------------------------


def test_503_three_times_then_200_is_delivered_once_after_four_attempts_on_the_backoff(
    pipeline: Pipeline, downstream: Downstream, http_effect: Any, jitter_at_cap: None
) -> None:
    downstream.then(FAIL_503, FAIL_503, FAIL_503)  # then the default: 200

    run, effect = first_attempt(pipeline, billing_event())

    assert run.state == State.EXECUTING
    assert (effect.status, effect.attempts, effect.response_status) == (
        EffectStatus.RETRY_WAIT,
        1,
        503,
    )
    assert effect.lease_expires_at is None
    starts = [effect.attempt_rows.get().started_at]
    for attempt, backoff in [(2, 10), (3, 20), (4, 40)]:
        due = effect.next_attempt_at
        assert due == starts[-1] + timedelta(seconds=backoff)  # 5 s * 2**(attempt - 1)
        # Early: the message is a no-op, the receiver hears nothing.
        assert deliver_at(effect, due - timedelta(milliseconds=1)) is None
        assert downstream.count() == attempt - 1
        status = deliver_at(effect, due)
        assert downstream.count() == attempt
        starts.append(due)
        effect.refresh_from_db()
    assert status == EffectStatus.DELIVERED

    refreshed(run, effect)
    assert (run.state, run.outcome) == (State.COMPLETED, Outcome.COMPLETED)
    assert (effect.status, effect.attempts, effect.response_status) == (
        EffectStatus.DELIVERED,
        4,
        200,
    )
    assert (effect.response_ref, effect.delivered_at) == ("/received/1", starts[-1])
    assert (effect.next_attempt_at, effect.lease_expires_at, effect.last_error) == (None, None, "")
    assert attempt_rows(effect) == [
        (1, "retry", 503, ""),
        (2, "retry", 503, ""),
        (3, "retry", 503, ""),
        (4, "delivered", 200, ""),
    ]
    rows = list(EffectAttempt.objects.filter(effect=effect).order_by("attempt"))
    assert [row.started_at for row in rows] == starts
    assert all(0 <= row.duration_ms < 2000 for row in rows)
    # Each execute stage is the call it timed: its start and duration, not the moment the
    # answer was recorded (which made every delivery look like 0 ms in the reports).
    calls = run.stages.filter(stage="execute", outcome__in=["retry_scheduled", "delivered"])
    timed = [(s.attempt, s.started_at, s.duration_ms) for s in calls.order_by("attempt")]
    assert timed == [(row.attempt, row.started_at, row.duration_ms) for row in rows]
    # Downstream: four requests under one key, signed, and one effect performed.
    assert downstream.keys() == [effect.idempotency_key] * 4
    assert downstream.performed == [effect.idempotency_key]
    assert all(received.signature_valid for received in downstream.requests)
    assert all(received.signature_as_documented for received in downstream.requests)
    last = downstream.requests[-1]
    assert last.path == "/effects"
    assert last.headers["Content-Type"] == "application/json"
    assert last.payload == effect.payload
    assert not verify("x" * 32, last.signature, last.body, now=timezone.now().timestamp())


def test_a_retry_due_later_than_a_message_is_delayed_is_sent_by_the_sweep_as_it_comes_near(
    pipeline: Pipeline, downstream: Downstream, http_effect: Any
) -> None:
    downstream.then(("status", 503, {"Retry-After": "300"}))
    _, effect = first_attempt(pipeline, billing_event())
    due = effect.next_attempt_at
    assert effect.dispatched_at is None  # too far off for a delayed message: nobody sent one

    assert sweep_due(now=due - MAX_DELAY - timedelta(seconds=1))["effects"] == 0
    assert sweep_due(now=due - MAX_DELAY)["effects"] == 1
    # A delayed message: the broker hands it out when the retry is due, not before.
    (row,) = OrmQ.objects.all()
    assert (SignedPackage.loads(row.payload)["args"], row.lock) == ((effect.pk,), due)
    # It is out: the next sweeps leave the effect alone.
    assert sweep_due(now=due - timedelta(seconds=30))["effects"] == 0
    assert OrmQ.objects.count() == 1


@pytest.mark.parametrize(
    "retry_after, at_least",
    [
        pytest.param("120", 120, id="seconds"),
        # Whole seconds, counted from when the answer arrived: a little under 300 s.
        pytest.param("http-date", 295, id="http-date-5-minutes-on"),
    ],
)
def test_retry_after_from_the_receiver_pushes_the_next_attempt_back(
    pipeline: Pipeline,
    downstream: Downstream,
    http_effect: Any,
    retry_after: str,
    at_least: int,
) -> None:
    if retry_after == "http-date":
        retry_after = formatdate(timezone.now().timestamp() + 300, usegmt=True)
    downstream.then(("status", 429, {"Retry-After": retry_after}))

    run, effect = first_attempt(pipeline, billing_event())

    started = effect.attempt_rows.get().started_at
    assert attempt_rows(effect) == [(1, "retry", 429, "")]
    assert effect.last_error == "HTTP 429"
    assert effect.next_attempt_at >= started + timedelta(seconds=at_least)
    assert deliver_at(effect, started + timedelta(seconds=at_least - 1)) is None
    assert downstream.count() == 1
    assert deliver_at(effect, effect.next_attempt_at) == EffectStatus.DELIVERED
    assert downstream.keys() == [effect.idempotency_key] * 2
    run.refresh_from_db()
    assert run.state == State.COMPLETED


def test_a_refused_connection_is_retried_even_when_the_receiver_does_not_deduplicate(
    pipeline: Pipeline, http_effect: Any
) -> None:
    # Nothing listens there: nothing was sent, so sending again can never double the effect.
    http_effect(url=f"http://127.0.0.1:{free_port()}/effects", honours_idempotency_keys=False)

    run, effect = first_attempt(pipeline, billing_event())

    assert run.state == State.EXECUTING
    assert (effect.status, effect.attempts) == (EffectStatus.RETRY_WAIT, 1)
    assert effect.next_attempt_at is not None
    assert attempt_rows(effect) == [(1, "retry", None, "ConnectError")]
    assert effect.last_error == "ConnectError"


# --- rejected ------------------------------------------------------------------------------


def test_400_fails_the_run_as_effect_rejected_after_one_attempt(
    pipeline: Pipeline, downstream: Downstream, http_effect: Any
) -> None:
    downstream.then(("status", 400, {}))

    run, effect = first_attempt(pipeline, billing_event())

    assert (run.state, run.outcome) == (State.FAILED, Outcome.EFFECT_REJECTED)
    assert run.failure_field == EFFECT
    # The run's reason, read by everyone who reads the run, never quotes the answer.
    assert run.failure_detail == "HTTP 400: the receiver refused the effect"
    assert run.finished_at is not None
    assert (effect.status, effect.attempts, effect.response_status) == (
        EffectStatus.REJECTED,
        1,
        400,
    )
    assert "scripted 400" in effect.response_body
    assert effect.next_attempt_at is None
    assert attempt_rows(effect) == [(1, "rejected", 400, "")]
    # Nothing sends it again: not a late message, not the sweep.
    later = timezone.now() + timedelta(hours=2)
    assert deliver_at(effect, later) is None
    with pipeline.capture():
        assert sweep_due(now=later)["effects"] == 0
    assert downstream.keys() == [effect.idempotency_key]
    assert downstream.performed == []


@pytest.mark.parametrize(
    "extra, body",
    [
        pytest.param({"Idempotent-Replayed": "true"}, None, id="header"),
        pytest.param({}, {"already_performed": True, "id": "pay_81"}, id="json-body"),
    ],
)
def test_a_409_saying_the_key_was_already_performed_is_a_delivery(
    pipeline: Pipeline,
    downstream: Downstream,
    http_effect: Any,
    extra: dict[str, str],
    body: dict[str, Any] | None,
) -> None:
    downstream.then(("status", 409, extra, body) if body else ("status", 409, extra))

    run, effect = first_attempt(pipeline, billing_event())

    assert (run.state, run.outcome) == (State.COMPLETED, Outcome.COMPLETED)
    assert (effect.status, effect.response_status, effect.last_error) == (
        EffectStatus.DELIVERED,
        409,
        "",
    )
    assert effect.response_ref == "http 409: already performed"
    assert attempt_rows(effect) == [(1, "delivered", 409, "")]


@pytest.mark.parametrize(
    "extra, body",
    [
        pytest.param({}, {"error": "conflict"}, id="no-marker"),
        pytest.param({"Idempotent-Replayed": "false"}, None, id="header-false"),
        pytest.param({}, {"already_performed": "yes"}, id="marker-not-true"),
    ],
)
def test_a_409_without_the_marker_is_still_a_rejection(
    pipeline: Pipeline,
    downstream: Downstream,
    http_effect: Any,
    extra: dict[str, str],
    body: dict[str, Any] | None,
) -> None:
    downstream.then(("status", 409, extra, body) if body else ("status", 409, extra))

    run, effect = first_attempt(pipeline, billing_event())

    assert (run.state, run.outcome) == (State.FAILED, Outcome.EFFECT_REJECTED)
    assert attempt_rows(effect) == [(1, "rejected", 409, "")]


def test_two_attempts_in_the_same_second_carry_different_signatures_and_one_key(
    pipeline: Pipeline, downstream: Downstream, http_effect: Any, jitter_at_cap: None
) -> None:
    downstream.then(FAIL_503)
    frozen = datetime(2026, 12, 4, 9, 30, 0, 500_000, tzinfo=UTC)

    with time_machine.travel(frozen, tick=False):
        run, effect = first_attempt(pipeline, billing_event())
        assert deliver_at(effect, effect.next_attempt_at) == EffectStatus.DELIVERED

    first, second = downstream.requests
    assert first.key == second.key == effect.idempotency_key
    assert first.body == second.body
    assert first.signature != second.signature
    parts = [dict(item.split("=", 1) for item in r.signature.split(",")) for r in (first, second)]
    assert [part["t"] for part in parts] == [str(int(frozen.timestamp()))] * 2
    assert parts[0].get("n") != parts[1].get("n")
    assert all(r.signature_as_documented for r in (first, second))
    with time_machine.travel(frozen, tick=False):
        assert all(verify(SECRET, r.signature, r.body, now=time.time()) for r in (first, second))
    assert downstream.performed == [effect.idempotency_key]
    run.refresh_from_db()
    assert run.state == State.COMPLETED


def test_a_retry_of_a_key_the_receiver_performed_gets_its_first_answer(
    pipeline: Pipeline, downstream: Downstream, http_effect: Any, jitter_at_cap: None
) -> None:
    # Performed, answered too late; the receiver's next answer for the key is that first one,
    # whatever it would have answered a new key (here a 503).
    downstream.then(("hang", 5), FAIL_503)

    run, effect = first_attempt(pipeline, billing_event())
    assert deliver_at(effect, effect.next_attempt_at) == EffectStatus.DELIVERED

    refreshed(run, effect)
    assert run.state == State.COMPLETED
    assert attempt_rows(effect) == [
        (1, "uncertain", None, "ReadTimeout"),
        (2, "delivered", 200, ""),
    ]
    assert effect.response_ref == "/received/1"
    assert [r.performed for r in downstream.requests] == [True, False]
    assert downstream.requests[1].behaviour == FAIL_503
    assert downstream.performed == [effect.idempotency_key]


# --- sent, and no answer -------------------------------------------------------------------

NO_ANSWER = [
    pytest.param(("hang", 5), "ReadTimeout", id="hangs-past-the-read-timeout"),
    pytest.param(("close",), "RemoteProtocolError", id="closes-after-reading"),
]


@pytest.mark.parametrize("behaviour, error_class", NO_ANSWER)
def test_no_answer_is_retried_on_the_same_key_when_the_receiver_deduplicates(
    pipeline: Pipeline,
    downstream: Downstream,
    http_effect: Any,
    jitter_at_cap: None,
    behaviour: tuple[Any, ...],
    error_class: str,
) -> None:
    # At the cap of its jitter the retry is 10 s away: the drain cannot reach it.
    downstream.then(behaviour)

    run, effect = first_attempt(pipeline, billing_event())

    assert run.state == State.EXECUTING
    assert (effect.status, effect.attempts, effect.response_status) == (
        EffectStatus.RETRY_WAIT,
        1,
        None,
    )
    assert effect.last_error == error_class
    assert attempt_rows(effect) == [(1, "uncertain", None, error_class)]
    if behaviour[0] == "hang":
        duration = effect.attempt_rows.get().duration_ms
        assert 250 <= duration < 5000  # gave up at the read timeout, not at the answer
        assert downstream.performed == [effect.idempotency_key]  # it did happen
    assert effect.next_attempt_at is not None

    assert deliver_at(effect, effect.next_attempt_at) == EffectStatus.DELIVERED

    refreshed(run, effect)
    assert (run.state, run.outcome) == (State.COMPLETED, Outcome.COMPLETED)
    assert (effect.attempts, effect.response_status) == (2, 200)
    assert attempt_rows(effect) == [
        (1, "uncertain", None, error_class),
        (2, "delivered", 200, ""),
    ]
    assert downstream.keys() == [effect.idempotency_key] * 2
    assert downstream.performed == [effect.idempotency_key]


@pytest.mark.parametrize("behaviour, error_class", NO_ANSWER)
def test_no_answer_holds_the_run_as_uncertain_when_the_receiver_does_not_deduplicate(
    pipeline: Pipeline,
    downstream: Downstream,
    http_effect: Any,
    behaviour: tuple[Any, ...],
    error_class: str,
) -> None:
    http_effect(honours_idempotency_keys=False)
    downstream.then(behaviour)

    run, effect = first_attempt(pipeline, billing_event())

    assert (run.state, run.outcome) == (State.NEEDS_REVIEW, Outcome.EFFECT_UNCERTAIN)
    assert run.failure_field == EFFECT
    assert run.failure_detail.startswith(f"{error_class}: sent, no answer")
    assert (effect.status, effect.attempts) == (EffectStatus.UNCERTAIN, 1)
    assert (effect.next_attempt_at, effect.lease_expires_at) == (None, None)
    assert attempt_rows(effect) == [(1, "uncertain", None, error_class)]
    # Nobody sends it again on their own: a person reconciles it with the receiver.
    later = timezone.now() + timedelta(days=1)
    assert deliver_at(effect, later) is None
    with pipeline.capture():
        assert sweep_due(now=later)["effects"] == 0
    assert downstream.keys() == [effect.idempotency_key]


def test_a_budget_spent_after_an_uncertain_attempt_holds_the_run_as_uncertain_naming_it(
    pipeline: Pipeline, downstream: Downstream, http_effect: Any
) -> None:
    # 503, 503, a slow 200 the receiver performed but the sender never heard, then five 503s
    # from a gateway in front of it (the receiver itself would answer its first answer).
    http_effect(max_attempts=8)
    downstream.then(FAIL_503, FAIL_503, ("hang", 2), *[GATEWAY_503] * 5)

    run, effect = first_attempt(pipeline, billing_event())
    for _ in range(7):
        assert effect.next_attempt_at is not None
        deliver_at(effect, effect.next_attempt_at)
        effect.refresh_from_db()

    assert [outcome for _, outcome, _, _ in attempt_rows(effect)] == [
        "retry",
        "retry",
        "uncertain",
        *["retry"] * 5,
    ]
    assert downstream.performed == [effect.idempotency_key]  # the third attempt did it
    run.refresh_from_db()
    # Not "could not be reached": the effect may well have been done, and the hold says so.
    assert (run.state, run.outcome) == (State.NEEDS_REVIEW, Outcome.EFFECT_UNCERTAIN)
    assert run.failure_field == EFFECT
    assert run.failure_detail == (
        "attempt 3 may have been performed (ReadTimeout: sent, no answer); "
        "attempt limit reached after 8 attempts; last: HTTP 503; reconcile with the receiver"
    )
    assert (effect.status, effect.next_attempt_at) == (EffectStatus.RETRY_WAIT, None)


# --- held as unavailable, then a batch retry ------------------------------------------------


def test_the_deadline_passing_holds_the_run_and_a_batch_retry_delivers_it_once(
    pipeline: Pipeline,
    downstream: Downstream,
    http_effect: Any,
    jitter_at_cap: None,
    recoverer: User,
) -> None:
    http_effect(deadline_seconds=15)
    downstream.default = FAIL_503
    since = timezone.now()

    run, effect = first_attempt(pipeline, billing_event())
    first_due = effect.next_attempt_at  # +10 s: still before the deadline
    assert first_due <= effect.deadline_at
    deliver_at(effect, first_due)  # the next wait (20 s) would end after the deadline

    refreshed(run, effect)
    assert (run.state, run.outcome) == (State.NEEDS_REVIEW, Outcome.EFFECT_UNAVAILABLE)
    assert run.failure_detail == "deadline passed after 2 attempts; last: HTTP 503"
    assert (effect.status, effect.attempts, effect.attempt_limit) == (
        EffectStatus.RETRY_WAIT,
        2,
        6,
    )
    assert (effect.next_attempt_at, effect.lease_expires_at) == (None, None)
    assert attempt_rows(effect) == [(1, "retry", 503, ""), (2, "retry", 503, "")]
    with pipeline.capture():  # a held effect is left alone by the sweep
        assert sweep_due(now=timezone.now() + timedelta(hours=1))["effects"] == 0
    pipeline.queue.clear()
    assert downstream.count() == 2

    downstream.heal()
    with pipeline.capture():
        result = effects_retry_held(
            since=since, until=timezone.now(), user=recoverer, reason="outage over"
        )
    assert counts(result) == (1, 1, 0)
    pipeline.drain()

    refreshed(run, effect)
    assert (run.state, run.outcome) == (State.COMPLETED, Outcome.COMPLETED)
    assert (effect.status, effect.attempts, effect.attempt_limit) == (
        EffectStatus.DELIVERED,
        3,
        2 + 6,  # a fresh budget on top of what was spent
    )
    assert attempt_rows(effect)[-1] == (3, "delivered", 200, "")
    assert downstream.keys() == [effect.idempotency_key] * 3
    assert downstream.performed == [effect.idempotency_key]


def test_batch_retry_after_an_outage_delivers_each_held_effect_once(
    pipeline: Pipeline, downstream: Downstream, http_effect: Any, recoverer: User
) -> None:
    http_effect(max_attempts=2)
    downstream.default = FAIL_503
    before_window, _ = hold_unavailable(pipeline, "evt-bill-early")
    since = timezone.now()
    held = [hold_unavailable(pipeline, f"evt-bill-{n}") for n in (1, 2)]
    for run, _ in held:
        assert run.failure_detail == "attempt limit reached after 2 attempts; last: HTTP 503"
    activate_policy_with_confidence_threshold()
    low = make_event(event_id="evt-low")
    low_run = pipeline.run(pipeline.submit(low, [decision_for(low, confidence=0.5)]))
    assert (low_run.state, low_run.outcome) == (State.NEEDS_REVIEW, Outcome.LOW_CONFIDENCE)
    until = timezone.now() + timedelta(seconds=1)
    assert downstream.count() == 6

    downstream.heal()
    with pipeline.capture():
        result = effects_retry_held(since=since, until=until, user=recoverer, reason="outage over")
    assert counts(result) == (2, 2, 0)
    # One batch row, one RecoveryAction a run, each naming the batch, who and why.
    assert set(RecoveryAction.objects.values_list("run", "action", "actor", "batch", "reason")) == {
        (run.pk, RecoveryKind.RETRY, recoverer.pk, result.pk, "outage over") for run, _ in held
    }
    assert (result.action, result.status) == (RecoveryKind.RETRY_EFFECT, BatchStatus.FINISHED)
    pipeline.drain()

    for run, effect in held:
        refreshed(run, effect)
        assert (run.state, run.outcome) == (State.COMPLETED, Outcome.COMPLETED)
        assert (effect.status, effect.attempts, effect.attempt_limit) == (
            EffectStatus.DELIVERED,
            3,
            4,
        )
        assert [row[1] for row in attempt_rows(effect)] == ["retry", "retry", "delivered"]
        assert downstream.keys().count(effect.idempotency_key) == 3
        assert AuditEvent.objects.filter(
            run=run, action="run.retry_effect", actor=recoverer, data__reason="outage over"
        ).exists()
    assert sorted(downstream.performed) == sorted(effect.idempotency_key for _, effect in held)
    assert downstream.count() == 6 + 2  # one more request for each of the two
    # Outside the window, or held for another reason: untouched.
    untouched = Run.objects.get(pk=before_window.pk)
    assert (untouched.state, untouched.outcome) == (State.NEEDS_REVIEW, Outcome.EFFECT_UNAVAILABLE)
    assert untouched.version == before_window.version
    again = Run.objects.get(pk=low_run.pk)
    assert (again.state, again.outcome, again.version) == (
        State.NEEDS_REVIEW,
        Outcome.LOW_CONFIDENCE,
        low_run.version,
    )
    # Asked for explicitly, a run not held for its effect is refused, and that is recorded.
    refused = effects_retry_held(
        since=since,
        until=until,
        user=recoverer,
        reason="wrong queue",
        outcome=Outcome.LOW_CONFIDENCE,
    )
    assert counts(refused) == (1, 0, 1)
    assert RecoveryAction.objects.get(run=low_run).result == Outcome.STATE_CONFLICT
    assert Run.objects.get(pk=low_run.pk).state == State.NEEDS_REVIEW
    assert AuditEvent.objects.filter(
        run=low_run, action="transition.refused", data__requested="retry_effect"
    ).exists()


def test_batch_retry_is_refused_to_someone_without_the_recover_permission(
    pipeline: Pipeline, downstream: Downstream, http_effect: Any, recoverer: User
) -> None:
    outsider = User.objects.create_user(username="outsider", is_staff=True)
    outsider.groups.add(Group.objects.get(name="finance-approvers"))
    assert not outsider.has_perm("automation.recover_run")
    http_effect(max_attempts=2)
    downstream.default = FAIL_503
    since = timezone.now()
    run, effect = hold_unavailable(pipeline, "evt-bill-1")
    downstream.heal()

    with pipeline.capture(), pytest.raises(PermissionDenied):
        effects_retry_held(since=since, until=timezone.now(), user=outsider, reason="outage over")
    pipeline.drain()

    refreshed(run, effect)
    assert (run.state, run.outcome) == (State.NEEDS_REVIEW, Outcome.EFFECT_UNAVAILABLE)
    assert (effect.status, effect.attempts, effect.next_attempt_at) == (
        EffectStatus.RETRY_WAIT,
        2,
        None,
    )
    assert downstream.count() == 2
    assert downstream.performed == []


def test_the_retry_held_command_lists_without_commit_and_records_a_batch_with_it(
    pipeline: Pipeline, downstream: Downstream, http_effect: Any, recoverer: User
) -> None:
    http_effect(max_attempts=2)
    downstream.default = FAIL_503
    since = timezone.now()
    run, effect = hold_unavailable(pipeline, "evt-bill-1")
    downstream.heal()
    args = ["retry-held", "--since", since.isoformat(), "--reason", "outage over"]
    args += ["--user", recoverer.username]

    dry = StringIO()
    call_command("effects", *args, stdout=dry)
    assert f"would retry the effect of 1 run(s): [{run.pk}]" in dry.getvalue()
    assert not RecoveryBatch.objects.exists() and not RecoveryAction.objects.exists()
    assert Run.objects.get(pk=run.pk).version == run.version

    out = StringIO()
    with pipeline.capture():
        call_command("effects", *args, "--commit", stdout=out)
    pipeline.drain()

    assert "1/1 done, 1 ok, 0 failed" in out.getvalue()
    refreshed(run, effect)
    assert (run.state, effect.status) == (State.COMPLETED, EffectStatus.DELIVERED)
    assert RecoveryAction.objects.get(run=run).batch == RecoveryBatch.objects.get()


# --- pause and resume ----------------------------------------------------------------------


def test_a_paused_effect_sends_nothing_and_spends_no_attempt_until_resumed(
    pipeline: Pipeline, downstream: Downstream, http_effect: Any, operator: User
) -> None:
    effect_pause(name=EFFECT, user=operator)
    before = timezone.now()

    run, effect = first_attempt(pipeline, billing_event())

    assert run.state == State.EXECUTING
    assert (effect.status, effect.attempts) == (EffectStatus.PENDING, 0)
    assert before + PAUSE_RECHECK <= effect.next_attempt_at <= timezone.now() + PAUSE_RECHECK
    assert downstream.count() == 0
    # Due again while still paused: it looks again later, still without an attempt.
    due = effect.next_attempt_at
    assert deliver_at(effect, due) is None
    effect.refresh_from_db()
    assert (effect.attempts, effect.next_attempt_at) == (0, due + PAUSE_RECHECK)
    assert not EffectAttempt.objects.filter(effect=effect).exists()
    assert downstream.count() == 0

    with pipeline.capture():
        effect_resume(name=EFFECT, user=operator, rate_per_minute=None)
    pipeline.queue.clear()  # what its own nudges do: see the xfail test below
    assert deliver_at(effect, effect.next_attempt_at) == EffectStatus.DELIVERED

    refreshed(run, effect)
    assert run.state == State.COMPLETED
    assert attempt_rows(effect) == [(1, "delivered", 200, "")]
    assert downstream.keys() == [effect.idempotency_key]


def test_resumed_effects_drain_at_the_configured_rate(
    pipeline: Pipeline, downstream: Downstream, http_effect: Any, operator: User
) -> None:
    effect_pause(name=EFFECT, user=operator)
    effects = [first_attempt(pipeline, billing_event(f"evt-bill-{n}"))[1] for n in range(4)]
    assert downstream.count() == 0
    with pipeline.capture():
        effect_resume(name=EFFECT, user=operator, rate_per_minute=2)
    pipeline.queue.clear()
    now = max(effect.next_attempt_at for effect in effects)  # every one of them is due

    statuses = [deliver_at(effect, now) for effect in effects]

    assert statuses == [EffectStatus.DELIVERED, EffectStatus.DELIVERED, None, None]
    assert downstream.keys() == [effects[0].idempotency_key, effects[1].idempotency_key]
    for effect in effects[2:]:
        effect.refresh_from_db()
        assert (effect.status, effect.attempts) == (EffectStatus.PENDING, 0)
        assert effect.next_attempt_at == now + timedelta(seconds=30)  # 60 s / 2
    # Half a minute on, the last minute still holds two deliveries: they wait again.
    assert [deliver_at(effect, now + timedelta(seconds=30)) for effect in effects[2:]] == [
        None,
        None,
    ]
    assert downstream.count() == 2
    # A minute on, the rest go.
    later = now + timedelta(minutes=1)
    assert [deliver_at(effect, later) for effect in effects[2:]] == [EffectStatus.DELIVERED] * 2
    assert downstream.keys() == [effect.idempotency_key for effect in effects]
    assert sorted(downstream.performed) == sorted(effect.idempotency_key for effect in effects)
    for effect in effects:
        effect.refresh_from_db()
        assert (effect.status, effect.attempts) == (EffectStatus.DELIVERED, 1)


def test_resuming_sends_the_waiting_deliveries_at_once(
    pipeline: Pipeline, downstream: Downstream, http_effect: Any, operator: User
) -> None:
    effect_pause(name=EFFECT, user=operator)
    run, effect = first_attempt(pipeline, billing_event())
    assert downstream.count() == 0

    with pipeline.capture():
        effect_resume(name=EFFECT, user=operator, rate_per_minute=None)
    pipeline.drain()

    assert downstream.keys() == [effect.idempotency_key]
    run.refresh_from_db()
    assert run.state == State.COMPLETED


# --- a worker killed after the receiver answered --------------------------------------------


def until_the_effect_is_written(pipeline: Pipeline, event: dict[str, Any]) -> Run:
    """Commit the run to `executing` with its pending effect; its delivery message is dropped."""
    result = pipeline.submit(event, [decision_for(event)], drain=False)
    for _ in range(50):
        if not pipeline.queue:
            break
        message = pipeline.queue.popleft()
        if message.func != DELIVER_EFFECT_TASK:
            with pipeline.capture():
                message.run()
    run = pipeline.run(result)
    assert run.state == State.EXECUTING
    return run


def deliver_in_a_worker_killed_after_the_answer(effect: Effect) -> subprocess.CompletedProcess[str]:
    """effect_deliver in a fresh process on the test database, SIGKILLed after the answer.
    The effect's version in that database says how to deliver it; the process is given the
    secret its catalogue signs with by name."""
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "GATEHOUSE_FAULT_KILL_AFTER_DOWNSTREAM": "1",
        SIGNING_VARIABLE: SECRET,
    }
    code = (
        "from automation.effects.services import effect_deliver; "
        f"effect_deliver(effect_id={effect.pk})"
    )
    return subprocess.run(  # noqa: S603 - our own interpreter and manage.py
        [sys.executable, "manage.py", "shell", "-c", code],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_after_the_answer_is_retried_on_its_key_and_counts_once_downstream(
    pipeline: Pipeline, downstream: Downstream, http_effect: Any
) -> None:
    run = until_the_effect_is_written(pipeline, billing_event())
    effect = Effect.objects.get(run=run)
    assert (effect.status, effect.attempts) == (EffectStatus.PENDING, 0)

    worker = deliver_in_a_worker_killed_after_the_answer(effect)

    assert worker.returncode == -signal.SIGKILL, worker.stderr
    assert downstream.keys() == [effect.idempotency_key]
    assert downstream.performed == [effect.idempotency_key]
    refreshed(run, effect)
    assert run.state == State.EXECUTING
    assert (effect.status, effect.attempts, effect.delivered_at) == (EffectStatus.PENDING, 1, None)
    assert effect.lease_expires_at is not None
    assert not EffectAttempt.objects.filter(effect=effect).exists()
    lease = effect.lease_expires_at

    # While the lease runs, neither the sweep nor a late message touches it.
    with pipeline.capture():
        assert sweep_due(now=lease - timedelta(seconds=1))["effects"] == 0
    assert deliver_at(effect, lease - timedelta(seconds=1)) is None
    assert downstream.count() == 1
    pipeline.queue.clear()
    # Once it has run out, the sweep picks the effect up again.
    after = lease + timedelta(seconds=1)
    with pipeline.capture():
        assert sweep_due(now=after)["effects"] == 1
    assert Message(DELIVER_EFFECT_TASK, (effect.pk,)) in pipeline.queue
    pipeline.queue.clear()

    assert deliver_at(effect, after) == EffectStatus.DELIVERED

    refreshed(run, effect)
    assert (run.state, run.outcome) == (State.COMPLETED, Outcome.COMPLETED)
    assert (effect.status, effect.attempts, effect.lease_expires_at) == (
        EffectStatus.DELIVERED,
        2,
        None,
    )
    assert attempt_rows(effect) == [(1, "lost", None, "WorkerLost"), (2, "delivered", 200, "")]
    assert downstream.keys() == [effect.idempotency_key] * 2
    assert [received.performed for received in downstream.requests] == [True, False]
    assert downstream.performed == [effect.idempotency_key]  # exactly one effect for that key


@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_after_the_answer_holds_the_run_when_the_receiver_does_not_deduplicate(
    pipeline: Pipeline, downstream: Downstream, http_effect: Any
) -> None:
    http_effect(honours_idempotency_keys=False)
    run = until_the_effect_is_written(pipeline, billing_event())
    effect = Effect.objects.get(run=run)
    worker = deliver_in_a_worker_killed_after_the_answer(effect)
    assert worker.returncode == -signal.SIGKILL, worker.stderr
    assert downstream.count() == 1
    effect.refresh_from_db()

    deliver_at(effect, effect.lease_expires_at + timedelta(seconds=1))

    assert downstream.count() == 1  # a receiver without deduplication would act twice
    refreshed(run, effect)
    assert (run.state, run.outcome) == (State.NEEDS_REVIEW, Outcome.EFFECT_UNCERTAIN)
    assert effect.status == EffectStatus.UNCERTAIN


# --- the rate under concurrent workers -------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_resume_rate_holds_when_workers_deliver_at_once(
    pipeline: Pipeline, downstream: Downstream, http_effect: Any, operator: User
) -> None:
    http_effect(read_timeout=3)
    effect_pause(name=EFFECT, user=operator)
    effects = [first_attempt(pipeline, billing_event(f"evt-bill-{n}"))[1] for n in range(4)]
    with pipeline.capture():
        effect_resume(name=EFFECT, user=operator, rate_per_minute=2)
    pipeline.queue.clear()
    downstream.default = ("hang", 0.5)  # a slow but healthy receiver: answers 200 in 0.5 s
    now = max(effect.next_attempt_at for effect in effects)
    barrier = threading.Barrier(len(effects))
    errors: list[BaseException] = []

    def worker(effect: Effect) -> None:
        try:
            with inline():
                barrier.wait(timeout=10)
                deliver_at(effect, now)
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=(effect,)) for effect in effects]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert errors == []

    assert downstream.count() <= 2
