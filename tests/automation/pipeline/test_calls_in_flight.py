"""Model calls at production speed, with real worker processes (`manage.py qcluster`) on
PostgreSQL and a real chat-completions server on 127.0.0.1: many calls in flight per worker,
the provider's limits kept by every worker together, the breaker, and a worker killed with
calls in flight."""

from __future__ import annotations

import bisect
import json
import os
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator

import pytest
from django.utils import timezone

from automation.classifiers import classifier_versions
from automation.classifiers.models import ClassificationAttempt, ModelServer
from automation.intake.services import intake_submit
from automation.models import IntakeChannel, Run, State, Task
from automation.pipeline.operations import sweep_due
from tests.automation.conftest import MODEL, SettingsWrapper, configure
from tests.chatserver import ChatServer, running_chat_server, status
from tests.conftest import make_event
from tests.servers import qcluster

pytestmark = pytest.mark.django_db(transaction=True)

READER = ("reader",)


@pytest.fixture
def chat() -> Iterator[ChatServer]:
    with running_chat_server(model=MODEL, default=READER) as server:
        yield server


@pytest.fixture
def channel(policy: None) -> IntakeChannel:
    classifier_version, prompt_version = classifier_versions("openai-compatible")
    return IntakeChannel.objects.create(
        name="model",
        classifier="openai-compatible",
        classifier_version=classifier_version,
        workflow_version="workflow-1",
        prompt_version=prompt_version,
        max_classifier_attempts=3,
    )


def submit(channel: IntakeChannel, count: int, tag: str = "evt") -> list[int]:
    """`count` runs and their messages, committed (the cluster reads them)."""
    ids = []
    for n in range(count):
        result = intake_submit(
            channel=channel,
            raw=json.dumps(make_event(event_id=f"{tag}-{n}")).encode(),
            content_type="application/json",
            source="test",
        )
        assert result.run is not None
        ids.append(result.run.pk)
    return ids


def cluster(chat: ChatServer, **settings: str) -> subprocess.Popen[bytes]:
    defaults = dict(Q_WORKERS="2", OPENAI_MODEL=MODEL, CLASSIFIER_DEADLINE="10")
    return qcluster(**{**defaults, **settings, "OPENAI_BASE_URL": chat.base_url})


def stop(process: subprocess.Popen[bytes]) -> None:
    os.killpg(process.pid, signal.SIGKILL)  # these tests are about runs, not the shutdown
    process.wait(timeout=30)


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Wait for `condition`, sweeping every two seconds as the cluster's schedule does every
    minute (a transactional test's flush empties the schedule): a classifier retry come due
    is sent by the sweep."""
    deadline = time.monotonic() + timeout
    swept = time.monotonic()
    while not condition():
        if time.monotonic() - swept > 2:
            sweep_due()
            swept = time.monotonic()
        if time.monotonic() > deadline:
            where = Counter(
                Run.objects.values_list("state", "outcome", "waiting_for", "classify_attempts")
            )
            stuck = list(
                Run.objects.exclude(state=State.COMPLETED).values(
                    "pk",
                    "state",
                    "next_attempt_at",
                    "dispatched_at",
                    "lease_expires_at",
                    "classify_attempts_spent",
                )[:3]
            )
            raise AssertionError(
                f"timed out waiting for {what} at {timezone.now()}; runs: "
                f"{where.most_common(12)}; for example {stuck}"
            )
        time.sleep(0.2)


def completed(ids: list[int]) -> Callable[[], bool]:
    return lambda: Run.objects.filter(pk__in=ids, state=State.COMPLETED).count() == len(ids)


def assert_each_completed_once(ids: list[int]) -> None:
    """Every run completed, with one effect each (nothing lost, nothing done twice)."""
    runs = Run.objects.filter(pk__in=ids)
    assert sorted(runs.values_list("state", flat=True).distinct()) == [State.COMPLETED]
    assert Task.objects.filter(run__in=ids).count() == len(ids)
    assert set(Task.objects.filter(run__in=ids).values_list("run", flat=True)) == set(ids)


def most_in_window(arrivals: list[float], window: float) -> int:
    """The most requests that arrived within any `window` seconds."""
    times = sorted(arrivals)
    return max(bisect.bisect_left(times, t + window) - i for i, t in enumerate(times))


def test_two_workers_keep_64_calls_in_flight(chat: ChatServer, channel: IntakeChannel) -> None:
    chat.latency = 1.5
    ids = submit(channel, 160)
    workers = cluster(chat, OPENAI_CONCURRENCY="64")
    try:
        wait_for(completed(ids), 90, "160 runs")
    finally:
        stop(workers)

    assert chat.most_in_flight == 64  # the cap, from two processes: 32 each
    assert chat.count() == 160  # one call per run
    assert_each_completed_once(ids)
    attempts = ClassificationAttempt.objects.filter(run__in=ids)
    assert set(attempts.values_list("outcome", flat=True)) == {"valid"}
    # Latency is the call's own, not its wait for a slot.
    assert max(attempts.values_list("latency_ms", flat=True)) < 5000


def test_a_rate_of_120_a_minute_is_kept_by_two_workers_together(
    chat: ChatServer, channel: IntakeChannel
) -> None:
    ids = submit(channel, 30)
    workers = cluster(chat, OPENAI_CONCURRENCY="64", OPENAI_RPM="120")
    try:
        wait_for(completed(ids), 90, "30 runs at two a second")
    finally:
        stop(workers)

    arrivals = [request.at for request in chat.requests]
    assert len(arrivals) == 30
    # Never more than the rate allows in a minute, and two a second over any ten seconds,
    # give or take two: each call keeps its moment, but a busy machine may wake a call's
    # thread late, so that it arrives beside the next one.
    assert most_in_window(arrivals, 60) <= 120
    assert most_in_window(arrivals, 10) <= 21 + 2
    # Spread over the 14.5 s the rate asks for (unlimited, the 30 arrive within a second),
    # less what a first call woken late takes off the span.
    assert max(arrivals) - min(arrivals) >= 29 * 0.5 - 3
    assert_each_completed_once(ids)


def test_429s_to_half_the_requests_fail_no_run_and_keep_the_rate(
    chat: ChatServer, channel: IntakeChannel
) -> None:
    chat.then(*[b for _ in range(10) for b in (status(429, Retry_After="1"), READER)])
    ids = submit(channel, 10)
    workers = cluster(chat, OPENAI_CONCURRENCY="64", OPENAI_RPM="120")
    try:
        wait_for(completed(ids), 120, "10 runs through 429s")
    finally:
        stop(workers)

    assert_each_completed_once(ids)
    assert chat.count() == 20  # ten turned away, ten read
    arrivals = [request.at for request in chat.requests]
    # The 429s count against the rate too: two a second at most, whatever they answered,
    # give or take two for a call whose thread a busy machine woke late (as above).
    assert most_in_window(arrivals, 5) <= 11 + 2
    assert most_in_window(arrivals, 1) <= 3 + 1
    assert ModelServer.objects.get(key=chat.base_url).paused_until is not None
    # A 429 spends no attempt: every run kept its whole budget.
    for run in Run.objects.filter(pk__in=ids):
        assert run.classify_attempts - run.classify_attempts_spent == 1
        outcomes = ClassificationAttempt.objects.filter(run=run).values_list("outcome", flat=True)
        assert sorted(set(outcomes)) in (["valid"], ["rate_limited", "valid"])
        assert list(outcomes).count("valid") == 1
    rate_limited = ClassificationAttempt.objects.filter(run__in=ids, outcome="rate_limited")
    assert rate_limited.count() == 10


def test_a_server_down_under_1000_queued_runs_gets_probes_not_attempts(
    chat: ChatServer, channel: IntakeChannel
) -> None:
    chat.default = status(503)
    ids = submit(channel, 1000)
    workers = cluster(
        chat,
        OPENAI_CONCURRENCY="64",
        OPENAI_BREAKER_FAILURES="5",
        OPENAI_BREAKER_COOLING="4",
    )
    try:
        wait_for(
            lambda: ModelServer.objects.filter(open_until__isnull=False).exists(),
            60,
            "the breaker to open",
        )
        time.sleep(6)  # down for a cooling period and more: its probe fails
        down = chat.count()
        chat.default = READER
        wait_for(completed(ids), 120, "1000 runs once the server is back")
    finally:
        stop(workers)

    # While down: the calls in flight when the breaker opened (at most the cap), then one
    # probe per cooling period; far from three attempts for each of the 1,000 runs.
    assert down <= 64 + 3, down
    assert_each_completed_once(ids)
    held = Run.objects.filter(pk__in=ids).exclude(state=State.COMPLETED).count()
    assert held == 0


def test_a_worker_killed_with_calls_in_flight_loses_no_run_and_repeats_no_effect(
    chat: ChatServer, channel: IntakeChannel, settings: SettingsWrapper
) -> None:
    # The server holds every call until the workers are killed, however long a busy machine
    # takes to have all 50 in flight (no sweep runs meanwhile: the test's schedule is empty).
    chat.latency = 60.0
    ids = submit(channel, 50)
    lease = dict(OPENAI_CONCURRENCY="64", STAGE_LEASE="12", CLASSIFIER_DEADLINE="90")
    configure(settings, STAGE_LEASE_SECONDS=12)  # the sweep here knows the cluster's lease
    workers = cluster(chat, **lease)
    try:
        wait_for(lambda: chat.in_flight >= 50, 60, "50 calls in flight")
    finally:
        stop(workers)  # SIGKILL, with every call in flight
        chat.latency = 0.0
        chat.release.set()  # the held calls answer a dead client
    assert not Run.objects.filter(pk__in=ids, state=State.COMPLETED).exists()

    # Each lease runs out; the sweep sends each run again, and a new cluster reads them.
    time.sleep(13)
    assert sweep_due(limit=500)["runs"] == 50
    workers = cluster(chat, **{**lease, "CLASSIFIER_DEADLINE": "5"})
    try:
        wait_for(completed(ids), 60, "the 50 runs read again")
    finally:
        stop(workers)

    assert_each_completed_once(ids)
    for run in Run.objects.filter(pk__in=ids):
        # The lost attempt counts, and left no reading: one reading per run.
        assert run.classify_attempts == 2
        assert ClassificationAttempt.objects.filter(run=run).count() == 1
