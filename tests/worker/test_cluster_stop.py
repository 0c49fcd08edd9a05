"""`qcluster` stops in order when a supervisor signals its whole process group.

A real cluster in its own session, on PostgreSQL, as bin/demo and container runtimes run it:
SIGTERM goes to every process of the group at once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable

import pytest
from django.utils import timezone
from django_q.models import OrmQ

from automation.models import Run, StageRecord, State, Task
from tests.automation.pipeline.test_throughput import STAGES, submit
from tests.conftest import Pipeline, decision_for, make_event
from tests.servers import qcluster
from worker.dispatch import enqueue_after_commit

pytestmark = pytest.mark.django_db(transaction=True)


def start_cluster(grace: float) -> subprocess.Popen[bytes]:
    return qcluster(Q_WORKERS="2", Q_STOP_GRACE=str(grace))


def wait_for(condition: str, predicate: Callable[[], object], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {condition}")


def stop_group(cluster: subprocess.Popen[bytes]) -> float:
    """SIGTERM to the whole group; the seconds until every process of it is gone."""
    started = time.monotonic()
    os.killpg(cluster.pid, signal.SIGTERM)
    try:
        cluster.wait(timeout=60)
        wait_for("the group to empty", lambda: not group_alive(cluster.pid), timeout=30)
    finally:
        if group_alive(cluster.pid):
            os.killpg(cluster.pid, signal.SIGKILL)
    return time.monotonic() - started


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_sigterm_to_the_group_stops_in_order_and_loses_nothing(pipeline: Pipeline) -> None:
    events = [make_event(event_id=f"evt-stop-{n}") for n in range(40)]
    for event in events:
        pipeline.record(event["event_id"], [decision_for(event)])
    runs = [submit(pipeline, event) for event in events]

    cluster = start_cluster(grace=30)
    wait_for("a first completed run", lambda: Run.objects.filter(state=State.COMPLETED).exists())
    seconds = stop_group(cluster)

    # In order: well inside the grace period, so nothing needed killing.
    assert seconds < 10, f"the cluster took {seconds:.1f} s to stop"
    assert cluster.returncode == 0

    # Whatever was left is finished by the next cluster: nothing lost, nothing twice.
    cluster = start_cluster(grace=30)
    try:
        wait_for(
            "every run to complete",
            lambda: Run.objects.filter(state=State.COMPLETED).count() == len(runs),
        )
    finally:
        stop_group(cluster)
    stages = Counter(StageRecord.objects.values_list("stage", flat=True))
    assert stages == Counter({stage: len(runs) for stage in STAGES})
    assert Task.objects.count() == len(runs)


def test_a_task_stuck_past_the_grace_period_is_killed(db: None) -> None:
    enqueue_after_commit("time.sleep", 120)  # a worker that will not finish in time
    cluster = start_cluster(grace=1)
    # Leased by the pusher, then handed to an idle worker within moments.
    wait_for("the message to be leased", lambda: OrmQ.objects.filter(lock__gt=timezone.now()))
    time.sleep(1)
    seconds = stop_group(cluster)
    assert seconds < 8, f"the cluster took {seconds:.1f} s to stop"
    assert not group_alive(cluster.pid)
