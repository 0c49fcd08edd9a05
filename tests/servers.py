"""Gatehouse's own processes for tests about what only a real process shows, against the test
database: the web app served by gunicorn, its production server (what a real server passes
on: a chunked body, for one), on 127.0.0.1; and a worker cluster (`manage.py qcluster`)."""

from __future__ import annotations

import contextlib
import http.client
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from django.db import connection

from tests.database import database_url

REPO = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _answers(port: int) -> bool:
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
        conn.request("GET", "/api/v1/openapi.json")
        return conn.getresponse().status == 200
    except OSError:
        return False


@contextlib.contextmanager
def gunicorn(timeout: float = 60, threads: int = 1) -> Iterator[str]:
    """gunicorn on a free port with the production settings; yields its base URL. The
    test's rows must be committed (transaction=True) for the server to see them. With
    `threads` over 1 its worker is a threaded one, which keeps connections alive."""
    connection.close()  # the server's workers use their own sessions
    port = _free_port()
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "GATEHOUSE_LOG_LEVEL": "WARNING",
    }
    command = [
        sys.executable,
        "-m",
        "gunicorn",
        "config.wsgi",
        "-w",
        "1",
        "--threads",
        str(threads),
    ]
    server = subprocess.Popen(  # noqa: S603 - our own interpreter, fixed arguments
        [*command, "-b", f"127.0.0.1:{port}"],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + timeout
        while not _answers(port):
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("gunicorn did not start")
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=30)


def qcluster(**settings: str) -> subprocess.Popen[bytes]:
    """A worker cluster in a session of its own (so a test can signal its whole process
    group), with the GATEHOUSE_ settings given, named without their prefix: for example
    `qcluster(Q_WORKERS="2")`. The test's rows must be committed (transaction=True)."""
    connection.close()  # the cluster's processes use their own sessions
    env = {**os.environ, "DATABASE_URL": database_url(), "GATEHOUSE_LOG_LEVEL": "WARNING"}
    env.update({f"GATEHOUSE_{name}": value for name, value in settings.items()})
    return subprocess.Popen(
        [sys.executable, "manage.py", "qcluster"],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
