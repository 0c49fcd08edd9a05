"""`make bench`'s model phase: straight-through runs read by a model server that answers
after a fixed latency (default 1 s), against the DBOS peer calling the same server.

1. A local OpenAI-compatible server (bench.modelserver) answers every request after the
   latency, with the reading of the bench's events.
2. Gatehouse: real `qcluster` workers (two by default) with the `openai-compatible`
   classifier and a cap of calls in flight (64 by default). A cluster is started idle (its
   workers' memory, idle), then N runs are queued through the intake service and a cluster
   drains them. Printed: runs/s (first step to
   last completion), the most calls the server held at once, p50 and p95 from intake to
   completion (a backlog: most of it is the wait in the queue), and the workers' memory
   (RSS) idle and at its peak.
3. The DBOS peer (bench/peer_dbos_model.py) on the same PostgreSQL: the same run shape, its
   classify step calling a fresh server of the same latency, through a DBOS queue whose
   concurrency is the same cap.
Then the ratio of the two rates.

usage: python -m bench.model [--runs N] [--latency S] [--concurrency C] [--workers W]
(`make bench` runs it after the other phases; `--skip model` leaves it out.)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

from bench.throughput import (
    DB,
    PEER_PYTHON,
    PY,
    ROOT,
    SERVER,
    URL,
    Process,
    fresh_database,
    manage,
    qcluster,
    setup,
    submit_in_process,
    wait_until_finished,
)

PEER = ROOT / "bench" / "peer_dbos_model.py"
CHANNEL = "model"


class ModelServer:
    """bench.modelserver in a process of its own: its base URL, then its figures."""

    def __init__(self, latency: float) -> None:
        self.popen = subprocess.Popen(  # noqa: S603 - our own interpreter and module
            [PY, "-m", "bench.modelserver", "--latency", str(latency)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        if self.popen.stdout is None:
            raise SystemExit("the model server did not start")
        self.base_url = str(json.loads(self.popen.stdout.readline())["base_url"])

    def stop(self) -> dict[str, int]:
        self.popen.terminate()
        out, _ = self.popen.communicate(timeout=30)
        return dict(json.loads(out.strip().splitlines()[-1]))


def model_env(base_url: str, concurrency: int) -> dict[str, str]:
    return {
        "GATEHOUSE_OPENAI_BASE_URL": base_url,
        "GATEHOUSE_OPENAI_MODEL": "bench-model",
        "GATEHOUSE_OPENAI_CONCURRENCY": str(concurrency),
    }


def make_channel(base_url: str, concurrency: int) -> None:
    manage(
        "shell",
        "-c",
        "from automation.classifiers import classifier_versions\n"
        "from automation.models import IntakeChannel\n"
        "version, prompt = classifier_versions('openai-compatible')\n"
        f"IntakeChannel.objects.get_or_create(name={CHANNEL!r}, defaults=dict("
        "classifier='openai-compatible', classifier_version=version, "
        "workflow_version='workflow-1', prompt_version=prompt))\n",
        **model_env(base_url, concurrency),
    )


def the_prompt() -> str:
    """The system prompt Gatehouse's classifier sends (the DBOS peer sends the same)."""
    return manage(
        "shell",
        "-c",
        "from automation.classifiers.openai_compatible import system_prompt\n"
        "print(system_prompt(), end='')",
    )


def _session(pid: int) -> int | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[3])  # after the state, the parent and the group: the session


def _rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def cluster_rss(cluster: Process) -> dict[int, float]:
    """Resident memory of each process of the cluster (its session), in MB."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and _session(int(entry)) == cluster.popen.pid:
            rss = _rss_mb(int(entry))
            if rss is not None:
                found[int(entry)] = rss
    return found


class PeakRss(threading.Thread):
    def __init__(self, cluster: Process) -> None:
        super().__init__(daemon=True)
        self.cluster = cluster
        self.peak: dict[int, float] = {}
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.5):
            for pid, rss in cluster_rss(self.cluster).items():
                self.peak[pid] = max(self.peak.get(pid, 0.0), rss)


def gatehouse_phase(count: int, workers: int, concurrency: int, latency: float) -> dict[str, Any]:
    server = ModelServer(latency)
    make_channel(server.base_url, concurrency)
    settings = model_env(server.base_url, concurrency)
    # The workers' memory idle, from a cluster up with nothing to do (every worker forked
    # and waiting); then the runs are queued, and a cluster drains them.
    cluster = qcluster(workers, **settings)
    time.sleep(6)
    idle = sorted(cluster_rss(cluster).values(), reverse=True)
    cluster.stop()
    submit_in_process("model", count, channel=CHANNEL)
    cluster = qcluster(workers, **settings)
    sampler = PeakRss(cluster)
    sampler.start()
    wait_until_finished("model", count, timeout=max(600, count))
    sampler.done.set()
    sampler.join()
    cluster.stop()
    seen = server.stop()
    with psycopg.connect(URL, autocommit=True) as conn:
        first, last = conn.execute(
            "SELECT min(s.started_at), max(r.finished_at) FROM automation_run r "
            "JOIN automation_stagerecord s ON s.run_id = r.id AND s.stage = 'validate' "
            "WHERE r.event_id LIKE 'bench-model-%'"
        ).fetchone()  # type: ignore[misc]
        waits = [
            float(row[0])
            for row in conn.execute(
                "SELECT extract(epoch FROM finished_at - created_at) FROM automation_run "
                "WHERE event_id LIKE 'bench-model-%' ORDER BY 1"
            ).fetchall()
        ]
        calls = conn.execute(
            "SELECT count(*) FROM automation_classificationattempt a JOIN automation_run r "
            "ON r.id = a.run_id WHERE r.event_id LIKE 'bench-model-%'"
        ).fetchone()[0]  # type: ignore[index]
    seconds = (last - first).total_seconds()
    # The workers are the largest processes of either cluster, the same number of each.
    peak = sorted(sampler.peak.values(), reverse=True)
    growth = [p - i for p, i in zip(peak[:workers], idle[:workers], strict=False)]
    return {
        "runs": count,
        "seconds": round(seconds, 2),
        "runs_per_s": round(count / seconds, 1),
        "calls": int(calls),
        "requests_seen": seen["requests"],
        "most_in_flight": seen["most_in_flight"],
        "p50_s": round(statistics.median(waits), 2),
        "p95_s": round(waits[int(0.95 * (len(waits) - 1))], 2),
        "worker_rss_idle_mb": [round(i, 1) for i in idle[:workers]],
        "worker_rss_growth_mb": [round(g, 1) for g in growth],
    }


def dbos_phase(count: int, concurrency: int, latency: float, prompt: str) -> dict[str, Any] | None:
    if not PEER_PYTHON.exists():
        return None
    fresh_database("peer_dbos")
    server = ModelServer(latency)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as file:
        file.write(prompt)
    try:
        done = subprocess.run(  # noqa: S603 - the peer's own interpreter and script
            [
                str(PEER_PYTHON),
                str(PEER),
                f"{SERVER}/peer_dbos",
                str(count),
                str(concurrency),
                server.base_url,
                file.name,
            ],
            capture_output=True,
            text=True,
            check=False,
        )
    finally:
        seen = server.stop()
        Path(file.name).unlink()
    if done.returncode != 0:
        raise SystemExit(f"the DBOS peer failed:\n{done.stderr[-3000:]}")
    line = next(ln for ln in reversed(done.stdout.splitlines()) if ln.startswith("{"))
    figures = dict(json.loads(line))
    figures.update(requests_seen=seen["requests"], most_in_flight=seen["most_in_flight"])
    return figures


def model_phase(count: int, workers: int, concurrency: int, latency: float) -> dict[str, Any]:
    ours = gatehouse_phase(count, workers, concurrency, latency)
    print(f"{'model':>10}: {json.dumps(ours)}", flush=True)
    peer = dbos_phase(count, concurrency, latency, the_prompt())
    if peer is not None:
        print(f"{'dbos model':>10}: {json.dumps(peer)}", flush=True)
    return {
        "latency_s": latency,
        "concurrency": concurrency,
        "workers": workers,
        "runs_per_s": ours["runs_per_s"],
        "most_in_flight": ours["most_in_flight"],
        "p50_s": ours["p50_s"],
        "p95_s": ours["p95_s"],
        "worker_rss_growth_mb": max(ours["worker_rss_growth_mb"], default=0.0),
        "dbos_per_s": peer["per_s"] if peer else None,
        "dbos_most_in_flight": peer["most_in_flight"] if peer else None,
        "ratio": round(ours["runs_per_s"] / peer["per_s"], 2) if peer else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--latency", type=float, default=1.0)
    args = parser.parse_args()
    setup()
    summary = model_phase(args.runs, args.workers, args.concurrency, args.latency)
    summary["load"] = [round(x, 2) for x in os.getloadavg()]
    summary["database"] = DB
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
