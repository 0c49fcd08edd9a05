"""Calls in flight beside a worker's tasks: many at once, without a process each.

A worker process (a django-q2 worker of `qcluster`) takes a message and carries its task to
a slow call to a remote server (a model server's classifier call, today). With calls in
flight turned on (`enable`, done by the qcluster command before it forks its workers), the
task hands the call to the pool of its server and the worker takes its next message at once:

- a pool has `size` slots, each a call in flight. The task takes a slot before it asks
  for anything scarce (so only calls about to be made hold it), and waits for one when all
  are taken: the messages then wait in the broker, where urgent ones are served first, so
  urgent work takes the first free slot;
- a call runs in one of the pool's threads, outside any transaction, not before the
  moment it was given (`not_before`);
- its result goes to the process's one writer thread, which hands it to the task's
  continuation (`then`), with a database connection of its own. The slot is free again
  once the result is written, so a writer falling behind slows the calls instead of
  piling results up.

A worker that stops in order (a cluster stop, or its recycling after `recycle` tasks)
finishes its calls and writes their results before it exits: the pool's threads are joined
at exit, as every ThreadPoolExecutor's are, and the writer goes on until the process's main
thread has ended and every result that came is written. A worker that dies loses its calls in
flight: the task that started them must be safe to send again (each of Gatehouse's is, by
its lease and the sweep: docs/worker.md#pools-of-calls-in-flight).

This module knows nothing of what is called: the classifier's use of it (the slot taken,
the moment under the server's limits, the answer recorded) is automation's, in
`automation/pipeline/classify.py` (`classifier_call_make`).
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

LOG = logging.getLogger("gatehouse.worker")

# How long a task waits for a free slot before it gives its work back to the queue (a
# django-q2 task is stopped after the cluster's timeout).
SLOT_WAIT_SECONDS = 20.0

_enabled = False


def enable() -> None:
    """Keep calls in flight in this process and the workers it forks."""
    global _enabled
    _enabled = True


def enabled() -> bool:
    return _enabled


def pool_size(concurrency: int, workers: int) -> int:
    """A worker's share of the cluster's calls in flight: rounded down, so that the workers
    together never pass the cap (64 for three workers: 21 each), and at least one."""
    return max(concurrency // max(workers, 1), 1)


class Slot:
    """A taken place in a pool: given back once its call's result is written, or at once
    when the call is not made after all."""

    def __init__(self, pool: CallPool) -> None:
        self._pool = pool
        self._held = True

    def release(self) -> None:
        if self._held:
            self._held = False
            self._pool._free()


class CallPool:
    """The calls in flight to one server in this process: `size` slots and as many threads."""

    def __init__(self, name: str, size: int, writer: Writer) -> None:
        self.name = name
        self.size = size
        self._slots = threading.BoundedSemaphore(size)
        self._count_lock = threading.Lock()
        self.in_flight = 0
        self.most_in_flight = 0
        self._threads = ThreadPoolExecutor(max_workers=size, thread_name_prefix="call-in-flight")
        self._writer = writer

    def take(self, timeout: float = SLOT_WAIT_SECONDS) -> Slot | None:
        """A free slot, waiting up to `timeout` seconds; None when none came free."""
        if not self._slots.acquire(timeout=timeout):
            return None
        with self._count_lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        return Slot(self)

    def _free(self) -> None:
        with self._count_lock:
            self.in_flight -= 1
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
            LOG.exception("a call in flight to %s failed outside its own handling", self.name)
            raise
        self._writer.put(slot, then, result)


class Writer:
    """The process's one thread that writes the calls' results, in the order they came."""

    def __init__(self) -> None:
        self._queue: queue.Queue[tuple[Slot, Callable[[Any], object], Any]] = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name="call-results", daemon=False)
        self._thread.start()

    def put(self, slot: Slot, then: Callable[[Any], object], result: Any) -> None:
        self._queue.put((slot, then, result))

    def _done(self) -> bool:
        """The process is ending and every result that came is written.

        At exit the interpreter joins the pools' threads (ThreadPoolExecutor's exit hook)
        before it marks the main thread ended, so once it has, no call is still running and
        whatever is queued is all that will come. A slot taken but never used (a task that
        failed between taking it and starting its call) never keeps the process alive.
        """
        return not threading.main_thread().is_alive() and self._queue.empty()

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
                # The task's work must be safe to send again (its lease runs out, a sweep
                # sends it): the result is dropped, never half-written.
                LOG.exception("a call's result could not be written; its work is sent again")
                db.connection.close()
            finally:
                slot.release()
        db.connection.close()


_pools: dict[str, CallPool] = {}
_writer: Writer | None = None
_pid = 0
_lock = threading.Lock()


def pool_for(server: str, size: int) -> CallPool:
    """This process's pool for the server (made on first use: a forked worker makes its
    own, never its parent's threads)."""
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
