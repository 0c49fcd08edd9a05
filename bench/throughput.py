"""`make bench`: how fast the run engine drains straight-through runs, against DBOS.

It makes a database of its own (`gatehouse_bench` on the local PostgreSQL), then:

1. intake over HTTP: N events POSTed to gunicorn (2 workers) from 16 connections, against a
   bare view doing one INSERT on the same server setup;
2. drain with the ORM broker: real `qcluster` workers take the N queued runs to completion;
3. latency: with the cluster idle, runs sent one at a time, from intake to completion;
4. the same N-run drain with the Redis broker;
5. a backlog of 10,000 runs drained, counting step executions against the steps needed and
   runs the sweep had to nudge (none should);
6. intake and the bare view again, side by side: N requests to each in pairs of rounds on
   one server, which gives the intake ratio (the machine's speed drifts within a minute:
   step 1's two figures, a minute apart, differ by it);
7. the model phase (bench/model.py): runs read by a local model server that answers after a
   fixed latency, with calls in flight, against the DBOS peer calling the same server;
and, right after the drain of step 2, the DBOS peer (`../shared/bench/peer_dbos.py`) on the
same PostgreSQL when its environment (`.bench-dbos`) is present, and the ratio.

Counters come from PostgreSQL itself (pg_stat_database, pg_stat_user_tables), so they
include the broker's commits and sessions. The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import redis

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
SERVER = "postgres://postgres@127.0.0.1:5432"
DB = "gatehouse_bench"
URL = f"{SERVER}/{DB}"
REDIS = os.environ.get("GATEHOUSE_BENCH_REDIS", "redis://127.0.0.1:6379/5")
PORT = int(os.environ.get("GATEHOUSE_BENCH_PORT", "8765"))
PEER = Path(os.environ.get("GATEHOUSE_BENCH_PEER", ROOT.parent / "shared/bench/peer_dbos.py"))
PEER_PYTHON = Path(os.environ.get("GATEHOUSE_BENCH_PEER_PYTHON", ROOT / ".bench-dbos/bin/python"))
# Every step of a straight-through run leaves one stage record.
STAGES = ("intake", "validate", "normalize", "enrich", "classify", "decide", "execute", "complete")


def env(**extra: str) -> dict[str, str]:
    base = {
        **os.environ,
        "DATABASE_URL": URL,
        "GATEHOUSE_LOG_LEVEL": "WARNING",
        "GATEHOUSE_SECRET_KEY": "bench-only-not-secret",
        "DJANGO_SETTINGS_MODULE": "bench.settings",
    }
    base.pop("GATEHOUSE_REDIS_URL", None)
    return {**base, **extra}


def manage(*args: str, **extra: str) -> str:
    done = subprocess.run(  # noqa: S603 - our own interpreter and manage.py
        [PY, "manage.py", *args],
        cwd=ROOT,
        env=env(**extra),
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


# --- the database and its counters ------------------------------------------------------


def fresh_database(name: str) -> None:
    with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


@dataclass
class Counters:
    commits: int
    sessions: int
    inserted: int
    messages: int
    acked: int

    def __sub__(self, other: Counters) -> Counters:
        return Counters(*(getattr(self, f) - getattr(other, f) for f in self.__dataclass_fields__))


def counters() -> Counters:
    time.sleep(1.2)  # backends report their statistics at most once a second
    with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        commits, sessions = conn.execute(
            "SELECT xact_commit, sessions FROM pg_stat_database WHERE datname = %s", [DB]
        ).fetchone()  # type: ignore[misc]
    with psycopg.connect(URL, autocommit=True) as conn:
        inserted, messages, acked = conn.execute(
            "SELECT sum(n_tup_ins), sum(n_tup_ins) FILTER (WHERE relname = 'django_q_ormq'), "
            "sum(n_tup_del) FILTER (WHERE relname = 'django_q_ormq') FROM pg_stat_user_tables"
        ).fetchone()  # type: ignore[misc]
    # This function's own session and its one commit are not the product's.
    return Counters(
        int(commits) - 1, int(sessions) - 1, int(inserted), int(messages or 0), int(acked or 0)
    )


def scalar(sql: str, *params: Any) -> Any:
    with psycopg.connect(URL, autocommit=True) as conn:
        return conn.execute(sql, params).fetchone()[0]  # type: ignore[index]


# --- processes ---------------------------------------------------------------------------


class Process:
    def __init__(self, args: list[str], **extra: str) -> None:
        self.popen = subprocess.Popen(  # noqa: S603 - our own interpreter
            args,
            cwd=ROOT,
            env=env(**extra),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def stop(self) -> None:
        try:
            os.killpg(self.popen.pid, signal.SIGTERM)
            self.popen.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait()
        except ProcessLookupError:
            pass


def gunicorn(**extra: str) -> Process:
    server = Process(
        [PY, "-m", "gunicorn", "bench.wsgi", "-w", "2", "-b", f"127.0.0.1:{PORT}", "-k", "sync"],
        **extra,
    )
    for _ in range(100):
        try:
            conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=1)
            conn.request("GET", "/login/")
            conn.getresponse().read()
            return server
        except OSError:
            time.sleep(0.1)
    server.stop()
    raise SystemExit("gunicorn did not start")


def qcluster(workers: int, **extra: str) -> Process:
    return Process([PY, "manage.py", "qcluster"], GATEHOUSE_Q_WORKERS=str(workers), **extra)


# --- load ---------------------------------------------------------------------------------


def event(n: int, tag: str) -> bytes:
    return json.dumps(
        {
            "event_id": f"bench-{tag}-{n}",
            "source": "web_form",
            "request_type": "support",
            # A plain support request the default policy lets through: no risk signal (a
            # message about signing in or passwords is held for a person under default-1).
            "subject": f"CSV export fails ({n})",
            "body": "The CSV export of our reports fails with an error since this morning. "
            "Please create a follow-up so support can help.",
            "account_tier": "standard",
            "requested_action": "create_follow_up",
        }
    ).encode()


def post_all(path: str, bodies: list[bytes], token: str, connections: int = 16) -> float:
    """POST every body from `connections` threads; returns the seconds it took."""
    cursor = iter(range(len(bodies)))
    lock = threading.Lock()
    failures: list[str] = []

    def client() -> None:
        while not failures:
            with lock:
                index = next(cursor, None)
            if index is None:
                return
            try:
                conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=30)
                conn.request(
                    "POST",
                    path,
                    body=bodies[index],
                    headers={
                        "Authorization": f"Bearer {token}",
                        "Content-Type": "application/json",
                    },
                )
                status = conn.getresponse().status
                conn.close()
            except (OSError, ValueError, http.client.HTTPException) as exc:
                failures.append(f"{type(exc).__name__}: {exc}")
                return
            if status >= 300:
                failures.append(f"HTTP {status}")

    threads = [threading.Thread(target=client) for _ in range(connections)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise SystemExit(f"{len(failures)} requests failed, e.g. {failures[0]}")
    return time.perf_counter() - started


def wait_until_finished(tag: str, count: int, timeout: float) -> int:
    """Wait for the runs to complete; returns how many queries (commits) the watching took.

    One session, opened before the counters were read: its commits are subtracted and its
    session is the one `counters()` already leaves out."""
    deadline = time.monotonic() + timeout
    polls = 0
    with psycopg.connect(URL, autocommit=True) as conn:
        while time.monotonic() < deadline:
            polls += 1
            done = conn.execute(
                "SELECT count(*) FROM automation_run WHERE event_id LIKE %s "
                "AND state = 'completed'",
                [f"bench-{tag}-%"],
            ).fetchone()[0]  # type: ignore[index]
            if done >= count:
                return polls
            time.sleep(0.5)
    raise SystemExit(f"{tag}: only {done} of {count} runs completed in {timeout:.0f} s")


def drain_figures(tag: str, count: int) -> dict[str, float]:
    """Runs/s from the first step a worker took to the last completion (no process start)."""
    first, last = (
        psycopg.connect(URL, autocommit=True)
        .execute(
            "SELECT min(s.started_at), max(r.finished_at) FROM automation_run r "
            "JOIN automation_stagerecord s ON s.run_id = r.id AND s.stage = 'validate' "
            "WHERE r.event_id LIKE %s",
            [f"bench-{tag}-%"],
        )
        .fetchone()  # type: ignore[misc]
    )
    seconds = (last - first).total_seconds()
    return {"runs": count, "seconds": round(seconds, 2), "runs_per_s": round(count / seconds, 1)}


# --- phases -------------------------------------------------------------------------------


def setup() -> str:
    fresh_database(DB)
    manage("migrate", "--no-input", "-v", "0")
    manage("load_policy")
    token = (
        manage(
            "shell",
            "-c",
            "from automation.intake.services import api_token_create, channel_get_or_create; "
            "print(api_token_create(name='bench', channel=channel_get_or_create(name='api'))[1])",
        )
        .strip()
        .splitlines()[-1]
    )
    with psycopg.connect(URL, autocommit=True) as conn:
        conn.execute("CREATE TABLE bench_bare (id bigserial PRIMARY KEY, body bytea)")
    return token


def intake_phase(token: str, count: int, tag: str, **extra: str) -> dict[str, float]:
    server = gunicorn(**extra)
    before = counters()
    seconds = post_all("/api/v1/events", [event(n, tag) for n in range(count)], token)
    server.stop()
    spent = counters() - before
    return {
        "requests_per_s": round(count / seconds, 1),
        "commits_per_request": round(spent.commits / count, 2),
    }


def bare_phase(count: int) -> dict[str, float]:
    server = gunicorn()
    before = counters()
    seconds = post_all("/bench/bare", [b'{"n": 1}'] * count, "unused")
    server.stop()
    spent = counters() - before
    return {
        "requests_per_s": round(count / seconds, 1),
        "commits_per_request": round(spent.commits / count, 2),
    }


def side_by_side_phase(token: str, count: int, rounds: int) -> dict[str, Any]:
    """Intake against the bare view on one server, in pairs of rounds: the machine's speed
    drifts by tens of percent within a minute, and the two rounds of a pair, run one after
    the other (which goes first alternates), see the same speed. The ratio is the median of
    the pairs' ratios, so a pause of the machine during one round does not decide it; the
    ratio of the two sides' totals is printed beside it.

    The drains before it leave work for the database's housekeeping (dead rows, a pending
    checkpoint): it is done first, so neither side waits for it; and one round of each side
    warms the server up (the workers' first requests read the policy, prepare statements)
    before anything is counted."""
    with psycopg.connect(URL, autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE)")
        conn.execute("CHECKPOINT")
    server = gunicorn()
    per_round = max(count // rounds, 1)
    bare_body = [b'{"n": 1}'] * per_round

    def timed(side: str, r: int) -> float:
        if side == "bare":
            return post_all("/bench/bare", bare_body, "unused")
        events = [event(r * per_round + n, "side") for n in range(per_round)]
        return post_all("/api/v1/events", events, token)

    timed("intake", rounds)  # warm-up: its events are numbered after the counted ones
    timed("bare", rounds)
    seconds = {"intake": 0.0, "bare": 0.0}
    ratios = []
    for r in range(rounds):
        pair = {}
        for side in ("intake", "bare") if r % 2 == 0 else ("bare", "intake"):
            pair[side] = timed(side, r)
            seconds[side] += pair[side]
        ratios.append(pair["bare"] / pair["intake"])  # intake's rate over the bare view's
    server.stop()
    intake, bare = (per_round * rounds / seconds[side] for side in ("intake", "bare"))
    return {
        "rounds": rounds,
        "intake_per_s": round(intake, 1),
        "bare_per_s": round(bare, 1),
        "ratio": round(statistics.median(ratios), 2),
        "ratio_of_totals": round(intake / bare, 2),
        "pair_ratios": [round(min(ratios), 2), round(max(ratios), 2)],
    }


def drain_phase(tag: str, count: int, workers: int, **extra: str) -> dict[str, Any]:
    before = counters()
    cluster = qcluster(workers, **extra)
    polls = wait_until_finished(tag, count, timeout=max(600, count / 2))
    cluster.stop()
    spent = counters() - before
    spent.commits -= polls
    spent.sessions -= 1  # the watcher's
    figures: dict[str, Any] = drain_figures(tag, count)
    figures.update(
        commits_per_run=round(spent.commits / count, 2),
        tasks=spent.acked,
        sessions=spent.sessions,
        rows_per_run=round(spent.inserted / count, 2),
    )
    return figures


def latency_phase(token: str, count: int) -> dict[str, float]:
    """Runs sent one at a time to an idle cluster: intake to completion."""
    cluster = qcluster(2)
    server = gunicorn()
    time.sleep(3)  # the cluster's workers are up and waiting
    for n in range(count):
        post_all("/api/v1/events", [event(n, "latency")], token, connections=1)
        time.sleep(0.1)
    wait_until_finished("latency", count, timeout=120)
    server.stop()
    cluster.stop()
    with psycopg.connect(URL, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT extract(epoch FROM finished_at - created_at) FROM automation_run "
            "WHERE event_id LIKE 'bench-latency-%' ORDER BY 1"
        ).fetchall()
    seconds = [float(row[0]) for row in rows]
    return {
        "p50_s": round(statistics.median(seconds), 3),
        "p95_s": round(seconds[int(0.95 * (len(seconds) - 1))], 3),
    }


def submit_in_process(tag: str, count: int, channel: str = "api") -> None:
    """Queue `count` runs through the intake service, from two processes (the backlog)."""
    code = (
        "import json, sys\n"
        "from automation.intake.services import channel_get_or_create, intake_submit\n"
        "from bench.throughput import event\n"
        # The bench's own channels (the model phase's) are made with their classifier.
        "from automation.models import IntakeChannel\n"
        f"channel = IntakeChannel.objects.filter(name={channel!r}).first() or "
        f"channel_get_or_create(name={channel!r})\n"
        "start, stop = int(sys.argv[1]), int(sys.argv[2])\n"
        "for n in range(start, stop):\n"
        f"    intake_submit(channel=channel, raw=event(n, {tag!r}), "
        "content_type='application/json', source='bench')\n"
    )
    half = count // 2
    procs = [
        subprocess.Popen(  # noqa: S603 - our own interpreter
            [PY, "-c", f"import django; django.setup()\n{code}", str(a), str(b)],
            cwd=ROOT,
            env=env(),
        )
        for a, b in ((0, half), (half, count))
    ]
    for proc in procs:
        if proc.wait() != 0:
            raise SystemExit("backlog intake failed")


def backlog_phase(count: int, workers: int) -> dict[str, Any]:
    submit_in_process("backlog", count)
    figures = drain_phase("backlog", count, workers)
    with psycopg.connect(URL, autocommit=True) as conn:
        steps = conn.execute(
            "SELECT count(*) FROM automation_stagerecord s JOIN automation_run r "
            "ON r.id = s.run_id WHERE r.event_id LIKE 'bench-backlog-%'"
        ).fetchone()[0]  # type: ignore[index]
        nudged = conn.execute(
            "SELECT count(*) FROM audit_auditevent WHERE action = 'sweep.nudged'"
        ).fetchone()[0]  # type: ignore[index]
    figures.update(
        step_executions=int(steps), steps_needed=count * len(STAGES), sweep_nudged=int(nudged)
    )
    return figures


def dbos_phase(count: int) -> dict[str, Any] | None:
    if not (PEER.exists() and PEER_PYTHON.exists()):
        return None
    fresh_database("peer_dbos")
    done = subprocess.run(  # noqa: S603 - the peer's own interpreter and script
        [str(PEER_PYTHON), str(PEER), f"{SERVER}/peer_dbos", str(count), "16", "queue"],
        capture_output=True,
        text=True,
        check=True,
    )
    line = next(ln for ln in reversed(done.stdout.splitlines()) if ln.startswith("{"))
    return dict(json.loads(line))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--backlog", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--latency-runs", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=20, help="of the side-by-side intake")
    parser.add_argument("--skip", action="append", default=[], help="redis, backlog, dbos, model")
    parser.add_argument("--model-runs", type=int, default=1000, help="of the model phase")
    parser.add_argument("--model-latency", type=float, default=1.0, help="seconds an answer takes")
    parser.add_argument("--model-concurrency", type=int, default=64, help="calls in flight")
    args = parser.parse_args()
    report: dict[str, Any] = {}

    def show(name: str, figures: Any) -> None:
        report[name] = figures
        print(f"{name:>10}: {json.dumps(figures)}", flush=True)

    token = setup()
    show("intake", intake_phase(token, args.runs, "orm"))
    show("bare", bare_phase(args.runs))
    show("drain", drain_phase("orm", args.runs, args.workers))
    # The peer right after the drain it is compared with: the machine's speed drifts.
    peer = None if "dbos" in args.skip else dbos_phase(args.runs)
    if peer is not None:
        show("dbos", peer)
    show("latency", latency_phase(token, args.latency_runs))
    if "redis" not in args.skip:
        redis_env = {"GATEHOUSE_REDIS_URL": REDIS}
        redis.Redis.from_url(REDIS).flushdb()
        intake_phase(token, args.runs, "redis", **redis_env)
        show("redis", drain_phase("redis", args.runs, args.workers, **redis_env))
    if "backlog" not in args.skip:
        show("backlog", backlog_phase(args.backlog, args.workers))
    if "model" not in args.skip:
        from bench.model import model_phase

        show(
            "model sum",
            model_phase(args.model_runs, args.workers, args.model_concurrency, args.model_latency),
        )
    # Last: its runs are left queued (nothing drains them), out of every other phase's way.
    show("side by side", side_by_side_phase(token, args.runs, args.rounds))

    drain = report["drain"]
    load = os.getloadavg()
    summary = {
        "runs_per_s": drain["runs_per_s"],
        "p50_latency_s": report["latency"]["p50_s"],
        "p95_latency_s": report["latency"]["p95_s"],
        "commits_per_run": round(
            drain["commits_per_run"] + report["intake"]["commits_per_request"], 2
        ),
        "sessions_per_task": round(drain["sessions"] / max(drain["tasks"], 1), 4),
        "messages_per_run": round(drain["tasks"] / args.runs, 2),
        "dbos_per_s": peer["per_s"] if peer else None,
        "ratio": round(drain["runs_per_s"] / peer["per_s"], 2) if peer else None,
        "intake_ratio": report["side by side"]["ratio"],
        "model_runs_per_s": report.get("model sum", {}).get("runs_per_s"),
        "model_ratio": report.get("model sum", {}).get("ratio"),
        "load": [round(x, 2) for x in load],
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
