"""A model server's limits, breaker and budget, kept in PostgreSQL for every worker.

These tests carry runs in this process (the inline queue) against a real chat-completions
server on 127.0.0.1; tests/automation/pipeline/test_calls_in_flight.py runs the same against real
worker processes.
"""

from __future__ import annotations

import itertools
from datetime import timedelta
from decimal import Decimal

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from audit.models import AuditAction, AuditEvent
from automation.classifiers import servers
from automation.classifiers.models import ModelServer
from automation.models import Outcome, Run, State
from automation.pipeline.services import run_advance
from tests.automation.classifiers.test_openai_classifier import EVENT, GOOD, attempts
from tests.automation.conftest import SettingsWrapper, configure, llm_pipeline
from tests.chatserver import ChatServer, content, status
from tests.conftest import Pipeline, make_event

pytestmark = pytest.mark.usefixtures("policy")


def model_server(chat: ChatServer) -> ModelServer:
    return ModelServer.objects.get(key=chat.base_url)


def submit(pipeline: Pipeline, n: int) -> Run:
    """Submit and carry the run as far as it goes now (no backoff fast-forwarded)."""
    result = pipeline.submit(make_event(event_id=f"evt-{n}"), drain=False)
    pipeline.drain(fast_forward=False)
    return pipeline.run(result)


# --- 429: everybody pauses, nobody's attempt is spent ------------------------------------


def test_a_429_pauses_the_server_and_spends_no_attempt(
    llm: SettingsWrapper, chat: ChatServer
) -> None:
    pipeline = llm_pipeline("llm", attempts=2)
    # Three 429s would exhaust two attempts if they counted.
    chat.then(*[status(429, Retry_After="7")] * 3, content(GOOD))

    before = timezone.now()
    run = pipeline.run(pipeline.submit(EVENT, drain=False))
    pipeline.drain(fast_forward=False)
    run.refresh_from_db()

    assert run.state == State.ENRICHED
    assert run.next_attempt_at is not None
    assert (
        before + timedelta(seconds=7)
        <= run.next_attempt_at
        <= timezone.now() + timedelta(seconds=7)
    )
    paused = model_server(chat).paused_until
    assert paused is not None and paused >= before + timedelta(seconds=7)

    pipeline.drain()  # each wait run out in turn
    run.refresh_from_db()
    assert (run.state, run.outcome) == (State.COMPLETED, Outcome.COMPLETED)
    assert attempts(run) == [
        (1, "rate_limited"),
        (2, "rate_limited"),
        (3, "rate_limited"),
        (4, "valid"),
    ]
    assert run.classify_attempts - run.classify_attempts_spent == 1
    assert chat.count() == 4


def test_a_pause_holds_back_every_run_not_just_the_one_that_got_it(
    llm: SettingsWrapper, chat: ChatServer
) -> None:
    pipeline = llm_pipeline("llm", attempts=2)
    chat.then(status(429, Retry_After="60"))
    first = submit(pipeline, 1)
    assert chat.count() == 1
    second = submit(pipeline, 2)

    # The second run was not sent: the pause is the server's, for everybody.
    assert chat.count() == 1
    second.refresh_from_db()
    assert second.state == State.ENRICHED
    assert second.waiting_for == servers.Waiting.CAPACITY
    assert second.next_attempt_at is not None
    assert second.next_attempt_at >= timezone.now() + timedelta(seconds=55)
    assert first.pk != second.pk


# --- the circuit breaker ------------------------------------------------------------------


@pytest.fixture
def breaker(llm: SettingsWrapper) -> SettingsWrapper:
    configure(llm, OPENAI_BREAKER_FAILURES=2, OPENAI_BREAKER_COOLING_SECONDS=60)
    return llm


def test_the_breaker_opens_after_failures_in_a_row_and_runs_wait_without_calling(
    breaker: SettingsWrapper, chat: ChatServer
) -> None:
    pipeline = llm_pipeline("llm", attempts=3)
    chat.then(status(503), status(503))
    submit(pipeline, 1)
    submit(pipeline, 2)
    state = model_server(chat)
    assert state.failures == 2 and state.open_until is not None
    assert "503" in state.last_error

    waiting = [submit(pipeline, n) for n in range(3, 8)]
    assert chat.count() == 2  # nobody called it while it is open
    for run in waiting:
        run.refresh_from_db()
        assert (run.state, run.waiting_for) == (State.ENRICHED, servers.Waiting.BREAKER)
        assert run.classify_attempts == 0  # no attempt taken
        # Back after the cooling, spread over a cooling period (not all at once).
        assert run.next_attempt_at is not None
        assert state.open_until <= run.next_attempt_at <= state.open_until + timedelta(seconds=60)
        why = AuditEvent.objects.get(run=run, action=AuditAction.RUN_WAITING).data["why"]
        assert "circuit breaker opened after 2 failures" in why and "503" in why

    # Cooled down: one probe goes; its answer closes the breaker, and everybody goes on.
    chat.default = content(GOOD)
    pipeline.drain()
    assert model_server(chat).open_until is None
    assert Run.objects.filter(state=State.COMPLETED).count() == 7
    # Two failures, then one call per run: no waiting run spent an attempt on the outage.
    assert chat.count() == 2 + 7


def test_a_failed_probe_opens_the_breaker_again(breaker: SettingsWrapper, chat: ChatServer) -> None:
    pipeline = llm_pipeline("llm", attempts=3)
    chat.then(status(503), status(503), status(503))
    submit(pipeline, 1)
    submit(pipeline, 2)
    opened = model_server(chat).open_until
    assert opened is not None
    run = submit(pipeline, 3)
    run.refresh_from_db()

    # The probe comes due and fails: open once more, from then.
    later = run.next_attempt_at
    assert later is not None and later >= opened
    run_advance(run_id=run.pk, now=later)
    state = model_server(chat)
    assert chat.count() == 3
    assert state.open_until == later + timedelta(seconds=60)
    assert state.probe_until is None


def test_with_hold_a_run_goes_to_a_person_at_once_naming_the_breaker(
    breaker: SettingsWrapper, chat: ChatServer
) -> None:
    configure(breaker, OPENAI_WHEN_UNAVAILABLE="hold")
    pipeline = llm_pipeline("llm", attempts=3)
    chat.then(status(503), status(503))
    submit(pipeline, 1)
    submit(pipeline, 2)

    run = submit(pipeline, 3)
    run.refresh_from_db()
    assert (run.state, run.outcome) == (State.NEEDS_REVIEW, Outcome.RETRY_EXHAUSTED)
    assert "circuit breaker" in run.failure_detail
    assert "GATEHOUSE_OPENAI_WHEN_UNAVAILABLE" in run.failure_detail
    assert chat.count() == 2


# --- the daily budget ---------------------------------------------------------------------


def test_a_spent_budget_makes_runs_wait_for_tomorrow(
    llm: SettingsWrapper, chat: ChatServer
) -> None:
    # 1,000 + 500 tokens at 1 and 2 a million: 0.002 a call, so two calls spend more than
    # the budget of 0.003.
    chat.usage = (1000, 500)
    configure(llm, OPENAI_PRICES={"test-model": "1/2"}, OPENAI_DAILY_BUDGET="0.003")
    chat.default = content(GOOD)
    pipeline = llm_pipeline("llm", attempts=2)
    submit(pipeline, 1)
    submit(pipeline, 2)
    assert model_server(chat).spent == Decimal("0.004")

    run = submit(pipeline, 3)
    run.refresh_from_db()
    assert chat.count() == 2
    assert (run.state, run.waiting_for) == (State.ENRICHED, servers.Waiting.BUDGET)
    midnight = timezone.localtime().replace(hour=0, minute=0, second=0, microsecond=0)
    assert run.next_attempt_at == midnight + timedelta(days=1)
    why = AuditEvent.objects.get(run=run, action=AuditAction.RUN_WAITING).data["why"]
    assert "daily budget of 0.003" in why

    # Tomorrow the day's spend starts again.
    pipeline.drain()
    run.refresh_from_db()
    assert run.state == State.COMPLETED
    assert chat.count() == 3


def test_with_hold_a_spent_budget_sends_runs_to_people(
    llm: SettingsWrapper, chat: ChatServer
) -> None:
    chat.usage = (1000, 500)
    configure(
        llm,
        OPENAI_PRICES={"test-model": "1/2"},
        OPENAI_DAILY_BUDGET="0.001",
        OPENAI_WHEN_OVER_BUDGET="hold",
    )
    chat.default = content(GOOD)
    pipeline = llm_pipeline("llm", attempts=2)
    submit(pipeline, 1)
    run = submit(pipeline, 2)
    run.refresh_from_db()
    assert (run.state, run.outcome) == (State.NEEDS_REVIEW, Outcome.RETRY_EXHAUSTED)
    assert "daily budget of 0.001" in run.failure_detail


# --- the rate limit, in one process -------------------------------------------------------


def test_calls_are_spaced_by_the_requests_per_minute(
    llm: SettingsWrapper, chat: ChatServer
) -> None:
    configure(llm, OPENAI_RPM=240)  # one call every 0.25 s
    chat.default = content(GOOD)
    pipeline = llm_pipeline("llm", attempts=2)
    for n in range(4):
        submit(pipeline, n)
    arrivals = [request.at for request in chat.requests]
    assert len(arrivals) == 4
    # Each call takes the next quarter second (the first may start late, as it opens the
    # connection): never more than one in any quarter of a second.
    assert arrivals[-1] - arrivals[0] >= 0.5
    assert [b - a >= 0.24 for a, b in itertools.pairwise(arrivals)][1:] == [True, True]


# --- the console shows it -----------------------------------------------------------------


def test_the_queues_page_and_the_run_page_show_an_open_breaker(
    breaker: SettingsWrapper, chat: ChatServer, client: Client
) -> None:
    pipeline = llm_pipeline("llm", attempts=3)
    chat.then(status(503), status(503))
    submit(pipeline, 1)
    submit(pipeline, 2)
    run = submit(pipeline, 3)
    user = User.objects.create_superuser("ops", "ops@example.com", "pw")
    client.force_login(user)

    queues = client.get(reverse("queues:list")).content.decode()
    assert "circuit breaker is open" in queues
    assert chat.base_url in queues

    page = client.get(reverse("runs:run", args=[run.pk])).content.decode()
    assert "Waiting for the model server" in page
    assert "circuit breaker opened after 2 failures" in page
