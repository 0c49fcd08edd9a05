"""django-q2's `qcluster`, stopping in order when its whole process group is signalled.

A supervisor (bin/demo, a container runtime, systemd) sends SIGTERM to the cluster's whole
process group. django-q2's sentinel, pusher, workers and monitor then die at once, and the
sentinel can die holding the lock of the cluster's stop event, so the main process waits
on it for good: the stop hung until a SIGKILL.

Here only the main process acts on SIGTERM and SIGINT; every process the cluster forks has
them blocked. The main process sets the stop event, the sentinel stops the pusher, the
workers finish the messages already handed to them and exit, and the cluster ends. If that
takes longer than GATEHOUSE_Q_STOP_GRACE seconds (a task stuck on a slow call), the
remaining processes are killed: nothing is lost by it, since a message is deleted only
once its task is acknowledged and comes back after `retry`, and every step is checkpointed.

It replaces django-q2's own `qcluster` because the `worker` app is installed before
`django_q` (docs/worker.md#the-cluster-command).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections import defaultdict
from pathlib import Path
from types import FrameType
from typing import Any

from django_q.cluster import Cluster
from django_q.management.commands import qcluster

from worker import pools
from worker.conf import setting

LOG = logging.getLogger("gatehouse.broker")
STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}


class Command(qcluster.Command):
    help = "Starts the task cluster; SIGTERM stops it in order within its grace period."

    def handle(self, *args: Any, **options: Any) -> None:
        if options.get("cluster_name"):
            os.environ["Q_CLUSTER_NAME"] = options["cluster_name"]
        os.register_at_fork(after_in_child=_leave_stop_signals_to_the_main_process)
        pools.enable()  # the workers keep calls in flight beside their tasks (worker.pools)
        cluster = Cluster()
        grace = setting("Q_STOP_GRACE")

        stopping = threading.Event()

        def stop(signum: int, frame: FrameType | None) -> None:
            if stopping.is_set():  # a second signal: the stop and its deadline are running
                return
            stopping.set()
            _kill_stragglers_after(grace)
            cluster.sig_handler(signum, frame)

        for number in STOP_SIGNALS:
            signal.signal(number, stop)
        cluster.start()
        if options.get("run_once", False):
            cluster.stop()


def _leave_stop_signals_to_the_main_process() -> None:
    # Blocked, not ignored: django-q2's sentinel resets SIGTERM's handler, not the mask.
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)


def _kill_stragglers_after(grace: float) -> None:
    timer = threading.Timer(grace, _kill_descendants, args=(os.getpid(), grace))
    timer.daemon = True
    timer.start()


def _kill_descendants(root: int, grace: float) -> None:
    pids = _descendants(root)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
            os.kill(pid, signal.SIGKILL)
    if pids:
        LOG.warning(
            "the cluster did not stop within %s s: killed %d processes; their unacknowledged "
            "messages come back after the broker's retry period",
            grace,
            len(pids),
        )


def _descendants(root: int) -> list[int]:
    """Every process below `root`, from /proc (the sentinel's children are not ours)."""
    children: dict[int, list[int]] = defaultdict(list)
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children[parent].append(int(stat.parent.name))
    found, todo = [], [root]
    while todo:
        below = children.get(todo.pop(), [])
        found.extend(below)
        todo.extend(below)
    return found
