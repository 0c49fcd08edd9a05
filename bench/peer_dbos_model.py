"""The DBOS peer with a model: the shape of ../shared/bench/peer_dbos.py, its classify step
calling the same OpenAI-compatible server as Gatehouse's workers, with the same request.

Each workflow validates the event (pydantic), normalizes and fingerprints it, classifies it
by a chat-completions call (one HTTP connection kept per thread, the answer's JSON parsed and
checked), decides, and records the effect under a unique key; DBOS checkpoints every step in
its system database. Workflows go through a DBOS queue whose concurrency is the cap of calls
in flight. It runs in the peer's own environment (.bench-dbos: dbos, pydantic, psycopg), so
it uses the standard library's HTTP client.

usage: python peer_dbos_model.py POSTGRES_URL N CONCURRENCY BASE_URL PROMPT_FILE
Prints one JSON line: workflows/s, p50 and p95 from enqueue to completion, commits per
workflow, and the peak resident memory of the process.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import queue
import resource
import statistics
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
from dbos import DBOS, DBOSConfig
from pydantic import BaseModel, ConfigDict

URL, N, CONC = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
BASE_URL, PROMPT = sys.argv[4], Path(sys.argv[5]).read_text(encoding="utf-8")
TARGET = urlsplit(BASE_URL)
ROUTES = {"support": "service_desk", "billing": "finance", "sales": "commercial"}


class Event(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    event_id: str
    source: str
    request_type: str
    subject: str
    body: str
    account_tier: str
    requested_action: str


class Decision(BaseModel):
    category: str
    recommended_route: str
    requested_effect: str
    reason_code: str
    confidence: float | None = None
    fields: dict = {}


_local = threading.local()


def _post(body: bytes) -> dict:
    for attempt in range(2):  # a kept connection the server closed: once more on a new one
        if getattr(_local, "http", None) is None:
            _local.http = http.client.HTTPConnection(
                TARGET.hostname or "127.0.0.1", TARGET.port, timeout=30
            )
        try:
            _local.http.request(
                "POST",
                TARGET.path.rstrip("/") + "/chat/completions",
                body=body,
                headers={"Content-Type": "application/json", "Authorization": "Bearer bench"},
            )
            response = _local.http.getresponse()
            data = response.read()
            if response.getheader("Connection", "").lower() == "close" or response.version < 11:
                _local.http.close()
                _local.http = None
            if response.status != 200:
                raise RuntimeError(f"model server answered {response.status}")
            return json.loads(data)
        except (OSError, http.client.HTTPException):
            _local.http.close()
            _local.http = None
            if attempt:
                raise
    raise RuntimeError("unreachable")


@DBOS.step()
def validate(event: dict) -> dict:
    return Event.model_validate(event).model_dump()


@DBOS.step()
def normalize(event: dict) -> dict:
    e = dict(
        event, subject=" ".join(event["subject"].split()), body=" ".join(event["body"].split())
    )
    canonical = json.dumps(e, sort_keys=True, separators=(",", ":"))
    e["fingerprint"] = hashlib.sha256(canonical.encode()).hexdigest()
    return e


@DBOS.step()
def classify(event: dict) -> dict:
    request = {
        "model": "bench-model",
        "temperature": 0,
        "max_tokens": 1024,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "decision", "schema": {}},
        },
        "messages": [
            {"role": "system", "content": PROMPT},
            {"role": "user", "content": json.dumps(event)},
        ],
    }
    answer = _post(json.dumps(request).encode())
    text = answer["choices"][0]["message"]["content"]
    return Decision.model_validate_json(text).model_dump()


@DBOS.step()
def decide(event: dict, decision: dict) -> bool:
    return (
        decision["category"] == event["request_type"]
        and decision["requested_effect"] == event["requested_action"]
        and ROUTES.get(decision["category"]) == decision["recommended_route"]
    )


# The effect's table is written through a few shared connections: DBOS runs a workflow's
# steps on threads of its own, more of them than the queue's concurrency, and a connection
# per thread runs PostgreSQL out of connections at a fast model's pace.
_connections: queue.Queue[psycopg.Connection] = queue.Queue()
_made = 0
_making = threading.Lock()
EFFECT_CONNECTIONS = 8


def _connection() -> psycopg.Connection:
    global _made
    with _making:
        if _connections.empty() and _made < EFFECT_CONNECTIONS:
            _made += 1
            return psycopg.connect(URL, autocommit=True)
    return _connections.get()


@DBOS.step()
def record_effect(key: str, effect: str) -> None:
    conn = _connection()
    try:
        conn.execute(
            "INSERT INTO peer_effects (key, effect) VALUES (%s, %s) ON CONFLICT (key) DO NOTHING",
            (key, effect),
        )
    finally:
        _connections.put(conn)


@DBOS.workflow()
def run(event: dict) -> str:
    e = normalize(validate(event))
    d = classify(e)
    if not decide(e, d):
        return "blocked"
    key = hashlib.sha256(f"{e['fingerprint']}:{d['requested_effect']}".encode()).hexdigest()
    record_effect(key, d["requested_effect"])
    return "completed"


def one(url: str, sql: str) -> int:
    with psycopg.connect(url) as c:
        row = c.execute(sql).fetchone()
    return int(row[0]) if row else 0


def commits(url: str) -> int:
    return one(url, "select sum(xact_commit) from pg_stat_database")


def check(holds: bool, what: str) -> None:
    if not holds:
        raise SystemExit(f"the peer went wrong: {what}")


def main() -> None:
    with psycopg.connect(URL, autocommit=True) as c:
        c.execute("CREATE TABLE IF NOT EXISTS peer_effects (key text primary key, effect text)")
        c.execute("TRUNCATE peer_effects")
    DBOS(config=DBOSConfig(name="peer-model", system_database_url=URL))
    DBOS.launch()
    queue = DBOS.register_queue(
        "runs", worker_concurrency=CONC, polling_interval_sec=0.1, on_conflict="always_update"
    )
    events = [
        {
            "event_id": f"evt-{i}-{time.time_ns()}",
            "source": "web_form",
            "request_type": "support",
            "subject": f"CSV export fails ({i})",
            "body": "The CSV export of our reports fails with an error since this morning. "
            "Please create a follow-up so support can help.",
            "account_tier": "standard",
            "requested_action": "create_follow_up",
        }
        for i in range(N)
    ]
    c0, t0 = commits(URL), time.perf_counter()
    handles = [queue.enqueue(run, e) for e in events]
    results = [h.get_result() for h in handles]
    dt, c1 = time.perf_counter() - t0, commits(URL)
    check(results.count("completed") == N, f"results {results[:3]}")
    check(one(URL, "select count(*) from peer_effects") == N, "effects recorded")
    with psycopg.connect(URL) as c:
        # From enqueue to completion, as DBOS recorded each workflow (milliseconds).
        waits = sorted(
            (row[0] / 1000.0)
            for row in c.execute(
                "select updated_at - created_at from dbos.workflow_status "
                "where status = 'SUCCESS' and name like %s",
                ["%run"],
            ).fetchall()
        )
    check(len(waits) == N, f"{len(waits)} workflows recorded")
    print(
        json.dumps(
            {
                "peer": "dbos-queue-model",
                "workflows": N,
                "concurrency": CONC,
                "seconds": round(dt, 2),
                "per_s": round(N / dt, 1),
                "p50_s": round(statistics.median(waits), 2),
                "p95_s": round(waits[int(0.95 * (len(waits) - 1))], 2),
                "commits_per_workflow": round((c1 - c0) / N, 2),
                "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            }
        )
    )
    DBOS.destroy()


if __name__ == "__main__":
    main()
