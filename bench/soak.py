"""`make soak`: API events with an HTTP effect, through faults, on a PostgreSQL of its own.

It starts an embedded PostgreSQL on a data folder of its own (`.gatehouse/soak/pg`, emptied
first; core/embedded_db.py), so restarting it never touches any other server; a receiver
on 127.0.0.1 that deduplicates by Idempotency-Key and fails a share of requests with 503 and
answers another share only after the sender's read timeout (having performed the effect);
the API (gunicorn) and two `qcluster` clusters. The effect is sent over HTTP by the catalogue
of a policy version (`policy-1-soak`) stored and activated before the first event. It sends
the events through the API while it SIGKILLs worker processes and whole clusters (restarting
the clusters), terminates database sessions (pg_terminate_backend) and restarts PostgreSQL
once. Then it waits, bounded, for every run to settle and checks:

- every event became exactly one run;
- every completed run has exactly one delivered effect, whose key the receiver performed;
- no idempotency key was performed twice, and no event's effect under two keys;

and prints the drain time: from the last fault to the last run settled. It stops by itself
(every wait is bounded) and exits non-zero if a check fails. `--code DIR` runs another
checkout of Gatehouse (an older commit, exported with `git archive`) under the same soak.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import psutil
import psycopg
import yaml

from core import embedded_db

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
EFFECT = "create_follow_up"
SECRET = "soak-secret-not-a-secret-0123456789"  # noqa: S105 - a loopback test receiver
# The variable the effect's catalogue names for its signing secret, and the version it is in.
SIGNING_VARIABLE = "GATEHOUSE_SOAK_SIGNING_SECRET"
SOAK_VERSION = "policy-1-soak"
READ_TIMEOUT = 1.0  # the effect's; a slow answer comes after it
SLOW_SECONDS = 2.0
# Runs in these states wait for nobody: done, or held for a person.
SETTLED = ("completed", "failed", "needs_review", "blocked", "approval_required")


# --- the receiver -----------------------------------------------------------------------


@dataclass
class Receiver:
    """Performs each Idempotency-Key once; fails `fail` of requests with 503 and answers
    `slow` of them (performed) only after the sender's read timeout."""

    fail: float
    slow: float
    seed: int
    lock: threading.Lock = field(default_factory=threading.Lock)
    performed: Counter[str] = field(default_factory=Counter)  # key -> times performed
    events: defaultdict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    answers: Counter[str] = field(default_factory=Counter)  # what it did, for the report
    repeats: int = 0  # requests for a key already performed (absorbed by deduplication)

    def __post_init__(self) -> None:
        self.random = random.Random(self.seed)  # noqa: S311 - a test's dice, not a secret

    def behaviour(self) -> str:
        with self.lock:
            draw = self.random.random()
        return "503" if draw < self.fail else "slow" if draw < self.fail + self.slow else "ok"

    def perform(self, key: str, event_id: str) -> None:
        with self.lock:
            if key in self.performed:
                self.repeats += 1
                return
            self.performed[key] += 1
            self.events[event_id].add(key)

    def serve(self) -> tuple[ThreadingHTTPServer, str]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                key = self.headers.get("Idempotency-Key") or ""
                kind = receiver.behaviour()
                with receiver.lock:
                    receiver.answers[kind] += 1
                if kind == "503":
                    self._answer(503)
                    return
                receiver.perform(key, str(json.loads(body).get("event_id")))
                if kind == "slow":
                    time.sleep(SLOW_SECONDS)
                with contextlib.suppress(OSError):  # the sender gave up on a slow answer
                    self._answer(200)

            def _answer(self, status: int) -> None:
                data = b'{"ok": true}' if status == 200 else b'{"error": "busy"}'
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server, f"http://127.0.0.1:{server.server_address[1]}/effects"


# --- processes ---------------------------------------------------------------------------


@dataclass
class Setup:
    code: Path
    url: str
    effect_url: str
    port: int
    logs: Path
    workers: int

    def env(self, **extra: str) -> dict[str, str]:
        base = {
            **os.environ,
            "DATABASE_URL": self.url,
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "GATEHOUSE_SECRET_KEY": "soak-only-not-secret",
            "GATEHOUSE_LOG_LEVEL": "WARNING",
            "GATEHOUSE_LOG_FORMAT": "plain",
            "GATEHOUSE_Q_WORKERS": str(self.workers),
            SIGNING_VARIABLE: SECRET,
        }
        base.pop("GATEHOUSE_REDIS_URL", None)
        return {**base, **extra}

    def soak_policy(self, folder: Path) -> Path:
        """A policy file: the shipped policy with the reference catalogue, whose EFFECT is
        sent over HTTP to the receiver. An effect is delivered by the version that authorised
        it, so this version is made active before the first event."""
        defaults = self.code / "policy" / "defaults"
        document = yaml.safe_load((defaults / "policy-1.yaml").read_text(encoding="utf-8"))
        catalogue = yaml.safe_load(
            (defaults / "catalogues" / "reference-1.yaml").read_text(encoding="utf-8")
        )
        catalogue["effects"][EFFECT] |= {
            "adapter": "http",
            "http": {
                "url": self.effect_url,
                "signing": {"secret": SIGNING_VARIABLE},
                "read_timeout": READ_TIMEOUT,
                "connect_timeout": 1.0,
            },
        }
        document |= {"version": SOAK_VERSION, "catalogue": catalogue}
        path = folder / f"{SOAK_VERSION}.yaml"
        path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
        return path

    def manage(self, *args: str) -> str:
        done = subprocess.run(  # noqa: S603 - our own interpreter and manage.py
            [PY, "manage.py", *args],
            cwd=self.code,
            env=self.env(),
            capture_output=True,
            text=True,
            check=True,
            timeout=300,
        )
        return done.stdout

    def start(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        log = (self.logs / f"{name}.log").open("ab")
        return subprocess.Popen(  # noqa: S603 - our own interpreter
            args,
            cwd=self.code,
            env=self.env(),
            stdout=log,
            stderr=log,
            start_new_session=True,  # a group of its own: a cluster is killed whole
        )


@dataclass
class Fleet:
    """The API server and the clusters; a cluster that died is started again."""

    setup: Setup
    clusters: int
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    restarts: int = 0

    def start_all(self) -> None:
        self.procs["api"] = self.setup.start(
            "api",
            [PY, "-m", "gunicorn", "config.wsgi", "-w", "2", "-b", f"127.0.0.1:{self.setup.port}"],
        )
        for n in range(self.clusters):
            self.start_cluster(f"cluster-{n}")
        wait_for("the API", lambda: _answers(self.setup.port), 60)

    def start_cluster(self, name: str) -> None:
        self.procs[name] = self.setup.start(name, [PY, "manage.py", "qcluster"])

    def cluster_names(self) -> list[str]:
        return [name for name in self.procs if name.startswith("cluster")]

    def supervise(self) -> None:
        for name, proc in list(self.procs.items()):
            if proc.poll() is not None:
                self.restarts += 1
                if name == "api":
                    self.start_all_api()
                else:
                    self.start_cluster(name)

    def start_all_api(self) -> None:
        self.procs["api"] = self.setup.start(
            "api",
            [PY, "-m", "gunicorn", "config.wsgi", "-w", "2", "-b", f"127.0.0.1:{self.setup.port}"],
        )

    def stop_all(self) -> None:
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=15)


def _answers(port: int) -> bool:
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        conn.request("GET", "/login/")
        conn.getresponse().read()
        return True
    except OSError:
        return False


def wait_for(what: str, done: Callable[[], bool], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not done():
        if time.monotonic() > deadline:
            raise SystemExit(f"soak: gave up waiting for {what} after {seconds:.0f} s")
        time.sleep(0.2)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# --- faults ------------------------------------------------------------------------------


@dataclass
class Faults:
    fleet: Fleet
    data_dir: Path
    url: str
    rng: random.Random
    done: Counter[str] = field(default_factory=Counter)

    def kill_worker(self) -> None:
        """SIGKILL one process a cluster forked (a worker, mostly): its sentinel replaces it.
        A cluster still starting has none yet: another is tried, for a few seconds at most."""
        for _ in range(50):
            name = self.rng.choice(self.fleet.cluster_names())
            with contextlib.suppress(psutil.Error):
                leaves = [
                    p
                    for p in psutil.Process(self.fleet.procs[name].pid).children(recursive=True)
                    if not p.children()
                ]
                if leaves:
                    self.rng.choice(leaves).kill()
                    self.done["worker SIGKILLs"] += 1
                    return
            time.sleep(0.1)

    def kill_cluster(self) -> None:
        """SIGKILL a whole cluster, every process of its group; it is started again."""
        name = self.rng.choice(self.fleet.cluster_names())
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.fleet.procs[name].pid, signal.SIGKILL)
            self.done["cluster SIGKILLs"] += 1
        self.fleet.procs[name].wait(timeout=30)
        self.fleet.start_cluster(name)

    def terminate_session(self) -> None:
        with contextlib.suppress(psycopg.Error), psycopg.connect(self.url, autocommit=True) as db:
            row = db.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                "AND backend_type = 'client backend' ORDER BY random() LIMIT 1"
            ).fetchone()
            if row and row[0]:
                self.done["terminated sessions"] += 1

    def restart_database(self) -> None:
        embedded_db.stop(self.data_dir)
        time.sleep(1)
        embedded_db.start(self.data_dir)
        self.done["PostgreSQL restarts"] += 1


def fault_plan(args: argparse.Namespace, rng: random.Random) -> list[tuple[float, str]]:
    """When each fault happens, in seconds from the start of intake: spread over the window."""
    kinds = (
        ["worker"] * (args.kills - args.kills // 3)
        + ["cluster"] * (args.kills // 3)
        + ["session"] * args.terminations
        + ["restart"] * args.restarts
    )
    rng.shuffle(kinds)
    step = args.fault_window / (len(kinds) + 1)
    return [(step * (n + 1), kind) for n, kind in enumerate(kinds)]


# --- load --------------------------------------------------------------------------------


def event(n: int) -> bytes:
    return json.dumps(
        {
            "event_id": f"soak-{n}",
            "source": "web_form",
            "request_type": "support",
            "subject": f"CSV export fails ({n})",
            "body": "The CSV export of our reports fails with an error since this morning. "
            "Please create a follow-up so support can help.",
            "account_tier": "standard",
            "requested_action": EFFECT,
        }
    ).encode()


def send_all(port: int, token: str, count: int, seconds: float, connections: int = 8) -> int:
    """POST `count` events over about `seconds`, each until it is answered 2xx (the same event
    again is a replay: a failure is simply sent again). Returns the requests resent."""
    cursor = iter(range(count))
    lock = threading.Lock()
    resent = [0]
    failures: list[str] = []
    started = time.monotonic()

    def post(n: int) -> None:
        for _ in range(600):  # bounded: ten minutes of a failing server at most
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                conn.request(
                    "POST",
                    "/api/v1/events",
                    body=event(n),
                    headers={
                        "Authorization": f"Bearer {token}",
                        "Content-Type": "application/json",
                    },
                )
                status = conn.getresponse().status
                conn.close()
            except (OSError, http.client.HTTPException):
                status = 0
            if 200 <= status < 300:
                return
            if 400 <= status < 500:
                failures.append(f"soak-{n}: HTTP {status}")
                return
            with lock:
                resent[0] += 1
            time.sleep(1)
        failures.append(f"soak-{n}: never answered")

    def client() -> None:
        while True:
            with lock:
                n = next(cursor, None)
            if n is None:
                return
            time.sleep(max(0.0, started + seconds * n / count - time.monotonic()))
            post(n)

    threads = [threading.Thread(target=client) for _ in range(connections)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise SystemExit(f"soak: {len(failures)} events were refused, e.g. {failures[0]}")
    return resent[0]


def unsettled(url: str) -> int | None:
    """Runs still on their way (None while the database cannot be read)."""
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=5) as db:
            row = db.execute(
                "SELECT count(*) FROM automation_run WHERE event_id LIKE 'soak-%%' "
                "AND state <> ALL(%s)",
                [list(SETTLED)],
            ).fetchone()
            return int(row[0]) if row else None
    except psycopg.Error:
        return None


# --- the checks --------------------------------------------------------------------------


def check(url: str, receiver: Receiver, count: int) -> tuple[dict[str, Any], list[str]]:
    problems: list[str] = []
    with psycopg.connect(url, autocommit=True) as db:
        per_event: dict[str, int] = dict(
            db.execute(
                "SELECT event_id, count(*) FROM automation_run WHERE event_id LIKE 'soak-%' "
                "GROUP BY event_id"
            ).fetchall()
        )
        states: Counter[str] = Counter(
            dict(
                db.execute(
                    "SELECT state || coalesce(' ' || nullif(outcome, ''), ''), count(*) "
                    "FROM automation_run WHERE event_id LIKE 'soak-%' GROUP BY 1"
                ).fetchall()
            )
        )
        completed = db.execute(
            "SELECT r.event_id, count(e.id) FILTER (WHERE e.status = 'delivered'), "
            "min(e.idempotency_key) FROM automation_run r LEFT JOIN automation_effect e "
            "ON e.run_id = r.id WHERE r.event_id LIKE 'soak-%' AND r.state = 'completed' "
            "GROUP BY r.event_id"
        ).fetchall()
        attempts: Counter[str] = Counter(
            dict(
                db.execute(
                    "SELECT a.outcome, count(*) FROM automation_effectattempt a "
                    "JOIN automation_effect e ON e.id = a.effect_id GROUP BY 1"
                ).fetchall()
            )
        )
        # How long after a 503 on the first attempt the second one started: its backoff is at
        # most 10 s (5 s * 2, full jitter); waiting for the sweep makes it up to a minute more.
        gaps = [
            float(row[0])
            for row in db.execute(
                "SELECT extract(epoch FROM b.started_at - a.started_at) "
                "FROM automation_effectattempt a JOIN automation_effectattempt b "
                "ON b.effect_id = a.effect_id AND b.attempt = 2 "
                "WHERE a.attempt = 1 AND a.status_code = 503 ORDER BY 1"
            ).fetchall()
        ]
    if len(per_event) != count:
        problems.append(f"{count - len(per_event)} events made no run")
    doubled = [event_id for event_id, runs in per_event.items() if runs != 1]
    if doubled:
        problems.append(f"{len(doubled)} events made more than one run, e.g. {doubled[0]}")
    not_once = [event_id for event_id, delivered, _ in completed if delivered != 1]
    if not_once:
        problems.append(f"{len(not_once)} completed runs lack exactly one delivery")
    unperformed = [key for _, _, key in completed if receiver.performed[key] != 1]
    if unperformed:
        problems.append(f"{len(unperformed)} delivered effects were not performed downstream")
    twice = [key for key, times in receiver.performed.items() if times > 1]
    two_keys = [event_id for event_id, keys in receiver.events.items() if len(keys) > 1]
    if twice or two_keys:
        problems.append(f"performed twice: {len(twice)} keys, {len(two_keys)} events")
    figures = {
        "events": count,
        "runs": sum(per_event.values()),
        "states": dict(states),
        "completed_with_one_delivery": len(completed) - len(not_once),
        "keys_performed": len(receiver.performed),
        "keys_performed_twice": len(twice),
        "repeats_absorbed_by_the_receiver": receiver.repeats,
        "receiver_answers": dict(receiver.answers),
        "attempts": dict(attempts),
        "second_attempt_after_a_503_s": _spread(gaps),
    }
    return figures, problems


def _spread(values: list[float]) -> dict[str, float] | None:
    """Median, 95th percentile and largest of sorted values."""
    if not values:
        return None
    return {
        "p50": round(values[len(values) // 2], 1),
        "p95": round(values[int(0.95 * (len(values) - 1))], 1),
        "max": round(values[-1], 1),
    }


# --- the soak ----------------------------------------------------------------------------


@contextlib.contextmanager
def database(folder: Path) -> Iterator[str]:
    """An embedded PostgreSQL on `folder`, emptied first, stopped at the end."""
    embedded_db.reset(folder)
    server = embedded_db.start(folder)
    try:
        yield server.url()
    finally:
        embedded_db.stop(folder)


def soak(args: argparse.Namespace) -> int:
    rng = random.Random(args.seed)  # noqa: S311 - a repeatable fault plan
    work = ROOT / ".gatehouse" / "soak"
    logs = work / "logs"
    shutil.rmtree(logs, ignore_errors=True)
    logs.mkdir(parents=True)
    receiver = Receiver(fail=args.fail, slow=args.slow, seed=args.seed)
    http_server, effect_url = receiver.serve()
    with database(work / "pg") as url:
        setup = Setup(Path(args.code).resolve(), url, effect_url, free_port(), logs, args.workers)
        setup.manage("migrate", "--no-input", "-v", "0")
        setup.manage("setup_roles")  # the groups the catalogue names
        setup.manage("load_policy")
        setup.manage("load_policy", "--activate", str(setup.soak_policy(work)))
        token = setup.manage(
            "shell",
            "-c",
            "from automation.intake.services import api_token_create, channel_get_or_create; "
            "print(api_token_create(name='soak', channel=channel_get_or_create(name='api'))[1])",
        ).split()[-1]
        fleet = Fleet(setup, args.clusters)
        fleet.start_all()
        faults = Faults(fleet, work / "pg", url, rng)
        actions = {
            "worker": faults.kill_worker,
            "cluster": faults.kill_cluster,
            "session": faults.terminate_session,
            "restart": faults.restart_database,
        }
        try:
            started = time.monotonic()
            resent: list[int] = []
            sender = threading.Thread(
                target=lambda: resent.append(
                    send_all(setup.port, token, args.events, args.intake_seconds)
                )
            )
            sender.start()
            for at, kind in fault_plan(args, rng):
                while time.monotonic() < started + at:
                    fleet.supervise()
                    time.sleep(0.2)
                actions[kind]()
            faults_end = time.monotonic()
            while sender.is_alive():
                fleet.supervise()
                sender.join(timeout=0.5)
            intake_end = time.monotonic()
            deadline = time.monotonic() + args.timeout
            while (left := unsettled(url)) != 0:
                if time.monotonic() > deadline:
                    raise SystemExit(f"soak: {left} runs still unsettled after {args.timeout} s")
                fleet.supervise()
                time.sleep(0.5)
            settled = time.monotonic()
        finally:
            fleet.stop_all()
            http_server.shutdown()
        figures, problems = check(url, receiver, args.events)
    figures.update(
        faults=dict(faults.done),
        processes_restarted=fleet.restarts,
        requests_resent=resent[0] if resent else None,
        intake_seconds=round(intake_end - started, 1),
        drain_after_faults_s=round(settled - faults_end, 1),
        drain_after_intake_s=round(settled - intake_end, 1),
        total_seconds=round(settled - started, 1),
        load=[round(x, 2) for x in os.getloadavg()],
        code=str(setup.code),
    )
    for name, value in figures.items():
        print(f"{name:>34}: {value}")
    for problem in problems:
        print(f"soak: FAILED: {problem}", file=sys.stderr)
    print(json.dumps(figures))
    return 1 if problems else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=3000)
    parser.add_argument("--kills", type=int, default=12, help="SIGKILLs of workers and clusters")
    parser.add_argument("--terminations", type=int, default=26, help="database sessions")
    parser.add_argument("--restarts", type=int, default=1, help="of PostgreSQL")
    parser.add_argument("--fail", type=float, default=0.20, help="share of 503 answers")
    parser.add_argument("--slow", type=float, default=0.04, help="share answered too late")
    parser.add_argument("--intake-seconds", type=float, default=90.0)
    parser.add_argument("--fault-window", type=float, default=90.0, help="seconds")
    parser.add_argument("--clusters", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2, help="per cluster")
    parser.add_argument("--timeout", type=float, default=1800.0, help="for the drain, seconds")
    parser.add_argument("--seed", type=int, default=27)
    parser.add_argument("--code", default=str(ROOT), help="the Gatehouse checkout to soak")
    raise SystemExit(soak(parser.parse_args()))


if __name__ == "__main__":
    main()
