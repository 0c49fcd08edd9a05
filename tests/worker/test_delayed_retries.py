"""A retry is sent when its backoff runs out, by a real cluster on PostgreSQL, not by the sweep.

The delivery's answer asks for a retry in 2 s (Retry-After); the message of that retry is
written with the answer and handed out when it is due (worker.dispatch, worker.broker).
Without it the retry waited for the sweep, which runs once a minute (30 s and more here).
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone
from django_q.conf import Conf
from django_q.models import OrmQ
from django_q.signing import SignedPackage

from accounts.roles import roles_ensure
from automation.models import Effect, EffectStatus, Run, State
from tests.automation.pipeline.test_throughput import submit
from tests.catalogues import SIGNING_VARIABLE, activate_effects
from tests.catalogues import http_effect as http_effect_entry
from tests.conftest import Pipeline, decision_for, make_event
from tests.downstream import Downstream, running_downstream
from tests.servers import qcluster
from tests.worker.test_cluster_stop import stop_group, wait_for
from worker.broker import PriorityOrmBroker, PriorityRedisBroker
from worker.dispatch import Priority, batch, enqueue_after_commit

pytestmark = pytest.mark.django_db(transaction=True)

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
SECRET = "s" * 32
EFFECT = "send_internal_notification"


@pytest.fixture
def downstream() -> Iterator[Downstream]:
    with running_downstream(SECRET) as server:
        yield server


@pytest.fixture
def http_effect(monkeypatch: pytest.MonkeyPatch, policy: None, downstream: Downstream) -> None:
    """The active version delivers the effect over HTTP to the receiver. The cluster reads
    that version from the database and inherits the environment that holds its secret."""
    monkeypatch.setenv(SIGNING_VARIABLE, SECRET)
    roles_ensure()  # a version is stored only if the groups its catalogue names exist
    activate_effects({EFFECT: http_effect_entry(downstream.url, read_timeout=5, max_attempts=4)})


def start_cluster(poll: float) -> subprocess.Popen[bytes]:
    """A cluster with a backoff of at most 1 s (so the receiver's Retry-After sets the wait)
    and a fallback poll of `poll` seconds."""
    return qcluster(Q_WORKERS="2", Q_POLL=str(poll), RETRY_BACKOFF_BASE="1", RETRY_BACKOFF_CAP="1")


def test_a_2_s_backoff_is_retried_within_3_s_by_a_real_worker(
    pipeline: Pipeline, downstream: Downstream, http_effect: None
) -> None:
    downstream.then(("status", 503, {"Retry-After": "2"}))  # then 200
    event = make_event(
        event_id="evt-delayed",
        request_type="billing",
        subject="Invoice copy",
        body="Please let finance know about this invoice.",
        requested_action=EFFECT,
    )
    pipeline.record(event["event_id"], [decision_for(event)])
    run = submit(pipeline, event)

    # A fallback poll far longer than the backoff: the pusher must wake when the retry is due.
    cluster = start_cluster(poll=20)
    try:
        wait_for("the run to complete", lambda: Run.objects.get(pk=run.pk).state == State.COMPLETED)
    finally:
        stop_group(cluster)

    effect = Effect.objects.get(run=run)
    assert (effect.status, effect.attempts) == (EffectStatus.DELIVERED, 2)
    # The backoff counts from the start of the attempt that asked for it.
    first, second = effect.attempt_rows.order_by("attempt")
    waited = (second.started_at - first.started_at).total_seconds()
    assert 2.0 <= waited < 3.0, f"the retry started {waited:.2f} s after the first attempt"
    heard = downstream.requests[1].at - downstream.requests[0].at
    assert heard < 3.0, f"the receiver heard the retry {heard:.2f} s after the first request"
    assert downstream.performed == [effect.idempotency_key]


def test_a_delayed_message_is_handed_out_when_due_and_not_before(db: None) -> None:
    cluster = qcluster(Q_POLL="20")
    try:
        enqueue_after_commit("time.sleep", 0)  # spent once the cluster is up
        wait_for("the cluster to take work", lambda: not OrmQ.objects.exists())
        due = timezone.now() + timedelta(seconds=2)
        enqueue_after_commit("time.sleep", 0, not_before=due)
        assert OrmQ.objects.get().lock == due  # handed out once its lock has passed
        wait_for("the delayed message to be spent", lambda: not OrmQ.objects.exists())
        spent = timezone.now()
    finally:
        stop_group(cluster)
    assert spent >= due
    assert (spent - due).total_seconds() < 1.0, f"spent {spent - due} after it was due"


def test_a_due_retry_goes_before_the_backlog_of_its_queue(db: None) -> None:
    """A retry waited its backoff already; under a backlog it is not sent to the back of the
    line again (the soak's second attempts waited 49 s for a backoff of 10 s at most)."""
    with batch():
        for n in range(3 * Conf.BULK):
            enqueue_after_commit("time.sleep", n)  # a backlog of first deliveries
    due = timezone.now() + timedelta(seconds=0.5)
    enqueue_after_commit("time.sleep", "retry", not_before=due)
    broker = PriorityOrmBroker()

    early = [SignedPackage.loads(payload)["args"] for _, payload in broker.dequeue() or []]
    assert early == [(n,) for n in range(Conf.BULK)]  # not before it is due

    enqueue_after_commit("time.sleep", "person", priority=Priority.URGENT)
    time.sleep(max(0.0, (due - timezone.now()).total_seconds()) + 0.05)
    later = [SignedPackage.loads(payload)["args"] for _, payload in broker.dequeue() or []]
    # Urgent work still goes first; then the due retry, ahead of the backlog queued before it.
    assert later[:3] == [("person",), ("retry",), (Conf.BULK,)]


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    """A Redis server of this test's own, on a Unix socket (never the machine's)."""
    socket = tmp_path / "redis.sock"
    server = subprocess.Popen(  # noqa: S603 - the installed server, our own arguments
        [
            REDIS_SERVER,
            "--port",
            "0",
            "--unixsocket",
            str(socket),
            "--save",
            "",
            "--appendonly",
            "no",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while not socket.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        yield f"unix://{socket}"
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_the_redis_broker_hands_a_delayed_message_out_when_due(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No database here: the broker alone, on a Redis server of its own."""
    monkeypatch.setattr(Conf, "REDIS", redis_url)
    broker = PriorityRedisBroker("gatehouse")
    broker.enqueue("at-once")
    due = timezone.now() + timedelta(seconds=1.5)
    broker.enqueue_at("later", due)
    taken: list[tuple[bytes, float]] = []
    deadline = time.monotonic() + 10
    while len(taken) < 2 and time.monotonic() < deadline:
        for _, message in broker.dequeue() or []:
            taken.append((message, time.time()))

    assert [message for message, _ in taken] == [b"at-once", b"later"]
    late = taken[1][1] - due.timestamp()
    assert 0 <= late < 1.5, f"handed out {late:.2f} s after it was due"
    assert left_in(broker) == []


def test_the_redis_broker_puts_a_due_message_before_the_waiting_ones(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Conf, "REDIS", redis_url)
    broker = PriorityRedisBroker("gatehouse")
    for n in range(3):
        broker.enqueue(f"waiting-{n}")
    now = timezone.now()
    broker.enqueue_at("due-second", now - timedelta(seconds=1))
    broker.enqueue_at("due-first", now - timedelta(seconds=2))
    broker.enqueue_at("not-yet", now + timedelta(minutes=1))

    taken = [message for _ in range(5) for _, message in broker.dequeue() or []]
    assert taken == [b"due-first", b"due-second", b"waiting-0", b"waiting-1", b"waiting-2"]
    assert left_in(broker) == [b"not-yet"]


def left_in(broker: PriorityRedisBroker) -> list[bytes]:
    """What is left in the broker's queues and delayed sets."""
    connection = broker.connection
    left = [m for key in broker.keys for m in connection.lrange(key, 0, -1)]
    return left + [m for key in broker.delayed_keys for m in connection.zrange(key, 0, -1)]
