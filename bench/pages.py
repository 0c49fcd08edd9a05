"""`make bench-pages`: how fast the pages people use answer over a large history.

It makes a database of its own (`gatehouse_pages` on the local PostgreSQL), migrates it,
loads the policy and fills it with N runs by bulk SQL (bench.generate; --reuse keeps a
database that already holds N runs). Then, for each page:

- p50/p95 of `--requests` GETs over HTTP, against gunicorn (2 sync workers), as a user of
  the role the page is for (a session made for that user in the database, sent as a cookie;
  the API and /metrics with their bearer tokens), next to the trivial page (the login form);
- that p95 as a ratio to the trivial page's, timed in the same invocation (`x_trivial`);
- where one request's time goes, in process: SQL, templates, the rest of Python (`breakdown`);
- the queries the view makes on a warm request, counted in process (the Django test client
  on the same database, CaptureQueriesContext), each SELECT explained with EXPLAIN (ANALYZE):
  `seq_scan_runs` when a plan reads automation_run by a sequential scan, `unfiltered_count`
  when it counts automation_run with no condition, and the plan of any query over 50 ms.

The last line printed is one JSON object (see `summary`).
"""

from __future__ import annotations

import argparse
import functools
import http.client
import json
import math
import os
import re
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import psycopg

from bench.throughput import ROOT, SERVER, Process, env, fresh_database, manage

DB = "gatehouse_pages"
URL = f"{SERVER}/{DB}"
PORT = int(os.environ.get("GATEHOUSE_BENCH_PAGES_PORT", "8766"))
METRICS_TOKEN = "bench-pages-metrics-token"  # noqa: S105 - a local benchmark's own token
SLOW_MS = 50.0
TRIVIAL = "/accounts/login/"
# Requests not timed before each page. Each gunicorn worker's first request to a view imports
# it and fills its caches; sync workers take connections as they come free, so two requests
# may both go to one worker: six leave both warm.
WARM = 6


@dataclass(frozen=True)
class Page:
    name: str
    path: str
    # Who asks: "lead" (ops-leads), "approver" (security-approvers), "admin" (superuser),
    # "metrics" (the scraper's bearer token), "api" (an integrator's API token), "anonymous".
    who: str


@dataclass
class Figures:
    times_ms: list[float] = field(default_factory=list)
    queries: int = 0
    seq_scan_runs: bool = False
    unfiltered_count: bool = False
    slow_plans: list[str] = field(default_factory=list)
    # Where a request's time goes, in process (median ms): see `breakdown`.
    sql_ms: float = 0.0
    template_ms: float = 0.0
    python_ms: float = 0.0

    def percentile(self, fraction: float) -> float:
        """Nearest rank: the smallest time that `fraction` of the requests did not exceed."""
        ordered = sorted(self.times_ms)
        return ordered[max(math.ceil(fraction * len(ordered)) - 1, 0)]


# --- the database ------------------------------------------------------------------------


def runs_present() -> int | None:
    """How many runs the benchmark database holds (None: no database, or not migrated)."""
    try:
        with psycopg.connect(URL, autocommit=True) as conn:
            return int(conn.execute("SELECT count(*) FROM automation_run").fetchone()[0])  # type: ignore[index]
    except psycopg.Error:
        return None


def prepare(runs: int, reuse: bool) -> None:
    if reuse and runs_present() == runs:
        print(f"reusing {DB}: it holds {runs} runs; migrating it to this code", flush=True)
        manage("migrate", "--no-input", "-v", "0", DATABASE_URL=URL)
        return
    fresh_database(DB)
    manage("migrate", "--no-input", "-v", "0", DATABASE_URL=URL)
    manage("load_policy", DATABASE_URL=URL)


def django_setup() -> None:
    os.environ.update(env(DATABASE_URL=URL, GATEHOUSE_METRICS_TOKEN=METRICS_TOKEN))
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()


@dataclass(frozen=True)
class Actors:
    users: dict[str, Any]
    api_key: str


def actors() -> Actors:
    """The users of each role, the API token and the intake channel (idempotent)."""
    from django.contrib.auth.models import Group, User

    from accounts.roles import roles_ensure
    from automation.intake.services import api_token_create, channel_get_or_create

    roles_ensure()
    users: dict[str, Any] = {}
    for who, group in (("lead", "ops-leads"), ("approver", "security-approvers")):
        user, _ = User.objects.get_or_create(username=f"bench-{who}")
        user.groups.add(Group.objects.get(name=group))
        users[who] = user
    admin, _ = User.objects.get_or_create(
        username="bench-admin", defaults={"is_staff": True, "is_superuser": True}
    )
    users["admin"] = admin
    channel = channel_get_or_create(name="api")
    # A token's name is unique and tokens are never deleted: one more per benchmark.
    _, key = api_token_create(name=f"bench-pages-{time.time_ns()}", channel=channel)
    return Actors(users=users, api_key=key)


def fill(runs: int, approver_id: int) -> None:
    from django.db import connection, transaction

    from automation.intake.services import channel_get_or_create
    from bench.generate import generate
    from policy.models import PolicyVersion

    policy = PolicyVersion.objects.filter(is_active=True).values_list("name", flat=True).first()
    started = time.perf_counter()

    def progress(name: str, seconds: float) -> None:
        print(f"  {name:<24} {seconds:7.1f} s", flush=True)

    print(f"generating {runs} runs", flush=True)
    channel = channel_get_or_create(name="api")
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL synchronous_commit = off")
        generate(
            cursor,
            runs=runs,
            channel_id=channel.pk,
            approver_id=approver_id,
            policy_version=policy or "",
            now=datetime.now(UTC),
            progress=progress,
        )
    with connection.cursor() as cursor:
        # What autovacuum does to a database that grew over months: statistics, and the
        # visibility map that lets index-only scans skip the table.
        cursor.execute("VACUUM (ANALYZE)")
    print(f"generated in {time.perf_counter() - started:.0f} s", flush=True)


# --- the pages ---------------------------------------------------------------------------


def pages(api_run: int) -> list[Page]:
    """The pages to time, with the runs they show picked from the database."""
    from automation.models import Run

    completed = Run.objects.filter(state="completed").order_by("pk").values_list("pk", flat=True)
    oldest = completed.first()
    newest = completed.reverse().first()
    middle = Run.objects.filter(pk__gte=((oldest or 0) + (newest or 0)) // 2).order_by("pk").first()
    event_id = middle.event_id if middle else "none"
    return [
        Page("approval_inbox", "/approvals/", "approver"),
        Page("my_work", "/me/work/", "approver"),
        Page("ops_queues", "/ops/queues/", "lead"),
        Page("queue_low_confidence", "/ops/queues/low_confidence/", "lead"),
        Page("run_old", f"/runs/{oldest}/", "lead"),
        Page("run_recent", f"/runs/{newest}/", "lead"),
        Page("admin_runs", "/admin/automation/run/", "admin"),
        Page("admin_search", f"/admin/automation/run/?q={event_id}", "admin"),
        Page("reports", "/reports/", "lead"),
        Page("metrics", "/metrics", "metrics"),
        Page("api_run", f"/api/v1/runs/{api_run}", "api"),
    ]


def headers_for(who: str, sessions: dict[str, str], api_key: str) -> dict[str, str]:
    from django.conf import settings

    if who == "metrics":
        return {"Authorization": f"Bearer {METRICS_TOKEN}"}
    if who == "api":
        return {"Authorization": f"Bearer {api_key}"}
    if who == "anonymous":
        return {}
    return {"Cookie": f"{settings.SESSION_COOKIE_NAME}={sessions[who]}"}


def sessions_for(users: dict[str, Any]) -> dict[str, str]:
    """A logged-in session per user, stored in the database gunicorn reads sessions from."""
    from django.conf import settings
    from django.test import Client

    keys = {}
    for who, user in users.items():
        client = Client()
        client.force_login(user)
        keys[who] = client.cookies[settings.SESSION_COOKIE_NAME].value
    return keys


def get(path: str, headers: dict[str, str]) -> tuple[int, float]:
    started = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=300)
    conn.request("GET", path, headers=headers)
    response = conn.getresponse()
    response.read()
    conn.close()
    return response.status, (time.perf_counter() - started) * 1000


def serve() -> Process:
    args = ["bench.wsgi", "-w", "2", "-k", "sync", "-b", f"127.0.0.1:{PORT}", "--timeout", "300"]
    server = Process(
        [sys.executable, "-m", "gunicorn", *args],
        DATABASE_URL=URL,
        GATEHOUSE_METRICS_TOKEN=METRICS_TOKEN,
    )
    for _ in range(150):
        try:
            get(TRIVIAL, {})
            return server
        except OSError:
            time.sleep(0.1)
    server.stop()
    raise SystemExit("gunicorn did not start")


def time_page(path: str, headers: dict[str, str], requests: int) -> list[float]:
    # Warm: each worker's first request to a view imports it and fills its caches.
    for _ in range(WARM):
        status, _ = get(path, headers)
        if status != 200:
            raise SystemExit(f"GET {path} answered {status}")
    times = []
    for _ in range(requests):
        status, ms = get(path, headers)
        if status != 200:
            raise SystemExit(f"GET {path} answered {status}")
        times.append(ms)
    return times


# --- the queries and their plans -------------------------------------------------------


def plan_nodes(node: dict[str, Any], ancestors: tuple[str, ...] = ()) -> Iterator[Any]:
    """Every node of a JSON plan with the node types above it."""
    yield node, ancestors
    for child in node.get("Plans", []):
        yield from plan_nodes(child, (*ancestors, node["Node Type"]))


def plan_text(node: dict[str, Any], depth: int = 0) -> Iterator[str]:
    """A JSON plan as indented lines, like EXPLAIN's text form (the parts that matter)."""
    where = f" on {node['Relation Name']}" if "Relation Name" in node else ""
    index = f" using {node['Index Name']}" if "Index Name" in node else ""
    conds = [f"{k}: {node[k]}" for k in ("Index Cond", "Filter", "Hash Cond") if k in node]
    yield (
        f"{'  ' * depth}-> {node['Node Type']}{index}{where} "
        f"(actual {node.get('Actual Total Time', 0):.1f} ms, rows {node.get('Actual Rows')}, "
        f"loops {node.get('Actual Loops')}){' ' + '; '.join(conds) if conds else ''}"
    )
    for child in node.get("Plans", []):
        yield from plan_text(child, depth + 1)


SCANS = {"Seq Scan", "Index Scan", "Index Only Scan", "Bitmap Heap Scan", "Parallel Seq Scan"}
COUNT_ALL = re.compile(r'^SELECT COUNT\(\*\)( AS "__count")? FROM "automation_run"\s*$', re.I)


def unfiltered_count(sql: str, plan: dict[str, Any], partial: frozenset[str]) -> bool:
    """COUNT over automation_run with no condition: a read of every run to print a number.
    A scan of a partial index (`partial`) is filtered by the index's own WHERE, which the
    plan does not repeat."""
    if COUNT_ALL.match(sql.strip()):
        return True
    if "COUNT(" not in sql.upper():
        return False
    return any(
        node["Node Type"] in SCANS
        and node.get("Relation Name") == "automation_run"
        and not any(k in node for k in ("Filter", "Index Cond", "Recheck Cond"))
        and node.get("Index Name") not in partial
        and "Aggregate" in ancestors
        and not any("Join" in a or a == "Nested Loop" for a in ancestors)
        for node, ancestors in plan_nodes(plan)
    )


@functools.cache
def partial_indexes() -> frozenset[str]:
    """The partial indexes on automation_run (CREATE INDEX ... WHERE ...)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = 'automation_run' "
            "AND indexdef LIKE '% WHERE %'"
        )
        return frozenset(name for (name,) in cursor.fetchall())


def explain(sql: str, figures: Figures) -> None:
    from django.db import connection

    head = sql.lstrip().upper()
    if not head.startswith(("SELECT", "WITH")) or "FOR UPDATE" in head:
        return
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}")
        document = cursor.fetchone()[0]
    result = (json.loads(document) if isinstance(document, str) else document)[0]
    plan = result["Plan"]
    figures.seq_scan_runs |= any(
        node["Node Type"] in ("Seq Scan", "Parallel Seq Scan")
        and node.get("Relation Name") == "automation_run"
        for node, _ in plan_nodes(plan)
    )
    figures.unfiltered_count |= unfiltered_count(sql, plan, partial_indexes())
    if result["Execution Time"] > SLOW_MS:
        lines = "\n".join(plan_text(plan, 1))
        figures.slow_plans.append(f"{result['Execution Time']:.0f} ms: {sql[:600]}\n{lines}")


def capture(page: Page, actors: Actors, figures: Figures) -> None:
    """The view's queries in process, each explained."""
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    client = Client(HTTP_HOST="127.0.0.1")
    if page.who in actors.users:
        client.force_login(actors.users[page.who])
    headers = headers_for(page.who, {}, actors.api_key) if page.who in ("metrics", "api") else {}
    client.get(page.path, headers=headers)  # warm, as the timed requests are
    with CaptureQueriesContext(connection) as queries:
        response = client.get(page.path, headers=headers)
    if response.status_code != 200:
        raise SystemExit(f"{page.path} answered {response.status_code} in process")
    figures.queries = len(queries.captured_queries)
    for query in queries.captured_queries:
        explain(query["sql"], figures)


def breakdown(page: Page, actors: Actors, figures: Figures, requests: int) -> None:
    """Where the view's time goes, in process (the Django test client, no HTTP): the median
    over `requests` GETs of the time in SQL (each query from the driver's call to its last
    row, through Django's execute wrapper), in templates (the outermost render, less the
    SQL its lazy querysets ran) and in the rest of Python (middleware, view, ORM objects)."""
    from django.db import connection
    from django.template.backends.django import Template
    from django.test import Client

    client = Client(HTTP_HOST="127.0.0.1")
    if page.who in actors.users:
        client.force_login(actors.users[page.who])
    headers = headers_for(page.who, {}, actors.api_key) if page.who in ("metrics", "api") else {}
    clock = {"sql": 0.0, "template": 0.0, "sql_in_template": 0.0, "depth": 0}

    def timed_sql(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            spent = time.perf_counter() - started
            clock["sql"] += spent
            if clock["depth"]:
                clock["sql_in_template"] += spent

    original = Template.render

    def timed_render(self: Any, context: Any = None, request: Any = None) -> Any:
        if clock["depth"]:
            return original(self, context, request)
        clock["depth"] = 1
        started = time.perf_counter()
        try:
            return original(self, context, request)
        finally:
            clock["template"] += time.perf_counter() - started
            clock["depth"] = 0

    samples: list[tuple[float, float, float]] = []
    Template.render = timed_render  # type: ignore[method-assign]
    try:
        with connection.execute_wrapper(timed_sql):
            for attempt in range(WARM + requests):
                clock.update(sql=0.0, template=0.0, sql_in_template=0.0, depth=0)
                started = time.perf_counter()
                response = client.get(page.path, headers=headers)
                total = time.perf_counter() - started
                if response.status_code != 200:
                    raise SystemExit(f"{page.path} answered {response.status_code} in process")
                if attempt < WARM:
                    continue
                template = clock["template"] - clock["sql_in_template"]
                samples.append((clock["sql"], template, total - clock["sql"] - template))
    finally:
        Template.render = original  # type: ignore[method-assign]

    def median(values: list[float]) -> float:
        ordered = sorted(values)
        return round(ordered[len(ordered) // 2] * 1000, 1)

    figures.sql_ms = median([s for s, _, _ in samples])
    figures.template_ms = median([t for _, t, _ in samples])
    figures.python_ms = median([p for _, _, p in samples])


def profile(page: Page, actors: Actors, requests: int) -> None:
    """The view's calls, by time, over `requests` GETs in process (pyinstrument)."""
    from django.test import Client
    from pyinstrument import Profiler

    client = Client(HTTP_HOST="127.0.0.1")
    if page.who in actors.users:
        client.force_login(actors.users[page.who])
    headers = headers_for(page.who, {}, actors.api_key) if page.who in ("metrics", "api") else {}
    for _ in range(WARM):
        client.get(page.path, headers=headers)
    profiler = Profiler(interval=0.0005)
    with profiler:
        for _ in range(requests):
            client.get(page.path, headers=headers)
    print(profiler.output_text(unicode=True, color=False, show_all=False))


# --- the report --------------------------------------------------------------------------


def ratio(figures: Figures, trivial: Figures) -> float:
    """A page's p95 over the trivial page's, both timed in the same invocation: a figure that
    does not move with how busy the machine is, as an absolute time does."""
    return round(figures.percentile(0.95) / trivial.percentile(0.95), 1)


def summary(runs: int, trivial: Figures, results: dict[str, Figures]) -> dict[str, Any]:
    return {
        "runs": runs,
        "trivial_p95_ms": round(trivial.percentile(0.95), 1),
        "load_1min": round(os.getloadavg()[0], 2),
        "pages": {
            name: {
                "p50_ms": round(f.percentile(0.5), 1),
                "p95_ms": round(f.percentile(0.95), 1),
                "x_trivial": ratio(f, trivial),
                "sql_ms": f.sql_ms,
                "template_ms": f.template_ms,
                "python_ms": f.python_ms,
                "queries": f.queries,
                "seq_scan_runs": f.seq_scan_runs,
                "unfiltered_count": f.unfiltered_count,
            }
            for name, f in results.items()
        },
    }


def table(trivial: Figures, results: dict[str, Figures]) -> str:
    head = ("page", "p50 ms", "p95 ms", "x trivial", "queries", "sql ms", "tmpl ms", "py ms")
    rows = [f"{head[0]:<22}" + "".join(f"{h:>9}" for h in head[1:]) + "  flags"]
    rows.append(
        f"{'trivial (login form)':<22} {trivial.percentile(0.5):>8.1f} "
        f"{trivial.percentile(0.95):>8.1f} {1.0:>8.1f}"
    )
    for name, f in results.items():
        flags = [n for n in ("seq_scan_runs", "unfiltered_count") if getattr(f, n)]
        rows.append(
            f"{name:<22} {f.percentile(0.5):>8.1f} {f.percentile(0.95):>8.1f} "
            f"{ratio(f, trivial):>8.1f} {f.queries:>8} {f.sql_ms:>8.1f} {f.template_ms:>8.1f} "
            f"{f.python_ms:>8.1f}  {', '.join(flags)}"
        )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument(
        "--reuse", action="store_true", help="keep the database if it holds --runs runs"
    )
    parser.add_argument("--only", help="time only these pages (names, comma-separated)")
    parser.add_argument(
        "--profile",
        metavar="PAGE",
        help="print where PAGE's time goes, by function (pyinstrument, in process), and stop",
    )
    args = parser.parse_args()

    reused = args.reuse and runs_present() == args.runs
    prepare(args.runs, args.reuse)
    django_setup()
    people = actors()
    if not reused:
        fill(args.runs, people.users["approver"].pk)
    if not reused:
        # As a deployment does after loading history: the report rollups, counted once (the
        # scheduled job keeps them current from then on).
        manage("rebuild_rollups", DATABASE_URL=URL)
        from django.db import connection

        with connection.cursor() as cursor:
            # The rollup tables' statistics, as autovacuum gathers them once they are filled:
            # without them the planner guesses their sizes.
            cursor.execute("VACUUM (ANALYZE)")

    from automation.models import Run

    api_run = Run.objects.filter(channel__name="api").order_by("-pk").values_list("pk", flat=True)
    chosen = pages(api_run.first() or 0)
    if args.profile:
        profile(next(p for p in chosen if p.name == args.profile), people, args.requests)
        return
    if args.only:
        chosen = [p for p in chosen if p.name in args.only.split(",")]
    sessions = sessions_for(people.users)
    results = {page.name: Figures() for page in chosen}
    server = serve()
    try:
        # Five times the requests: every ratio is divided by this p95, and at a millisecond or
        # two one late request among twenty moves it by half.
        trivial = Figures(times_ms=time_page(TRIVIAL, {}, 5 * args.requests))
        for page in chosen:
            headers = headers_for(page.who, sessions, people.api_key)
            results[page.name].times_ms = time_page(page.path, headers, args.requests)
            print(f"  timed {page.name}", flush=True)
    finally:
        server.stop()
    for page in chosen:
        capture(page, people, results[page.name])
        breakdown(page, people, results[page.name], args.requests)
    print(table(trivial, results))
    for name, figures in results.items():
        for plan in figures.slow_plans:
            print(f"\n[{name}] {plan}")
    print(json.dumps(summary(args.runs, trivial, results)), flush=True)


if __name__ == "__main__":
    main()
