"""The embedded PostgreSQL (core.embedded_db): what a laptop with no DATABASE_URL runs on.

Each test runs its own server on a data folder of its own, never the checkout's, and stops
it: the test run's own database may be on the checkout's embedded server.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import psycopg
import pytest

from core import embedded_db

ROOT = Path(__file__).resolve().parents[2]


def python(arguments: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """This interpreter in the checkout, as a new process with this environment."""
    return subprocess.run(  # noqa: S603 - our own interpreter
        [sys.executable, *arguments],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / "pg"
    yield folder
    if embedded_db.running(folder) is not None:
        embedded_db.stop(folder)


def sql(server: embedded_db.Server, statement: str, database: str = "postgres") -> list[tuple]:
    with psycopg.connect(**server.connect_kwargs(database), autocommit=True) as conn:
        cursor = conn.execute(statement)
        return cursor.fetchall() if cursor.description else []


def postmasters(folder: Path) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        command = process.info["cmdline"] or []
        if command and Path(command[0]).name == "postgres" and str(folder) in command:
            found.append(process)
    return found


def test_it_listens_on_a_socket_in_its_folder_only_and_has_gatehouses_database(
    data_dir: Path,
) -> None:
    server = embedded_db.start(data_dir)

    assert (server.socket_dir / ".s.PGSQL.5432").is_socket()
    assert sql(server, "SHOW listen_addresses") == [("",)]
    assert psutil.Process(server.pid).net_connections(kind="inet") == []
    assert sql(server, "SELECT datname FROM pg_database WHERE datname = 'gatehouse'")
    assert embedded_db.running(data_dir) == server
    assert server.url().startswith("postgres://postgres@%2F")


def test_a_second_start_joins_and_a_restart_keeps_the_data(data_dir: Path) -> None:
    first = embedded_db.start(data_dir)
    sql(first, "CREATE TABLE kept (n int); INSERT INTO kept VALUES (7)", "gatehouse")

    assert embedded_db.start(data_dir).pid == first.pid  # joined, not started again
    assert "stopped" in embedded_db.stop(data_dir)
    assert embedded_db.running(data_dir) is None and postmasters(data_dir) == []

    again = embedded_db.start(data_dir)
    assert again.pid != first.pid
    assert sql(again, "SELECT n FROM kept", "gatehouse") == [(7,)]


def test_a_stale_postmaster_pid_naming_another_live_process_is_removed_with_a_message(
    data_dir: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    server = embedded_db.start(data_dir)
    lines = (data_dir / "postmaster.pid").read_text().splitlines()
    embedded_db.stop(data_dir)
    # As after a crash and a reboot: the file is left, and its PID is now another process's.
    lines[0] = str(os.getpid())
    (data_dir / "postmaster.pid").write_text("\n".join(lines) + "\n")

    again = embedded_db.start(data_dir)

    assert again.pid != server.pid and again.pid != os.getpid()
    assert "removing a stale" in capfd.readouterr().err
    assert sql(again, "SELECT 1") == [(1,)]


def test_stop_if_unused_leaves_a_server_someone_is_connected_to(data_dir: Path) -> None:
    server = embedded_db.start(data_dir)
    with psycopg.connect(**server.connect_kwargs("gatehouse"), application_name="a report"):
        said = embedded_db.stop(data_dir, if_unused=True)
        assert "left running" in said and "1 other session" in said
        assert said.endswith("a report on gatehouse")  # who, and on which database
        assert embedded_db.running(data_dir) is not None

    assert "stopped" in embedded_db.stop(data_dir, if_unused=True)
    assert postmasters(data_dir) == []


def test_a_test_runs_database_is_its_own_and_a_dead_runs_is_dropped(data_dir: Path) -> None:
    server = embedded_db.start(data_dir)
    finished = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    dead = f"test_gatehouse_{finished.stdout.strip()}"
    alive = f"test_gatehouse_{os.getppid()}"  # a run whose process is still there
    sql(server, f'CREATE DATABASE "{dead}"')
    sql(server, f'CREATE DATABASE "{alive}"')

    name = embedded_db.test_database(data_dir)

    assert name == f"test_gatehouse_{os.getpid()}"
    names = {row[0] for row in sql(server, "SELECT datname FROM pg_database")}
    assert dead not in names and alive in names


def test_parallel_first_starts_make_one_server(tmp_path: Path) -> None:
    folder = tmp_path / "pg"
    env = {**os.environ, "GATEHOUSE_EMBEDDED_DIR": str(folder)}
    try:
        starts = [
            subprocess.Popen(
                [sys.executable, "-m", "core.embedded_db", "url"],
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                text=True,
            )
            for _ in range(3)
        ]
        urls = {start.communicate(timeout=120)[0].strip() for start in starts}
        assert [start.returncode for start in starts] == [0, 0, 0]
        assert len(urls) == 1 and len(postmasters(folder)) == 1
    finally:
        embedded_db.stop(folder)


def test_settings_without_database_url_use_the_embedded_server(tmp_path: Path) -> None:
    folder = tmp_path / "pg"
    env = {**os.environ, "GATEHOUSE_EMBEDDED_DIR": str(folder)}
    env.pop("DATABASE_URL", None)
    script = (
        "import django; django.setup()\n"
        "from django.db import connection\n"
        "with connection.cursor() as c:\n"
        "    c.execute('SELECT current_database()')\n"
        "    print(c.fetchone()[0])\n"
        "print(connection.settings_dict['HOST'])\n"
        "with connection.cursor() as c:\n"
        "    c.execute('SELECT application_name FROM pg_stat_activity'\n"
        "              ' WHERE pid = pg_backend_pid()')\n"
        "    print(c.fetchone()[0].replace(' ', '_'))\n"
    )
    try:
        done = python(["-c", script], env)
        assert done.returncode == 0, done.stderr
        # The session says which program it is.
        assert done.stdout.split() == ["gatehouse", str(folder.resolve()), "python_-c"]
    finally:
        embedded_db.stop(folder)


@pytest.mark.parametrize(
    ("url", "kind"), [("sqlite:///gatehouse.sqlite3", "sqlite"), ("mysql://u@h/db", "mysql")]
)
def test_a_database_url_that_is_not_postgresql_is_refused_in_words(url: str, kind: str) -> None:
    done = python(["manage.py", "check"], {**os.environ, "DATABASE_URL": url})
    assert done.returncode != 0
    assert f"DATABASE_URL names a {kind} database" in done.stderr
    assert "runs on PostgreSQL only" in done.stderr
    assert not (ROOT / "gatehouse.sqlite3").exists()
