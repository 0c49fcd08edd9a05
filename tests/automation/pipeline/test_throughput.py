"""The run engine with its real broker: messages written with their transaction, priorities,
a sweep that never doubles queued work, and a worker killed in the middle of a run.

These tests send work through django-q2's ORM broker on PostgreSQL (no inline queue), so the
messages are rows of `django_q_ormq` exactly as the workers see them.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django_q.models import OrmQ
from django_q.signing import SignedPackage

from audit.models import AuditAction, AuditEvent
from automation.intake.services import (
    api_token_create,
    channel_get_or_create,
    intake_submit,
)
from automation.models import (
    ApiToken,
    ClassificationAttempt,
    IntakeChannel,
    IntakeRecord,
    Outcome,
    Run,
    StageRecord,
    State,
    Task,
)
from automation.pipeline.operations import sweep_due
from automation.pipeline.services import run_advance
from automation.recovery.services import run_retry
from automation.runs.sending import ADVANCE_RUN_TASK
from policy.services import (
    DEFAULTS_DIR,
    parse_policy_text,
    policy_version_activate,
    policy_version_create,
)
from tests.conftest import TIMEOUT, Pipeline, decision_for, make_event
from tests.servers import qcluster
from worker.broker import PriorityOrmBroker
from worker.dispatch import batch, enqueue_after_commit, oldest_unspent

pytestmark = pytest.mark.django_db(transaction=True)

REPO = Path(__file__).resolve().parents[3]
STAGES = ["intake", "validate", "normalize", "enrich", "classify", "decide", "execute", "complete"]


def submit(pipeline: Pipeline, event: dict[str, Any]) -> Run:
    """Intake as the API does it: the run and its message commit together (no inline queue)."""
    result = intake_submit(
        channel=pipeline.channel,
        raw=json.dumps(event).encode(),
        content_type="application/json",
        source="test",
    )
    assert result.run is not None
    return result.run


def queued() -> list[tuple[str, str, tuple[Any, ...]]]:
    """The waiting messages, oldest first: (queue, task, args)."""
    rows = OrmQ.objects.order_by("id").values_list("key", "payload")
    return [
        (key, task["func"], task["args"])
        for key, task in ((key, SignedPackage.loads(payload)) for key, payload in rows)
    ]


def test_intake_writes_the_run_and_its_message_in_one_transaction(pipeline: Pipeline) -> None:
    run = submit(pipeline, make_event(event_id="evt-tx"))

    assert queued() == [("gatehouse", ADVANCE_RUN_TASK, (run.pk,))]
    run.refresh_from_db()
    assert run.dispatched_at is not None  # a message is out for it


def api_key(pipeline: Pipeline) -> str:
    name = f"t-{ApiToken.objects.count()}"
    return api_token_create(name=name, channel=pipeline.channel)[1]


def api_post(client: Client, pipeline: Pipeline, event: dict[str, Any], key: str = "") -> Any:
    return client.post(
        "/api/v1/events",
        data=json.dumps(event).encode(),
        content_type="application/json",
        headers={"authorization": f"Bearer {key or api_key(pipeline)}"},
    )


def assert_received(run_id: int, event: dict[str, Any]) -> None:
    """The run of an accepted event at `received`, with its raw record, its intake stage, its
    audit row and its first message."""
    run = Run.objects.select_related("intake").get(pk=run_id)
    raw = json.dumps(event).encode()
    assert bytes(run.intake.raw) == raw
    assert run.intake.raw_sha256 == hashlib.sha256(raw).hexdigest()
    assert run.claims_identity and run.state == State.RECEIVED and run.dispatched_at
    assert run.fingerprint and run.normalized["event_id"] == event["event_id"]
    assert list(run.stages.values_list("stage", "outcome")) == [("intake", "accepted")]
    audit = AuditEvent.objects.get(run=run)
    assert (audit.action, audit.intake_id) == (AuditAction.RUN_RECEIVED, run.intake_id)
    assert audit.data["fingerprint"] == run.fingerprint
    assert queued()[-1] == ("gatehouse", ADVANCE_RUN_TASK, (run.pk,))


def insert_columns(sql: str) -> tuple[str, list[str]]:
    """The table and the columns an INSERT statement names."""
    head = sql.split(" VALUES", 1)[0].split(" SELECT", 1)[0]
    table, _, columns = head.removeprefix("INSERT INTO ").partition(" (")
    return table.strip('"'), [c.strip().strip('"') for c in columns.rstrip(")").split(",")]


# The tables an accepted event writes, one row each.
RECEIVED_MODELS = (IntakeRecord, Run, StageRecord, AuditEvent, OrmQ)


def test_an_accepted_api_event_is_one_transaction_of_orm_inserts(
    pipeline: Pipeline, client: Client
) -> None:
    key = api_key(pipeline)
    api_post(client, pipeline, make_event(event_id="evt-first"), key)  # reads the policy, once
    event = make_event(event_id="evt-two")
    with CaptureQueriesContext(connection) as queries:
        response = api_post(client, pipeline, event, key)

    assert response.status_code == 202, response.content
    statements = [q["sql"] for q in queries.captured_queries]
    inserts = [sql for sql in statements if sql.startswith("INSERT")]
    # One INSERT per table, the message among them: they commit together, once.
    assert sorted(insert_columns(sql)[0] for sql in inserts) == sorted(
        m._meta.db_table for m in RECEIVED_MODELS
    )
    assert statements.count("COMMIT") == 1
    # Read first: the token with its channel, and the policy version deciding for it (once).
    reads = [sql for sql in statements if sql.startswith("SELECT")]
    assert len(reads) == 2 and "automation_apitoken" in reads[0], reads
    assert_received(response.json()["run"]["id"], event)


def test_no_database_function_writes_an_accepted_event() -> None:
    """The receive function is dropped (automation 0044): the ORM is the one writer, and no
    column of the tables it writes is left to a database default."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regproc('gatehouse_receive_event')")
        assert cursor.fetchone()[0] is None
        cursor.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_name = ANY(%s) AND column_default IS NOT NULL "
            "AND column_default NOT LIKE 'nextval(%%' AND is_identity = 'NO'",
            [[m._meta.db_table for m in RECEIVED_MODELS]],
        )
        assert cursor.fetchall() == []


def test_the_orms_way_is_one_insert_per_table_naming_the_columns_django_writes(
    pipeline: Pipeline,
) -> None:
    submit(pipeline, make_event(event_id="evt-first"))  # reads the policy, once
    event = make_event(event_id="evt-two")
    with CaptureQueriesContext(connection) as queries:
        run = submit(pipeline, event)
    inserts = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("INSERT")]
    written = dict(insert_columns(sql) for sql in inserts)
    # One INSERT per table, each naming exactly the columns Django writes for its model:
    # every concrete column but generated ones.
    models = RECEIVED_MODELS
    assert sorted(written) == sorted(m._meta.db_table for m in models)
    assert len(inserts) == len(models)
    for model in models:
        columns = [
            f.column
            for f in model._meta.local_concrete_fields
            if not f.generated and not (f.primary_key and f.db_returning)
        ]
        assert written[model._meta.db_table] == columns, model

    assert_received(run.pk, event)


def test_the_same_event_again_is_answered_as_a_duplicate_with_nothing_sent(
    pipeline: Pipeline, client: Client
) -> None:
    first = api_post(client, pipeline, make_event(event_id="evt-again"))
    again = api_post(client, pipeline, make_event(event_id="evt-again"))
    changed = api_post(client, pipeline, make_event(event_id="evt-again", subject="Other"))

    assert [first.status_code, again.status_code, changed.status_code] == [202, 200, 409]
    run_id = first.json()["run"]["id"]
    assert again.json()["run"]["id"] == changed.json()["run"]["id"] == run_id
    assert Run.objects.count() == 1
    assert IntakeRecord.objects.count() == 3  # every request is kept, whatever its answer
    assert queued() == [("gatehouse", ADVANCE_RUN_TASK, (run_id,))]


@pytest.mark.parametrize("pinned_allows", [True, False])
def test_a_channel_pinned_to_a_policy_version_is_decided_by_it(
    pipeline: Pipeline, client: Client, pinned_allows: bool
) -> None:
    document = yaml.safe_load((DEFAULTS_DIR / "policy-1.yaml").read_text())
    effects = document["allowed_effects"]
    others = [effect for effect in effects if effect != "create_follow_up"]
    # The active version and the pinned one disagree about create_follow_up.
    for name, allowed in (("pin-active", not pinned_allows), ("pin-pinned", pinned_allows)):
        changed = {**document, "version": name, "allowed_effects": effects if allowed else others}
        policy_version_create(document=parse_policy_text(yaml.safe_dump(changed)))
    policy_version_activate(name="pin-active")
    IntakeChannel.objects.filter(pk=pipeline.channel.pk).update(policy_version="pin-pinned")

    response = api_post(client, pipeline, make_event(event_id="evt-pinned"))

    assert response.status_code == (202 if pinned_allows else 422), response.content
    assert bool(queued()) is pinned_allows


def test_the_sweep_does_not_re_enqueue_queued_work(pipeline: Pipeline) -> None:
    runs = [submit(pipeline, make_event(event_id=f"evt-backlog-{n}")) for n in range(3)]
    waiting = queued()
    # Much later, the backlog still waits: a worker has not reached these messages yet.
    later = timezone.now() + timedelta(minutes=30)
    Run.objects.filter(pk__in=[r.pk for r in runs]).update(updated_at=later - timedelta(hours=1))

    assert sweep_due(now=later)["runs"] == 0
    assert queued() == waiting
    # A worker has taken them and not acknowledged them yet (they wait in its cluster, or it
    # runs them): in a worker's hands is not lost either.
    assert len(PriorityOrmBroker().dequeue() or []) == 3
    assert sweep_due(now=later)["runs"] == 0
    assert queued() == waiting

    # The messages are lost (a broker without acknowledgements, a worker that died): the
    # sweep sends exactly one new message per run.
    OrmQ.objects.all().delete()
    assert oldest_unspent() is None
    assert sweep_due(now=later)["runs"] == 3
    assert sorted(args for _, _, args in queued()) == [(r.pk,) for r in runs]
    # ...and does not send them again while those wait.
    assert sweep_due(now=later + timedelta(minutes=1))["runs"] == 0
    assert len(queued()) == 3


def test_a_persons_retry_overtakes_a_backlog_of_5000_runs(
    pipeline: Pipeline, recoverer: User
) -> None:
    event = make_event(event_id="evt-held")
    pipeline.submit(event, [TIMEOUT, TIMEOUT])  # inline: out of classifier attempts
    held = Run.objects.get(event_id="evt-held")
    assert (held.state, held.outcome) == (State.NEEDS_REVIEW, Outcome.RETRY_EXHAUSTED)
    # A backlog of 5,000 runs waits in the live queue (a bulk replay would wait behind it).
    backlog = Run.objects.bulk_create(
        Run(
            channel=pipeline.channel,
            intake=held.intake,
            event_id=f"evt-bulk-{n}",
            workflow_version="workflow-1",
            classifier_version="recorded-classifier-1",
            prompt_version="prompt-1",
        )
        for n in range(5000)
    )
    with batch():
        for run in backlog:
            enqueue_after_commit(ADVANCE_RUN_TASK, run.pk)
    assert OrmQ.objects.count() == 5000

    run_retry(run_id=held.pk, user=recoverer, reason="classifier back")

    taken = PriorityOrmBroker().dequeue()
    assert taken is not None
    first = SignedPackage.loads(taken[0][1])
    assert (first["func"], first["args"]) == (ADVANCE_RUN_TASK, (held.pk,))
    assert len(taken) == settings.Q_CLUSTER["bulk"]  # the rest of the batch is backlog


# --- a worker killed in the middle of a run -------------------------------------------------


def run_cluster_until_completed(run: Run, marker: Path) -> None:
    """One qcluster worker, which SIGKILLs itself once at the classifier call, until the run
    completes (or 60 s pass)."""
    cluster = qcluster(
        FAULT_KILL_ONCE=str(marker),
        Q_WORKERS="1",
        Q_TIMEOUT="3",
        Q_RETRY="4",  # the unacknowledged message comes back after this
        STAGE_LEASE="2",  # the dead worker's classifier lease runs out
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if Run.objects.filter(pk=run.pk, state=State.COMPLETED).exists():
                break
            time.sleep(0.2)
    finally:
        os.killpg(cluster.pid, signal.SIGKILL)  # the test is about the run, not shutdown
        cluster.wait(timeout=30)


def test_a_worker_killed_mid_run_loses_no_step_and_repeats_no_effect(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    event = make_event(event_id="evt-killed")
    pipeline.record("evt-killed", [decision_for(event)] * 2)
    marker = tmp_path / "kill-once"
    marker.touch()
    run = submit(pipeline, event)

    run_cluster_until_completed(run, marker)

    assert not marker.exists()  # a worker did die in the classifier call
    run.refresh_from_db()
    assert (run.state, run.outcome) == (State.COMPLETED, Outcome.COMPLETED)
    assert run.classify_attempts == 2  # the dead worker's attempt counts, and shows as such
    assert ClassificationAttempt.objects.filter(run=run).count() == 1
    stages = Counter(StageRecord.objects.filter(run=run).values_list("stage", flat=True))
    assert stages == Counter(STAGES)  # nothing lost, nothing twice
    assert Task.objects.filter(run=run).count() == 1


def test_a_local_classifier_reads_inside_the_run_transaction(policy: None, tmp_path: Path) -> None:
    """The heuristic needs no lease: a straight-through run is one transaction in its worker,
    and a worker killed in the reading takes the whole carry with it, to be done once again."""
    channel = channel_get_or_create(name="local", classifier="heuristic")
    local = Pipeline(channel)
    with CaptureQueriesContext(connection) as queries:
        read = submit(local, make_event(event_id="evt-local"))
        intake_commits = sum(q["sql"] == "COMMIT" for q in queries.captured_queries)
        assert run_advance(run_id=read.pk) == State.COMPLETED
    worker_commits = sum(q["sql"] == "COMMIT" for q in queries.captured_queries) - intake_commits
    assert worker_commits == 1
    read.refresh_from_db()
    assert read.lease_expires_at is None and read.classify_attempts == 1

    marker = tmp_path / "kill-once"
    marker.touch()
    run = submit(local, make_event(event_id="evt-local-killed"))
    run_cluster_until_completed(run, marker)

    assert not marker.exists()  # a worker did die in the reading
    run.refresh_from_db()
    assert (run.state, run.outcome) == (State.COMPLETED, Outcome.COMPLETED)
    assert run.classify_attempts == 1  # the killed transaction took its attempt with it
    assert ClassificationAttempt.objects.filter(run=run).count() == 1
    stages = Counter(StageRecord.objects.filter(run=run).values_list("stage", flat=True))
    assert stages == Counter(STAGES)
    assert Task.objects.filter(run=run).count() == 1
