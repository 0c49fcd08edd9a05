"""`make demo` stops whole: whatever signal reaches its process group (a terminal's Ctrl-C,
a supervisor's SIGTERM), or `make` alone, the web server, the worker and the embedded
PostgreSQL it started all stop. Each demo runs on a data folder and a port of its own. (A
server someone else still uses is left running, and who uses it said:
tests/core/test_embedded_db.py.)"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[1]
START_SECONDS = 240  # the first start makes the database and migrates it
STOP_SECONDS = 60


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def postmasters(folder: Path) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        command = process.info["cmdline"] or []
        if command and Path(command[0]).name == "postgres" and str(folder.resolve()) in command:
            found.append(process)
    return found


def group_members(group: int) -> list[int]:
    members = []
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) == group and process.status() != psutil.STATUS_ZOMBIE:
                members.append(process.pid)
        except (ProcessLookupError, psutil.NoSuchProcess):
            continue
    return members


def _interrupt_as_from_a_terminal() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Demo:
    """`make demo` in a process group of its own, its output in a file."""

    def __init__(self, folder: Path, logs: Path) -> None:
        self.folder, self.port, self.output = folder, free_port(), logs / "make-demo.out"
        logs.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            "GATEHOUSE_EMBEDDED_DIR": str(folder),
            "GATEHOUSE_DEMO_LOGS": str(logs),
            "GATEHOUSE_PORT": str(self.port),
        }
        env.pop("DATABASE_URL", None)  # the embedded server of the demo's own folder
        with self.output.open("wb") as out:
            self.make = subprocess.Popen(
                ["make", "--no-print-directory", "demo"],  # noqa: S607
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                # As from a terminal: a runner started in the background (`cmd &`) ignores
                # SIGINT, the demo's shell would inherit that, and bash cannot trap a signal
                # ignored when it starts, so its Ctrl-C stop would never run.
                preexec_fn=_interrupt_as_from_a_terminal,
            )

    def said(self) -> str:
        return self.output.read_text(errors="replace")

    def wait_for_the_console(self) -> None:
        deadline = time.monotonic() + START_SECONDS
        address = f"http://127.0.0.1:{self.port}/accounts/login/"
        while time.monotonic() < deadline:
            assert self.make.poll() is None, f"make demo ended early:\n{self.said()}"
            try:
                with urllib.request.urlopen(address, timeout=5) as page:
                    if page.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.5)
        pytest.fail(f"no console after {START_SECONDS} s:\n{self.said()}")

    def wait_until_stopped(self) -> None:
        """Until no process of the demo's group is left (the shell outlives make while it
        stops the rest) and no server runs on its folder: bounded."""
        deadline = time.monotonic() + STOP_SECONDS
        while time.monotonic() < deadline:
            if not group_members(self.make.pid) and not postmasters(self.folder):
                break
            time.sleep(0.25)
        self.make.wait(timeout=5)

    def kill_what_is_left(self) -> None:
        for pid in group_members(self.make.pid):
            os.kill(pid, signal.SIGKILL)
        for process in postmasters(self.folder):
            process.kill()


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One data folder for every stop below: only the first start pays for migrations."""
    return tmp_path_factory.mktemp("demo") / "pg"


@pytest.fixture
def demo(folder: Path, tmp_path: Path) -> Iterator[Demo]:
    started = Demo(folder, tmp_path / "logs")
    try:
        started.wait_for_the_console()
        assert postmasters(folder), started.said()
        yield started
    finally:
        started.kill_what_is_left()


@pytest.mark.parametrize(
    ("signal_sent", "to_the_group"),
    [(signal.SIGTERM, True), (signal.SIGINT, True), (signal.SIGTERM, False)],
    ids=["SIGTERM to the group", "SIGINT to the group", "SIGTERM to make alone"],
)
def test_the_demo_stops_whole(
    demo: Demo, folder: Path, signal_sent: signal.Signals, to_the_group: bool
) -> None:
    if to_the_group:
        os.killpg(demo.make.pid, signal_sent)
    else:
        os.kill(demo.make.pid, signal_sent)

    demo.wait_until_stopped()

    said = demo.said()
    assert group_members(demo.make.pid) == [], said
    assert postmasters(folder) == [], said
    assert "stopping the web server and the worker" in said
    assert f"stopped the embedded PostgreSQL in {folder.resolve()}" in said
