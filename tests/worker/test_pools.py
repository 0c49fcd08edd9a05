"""The pools of calls in flight (worker/pools.py), on their own: slots taken and given back,
calls made in the pool's threads, results handed to the one writer thread, one pool per
server and process. automation's use of them is tested with real workers in
tests/automation/pipeline/test_calls_in_flight.py."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

from worker import pools


def test_a_full_pool_gives_no_slot_until_one_is_released() -> None:
    pool = pools.CallPool("full", 2, pools.Writer())
    first, second = pool.take(), pool.take()
    assert first is not None and second is not None
    assert pool.take(timeout=0.05) is None
    first.release()
    first.release()  # twice is once
    third = pool.take(timeout=0.05)
    assert third is not None
    assert pool.take(timeout=0.05) is None
    second.release()
    third.release()
    assert (pool.in_flight, pool.most_in_flight) == (0, 2)


def test_a_call_runs_in_the_pool_and_its_result_is_written_by_the_writer() -> None:
    pool = pools.CallPool("calls", 4, pools.Writer())
    written: list[tuple[int, str]] = []
    done = threading.Event()

    def then(result: int) -> None:
        written.append((result, threading.current_thread().name))
        if len(written) == 3:
            done.set()

    for n in range(3):
        slot = pool.take()
        assert slot is not None
        pool.start(slot, lambda n=n: n * 10, then, not_before=time.monotonic() + 0.01 * n)
    assert done.wait(5)
    assert sorted(result for result, _ in written) == [0, 10, 20]
    assert {name for _, name in written} == {"call-results"}  # one writer thread
    deadline = time.monotonic() + 5
    while pool.in_flight and time.monotonic() < deadline:  # freed once written
        time.sleep(0.01)
    assert pool.in_flight == 0


def test_a_failed_call_frees_its_slot() -> None:
    pool = pools.CallPool("failing", 1, pools.Writer())
    slot = pool.take()
    assert slot is not None

    def fails() -> None:
        raise RuntimeError("server gone")

    pool.start(slot, fails, lambda _: None)
    again = pool.take(timeout=5)
    assert again is not None
    again.release()


def test_a_slot_taken_and_never_used_does_not_keep_the_process_alive() -> None:
    """A task that fails between taking its slot and starting its call leaves the slot taken;
    the process still ends once its main thread has (the writer is not a daemon)."""
    script = (
        "from worker import pools\n"
        "pool = pools.CallPool('leaked', 2, pools.Writer())\n"
        "assert pool.take() is not None\n"
    )
    ended = subprocess.run([sys.executable, "-c", script], timeout=30, check=False)  # noqa: S603
    assert ended.returncode == 0


def test_one_pool_per_server_in_a_process() -> None:
    assert pools.pool_for("a", 3) is pools.pool_for("a", 3)
    assert pools.pool_for("a", 3) is not pools.pool_for("b", 3)
    assert {pool.name for pool in pools.pools()} >= {"a", "b"}


def test_a_workers_share_never_passes_the_cap() -> None:
    assert pools.pool_size(64, 3) == 21
    assert pools.pool_size(1, 4) == 1
    assert pools.pool_size(8, 0) == 8
