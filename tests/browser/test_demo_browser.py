"""`make demo` from nothing on the embedded PostgreSQL, as a new user meets it: the first page,
an approver's decision in Chromium, SIGTERM leaving no server behind, and a second start that
adds no run and no intake record.

The demo runs as bin/demo runs it (web server, worker, embedded server), with its data folder,
logs and port of its own, so it never touches the checkout's demo.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

import psutil
import psycopg
import pytest

from core import embedded_db
from tests.browser.conftest import PLAYWRIGHT_MISSING, screenshot

pytest.importorskip("playwright.sync_api", reason=PLAYWRIGHT_MISSING, exc_type=ImportError)
from playwright.sync_api import expect

if TYPE_CHECKING:
    from playwright.sync_api import Browser

ROOT = Path(__file__).resolve().parents[2]
BASH = shutil.which("bash") or "/bin/bash"
FIRST_PAGE_SECONDS = 300  # a bound for a slow machine, not a target (figures: docs/performance.md)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Demo:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.data = folder / "pg"
        self.port = free_port()
        self.output = folder / "demo.out"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> float:
        """Start bin/demo; the seconds until its first page answers."""
        env = {
            **os.environ,
            "GATEHOUSE_PORT": str(self.port),
            "GATEHOUSE_EMBEDDED_DIR": str(self.data),
            "GATEHOUSE_DEMO_LOGS": str(self.folder / "logs"),
        }
        for name in ("DATABASE_URL", "DJANGO_SETTINGS_MODULE", "DJANGO_ALLOW_ASYNC_UNSAFE"):
            env.pop(name, None)
        began = time.monotonic()
        with self.output.open("wb") as out:
            self.process = subprocess.Popen(  # noqa: S603 - the project's own script
                [BASH, "bin/demo"],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        while time.monotonic() - began < FIRST_PAGE_SECONDS:
            assert self.process.poll() is None, self.output.read_text()
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    pass
            except OSError:
                time.sleep(0.25)
                continue
            if "Gatehouse is running" in self.output.read_text():
                return time.monotonic() - began
            time.sleep(0.25)
        raise AssertionError(f"no first page in {FIRST_PAGE_SECONDS} s:\n{self.output.read_text()}")

    def password(self, username: str) -> str:
        found = re.search(rf"^\s+{username}\s+(\S+)$", self.output.read_text(), re.MULTILINE)
        assert found, self.output.read_text()
        return found.group(1)

    def stop(self) -> None:
        """SIGTERM, as a service manager (or `kill`) stops it."""
        if self.process is None or self.process.poll() is not None:
            return
        os.kill(self.process.pid, signal.SIGTERM)
        self.process.wait(timeout=90)

    def servers_left(self) -> list[int]:
        return [
            process.pid
            for process in psutil.process_iter(["cmdline"])
            if str(self.data) in " ".join(process.info["cmdline"] or [])
        ]

    def counts(self) -> tuple[int, int]:
        server = embedded_db.start(self.data)
        try:
            with psycopg.connect(**server.connect_kwargs("gatehouse")) as conn:
                runs = conn.execute("SELECT count(*) FROM automation_run").fetchone()
                records = conn.execute("SELECT count(*) FROM automation_intakerecord").fetchone()
                assert runs and records
                return int(runs[0]), int(records[0])
        finally:
            embedded_db.stop(self.data)


@pytest.fixture
def demo(tmp_path: Path) -> Demo:
    made = Demo(tmp_path)
    yield made
    made.stop()
    if embedded_db.running(made.data) is not None:
        embedded_db.stop(made.data)


def test_the_demo_starts_on_its_own_postgresql_and_an_approver_decides_in_chromium(
    browser: Browser, demo: Demo
) -> None:
    first = demo.start()
    print(f"first start: first page after {first:.1f} s")

    context = browser.new_context(base_url=f"http://127.0.0.1:{demo.port}")
    context.set_default_timeout(15_000)
    page = context.new_page()
    page.goto("/")
    page.get_by_label("Username").fill("approver")
    page.get_by_label("Password").fill(demo.password("approver"))
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(re.compile(r"/approvals/$"))
    rows = page.get_by_test_id("inbox").locator("tbody tr")
    for _ in range(120):  # the worker reads the sample requests after the page is up
        if rows.count():
            break
        time.sleep(0.5)
        page.reload()
    rows.first.get_by_role("link").first.click()
    expect(page).to_have_url(re.compile(r"/approvals/\d+/$"))
    page.get_by_role("button", name="Approve").click()
    expect(page.get_by_test_id("request-status")).to_have_text("Approved")
    screenshot(page, "demo-approved")
    context.close()

    demo.stop()
    assert demo.servers_left() == []  # web server, worker and PostgreSQL all stopped
    before = demo.counts()

    second = demo.start()
    print(f"second start: first page after {second:.1f} s")
    demo.stop()
    assert demo.servers_left() == []
    assert demo.counts() == before  # a second start takes nothing in again
