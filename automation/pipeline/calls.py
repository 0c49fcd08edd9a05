"""Model calls in flight beside a worker's tasks: many at once, without a process each.

A worker process (a django-q2 worker of `qcluster`) takes a run's message, carries it to the
classifier call and takes the call's lease, as it always did. With calls in flight turned
on (`enable`, done by the qcluster command before it forks its workers), it then hands the
call to the pool of its model server and takes its next message at once:

- a pool has `size` slots, each a call in flight. The worker takes a slot before it asks
  the server's limits for a moment (so only calls about to be made hold a moment), and
  waits for one when all are taken: the messages then wait in the broker, where urgent
  ones are served first, so urgent work takes the first free slot;
- a call runs in one of the pool's threads, outside any transaction, waiting first for
  its moment under the rate limit; one HTTP client per server and process keeps its
  connections open (automation.classifiers.openai_compatible);
- its answer goes to the process's one writer thread, which records it and carries the run
  on in a transaction of its own, with a database connection of its own. The slot is free
  again once the answer is written, so a writer falling behind slows the calls instead of
  piling answers up.

Nothing is lost when a worker dies with calls in flight: each run's lease runs out and the
sweep sends it again (a run is read again; its effect key stops a second effect). A worker
that stops in order (a cluster stop, or its recycling after GATEHOUSE_Q_RECYCLE tasks)
finishes its calls and writes their answers before it exits: the pool's threads are joined
at exit, as every ThreadPoolExecutor's are, and the writer goes on until the process's main
thread has ended and nothing is left in flight.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django import db

LOG = logging.getLogger("gatehouse.runs")

# How long the worker waits for a free slot before it gives the run back to the queue (a
# django-q2 task is stopped after the cluster's timeout).
SLOT_WAIT_SECONDS = 20.0

_enabled = False


def enable() -> None:
    """Keep model calls in flight in this process and the workers it forks."""
    global _enabled
    _enabled = True


def enabled() -> bool:
    return _enabled


def pool_size(concurrency: int, workers: int) -> int:
    """A worker's share of the cluster's calls in flight: rounded down, so that the workers
    together never pass the cap (64 for three workers: 21 each), and at least one."""
    return max(concurrency // max(workers, 1), 1)


class Slot:
    """A taken place in a pool: given back once its call's answer is written, or at once
    when the call is not made after all."""

    def __init__(self, pool: CallPool) -> None:
        self._pool = pool
        self._held = True

    def release(self) -> None:
        if self._held:
            self._held = False
            self._pool._free()


class CallPool:
    def __init__(self, name: str, size: int, writer: Writer) -> None:
        self.name = name
        self.size = size
        self._slots = threading.BoundedSemaphore(size)
        self._count_lock = threading.Lock()
        self.in_flight = 0
        self.most_in_flight = 0
        self._threads = ThreadPoolExecutor(max_workers=size, thread_name_prefix="model-call")
        self._writer = writer

    def take(self, timeout: float = SLOT_WAIT_SECONDS) -> Slot | None:
        """A free slot, waiting up to `timeout` seconds; None when none came free."""
        if not self._slots.acquire(timeout=timeout):
            return None
        with self._count_lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        self._writer.holding(+1)
        return Slot(self)

    def _free(self) -> None:
        with self._count_lock:
            self.in_flight -= 1
        self._writer.holding(-1)
        self._slots.release()

    def start(
        self,
        slot: Slot,
        call: Callable[[], Any],
        then: Callable[[Any], object],
        *,
        not_before: float = 0.0,
    ) -> None:
        """Make `call()` in a thread of the pool (not before the monotonic time
        `not_before`), then `then(result)` in the writer; the slot is freed after it."""
        self._threads.submit(self._call, slot, call, then, not_before)

    def _call(
        self, slot: Slot, call: Callable[[], Any], then: Callable[[Any], object], not_before: float
    ) -> None:
        try:
            wait = not_before - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            result = call()
        except BaseException:
            slot.release()
            LOG.exception("model call in %s failed outside the classifier", self.name)
            raise
        self._writer.put(slot, then, result)


class Writer:
    """The process's one thread that writes answers, in the order they came."""

    def __init__(self) -> None:
        self._queue: queue.Queue[tuple[Slot, Callable[[Any], object], Any]] = queue.Queue()
        self._lock = threading.Lock()
        self._held = 0
        self._thread = threading.Thread(target=self._loop, name="model-answers", daemon=False)
        self._thread.start()

    def holding(self, change: int) -> None:
        with self._lock:
            self._held += change

    def put(self, slot: Slot, then: Callable[[Any], object], result: Any) -> None:
        self._queue.put((slot, then, result))

    def _done(self) -> bool:
        """The process is ending (its main thread is over) and no call is left in flight."""
        if threading.main_thread().is_alive():
            return False
        with self._lock:
            return self._held == 0 and self._queue.empty()

    def _loop(self) -> None:
        while not self._done():
            try:
                slot, then, result = self._queue.get(timeout=0.2)
            except queue.Empty:
                continue
            try:
                db.close_old_connections()
                then(result)
            except Exception:
                # The run's lease runs out and the sweep sends it again: read once more.
                LOG.exception("an answer could not be written; its run will be read again")
                db.connection.close()
            finally:
                slot.release()
        db.connection.close()


_pools: dict[str, CallPool] = {}
_writer: Writer | None = None
_pid = 0
_lock = threading.Lock()


def pool_for(server: str, size: int) -> CallPool:
    """This process's pool for the model server (made on first use: a forked worker makes
    its own, never its parent's threads)."""
    global _writer, _pid
    with _lock:
        if _pid != os.getpid():
            _pools.clear()
            _writer = None
            _pid = os.getpid()
        if _writer is None:
            _writer = Writer()
        pool = _pools.get(server)
        if pool is None:
            pool = _pools[server] = CallPool(server, size, _writer)
        return pool


def pools() -> list[CallPool]:
    """The pools of this process."""
    with _lock:
        return list(_pools.values()) if _pid == os.getpid() else []
