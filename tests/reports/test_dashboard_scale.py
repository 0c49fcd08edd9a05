"""With 100,000 runs the dashboard still costs a fixed handful of queries, and /metrics answers.

Two thousand runs in every state are written with bulk_create, then copied fifty times over
sixteen weeks by INSERT ... SELECT (binding 100,000 rows of parameters in Python would take
most of a minute). Stage records, approvals, recovery actions and audit rows are derived from
the runs the same way, and two policy activations go through the real service.
"""

# The SQL below is assembled from this module's own names and numbers, never from input.
# ruff: noqa: S608

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.contrib.auth.models import Group, User
from django.db import connection
from django.test import Client
from django.urls import reverse

from accounts.roles import roles_ensure
from approvals.models import ApprovalRequest
from audit.models import AuditEvent
from automation.models import (
    IntakeChannel,
    IntakeRecord,
    RecoveryAction,
    Run,
    StageRecord,
    State,
)
from policy.services import (
    parse_policy_text,
    policy_ensure_defaults,
    policy_version_activate,
    policy_version_create,
)
from tests.reports.history import policy_text

pytestmark = pytest.mark.django_db(transaction=True)

RUNS = 100_000
TEMPLATE = 2_000
NOW = datetime(2026, 3, 4, 12, 0, tzinfo=UTC)
SPAN = timedelta(weeks=16)
ROUTES = ["service_desk", "finance", "commercial", "security_review"]
# (state, outcome) by run number modulo 20: 14 completed, 2 blocked, 2 held, 1 waiting, 1 failed.
STATES = (
    [(State.COMPLETED, "completed")] * 14
    + [(State.BLOCKED, "policy_block")] * 2
    + [(State.NEEDS_REVIEW, "low_confidence"), (State.NEEDS_REVIEW, "effect_unavailable")]
    + [(State.APPROVAL_REQUIRED, ""), (State.FAILED, "approval_rejected")]
)
# Session, user, permissions and the navigation (7: the inbox's count and the unread
# notifications'), the report's transaction and its work_mem (3), the five panels (11).
QUERY_BOUND = 21
# Session, user, permissions (4), the report's transaction and its work_mem (3: BEGIN,
# set_config, COMMIT), the panel's (at most 4).
CSV_QUERY_BOUND = 11


def sql(statement: str, params: Any = None) -> None:
    """Run SQL this module writes itself (table and column names, numbers: no input)."""
    with connection.cursor() as cursor:
        cursor.execute(statement, params)


def insert_runs() -> None:
    channel = IntakeChannel.objects.create(
        name="scale", workflow_version="workflow-1", prompt_version="prompt-1"
    )
    intake = IntakeRecord.objects.create(channel=channel, raw=b"{}", content_type="x", source="t")
    Run.objects.bulk_create(
        Run(
            channel=channel,
            intake=intake,
            event_id=f"evt-{i}",
            state=STATES[i % 20][0],
            outcome=STATES[i % 20][1],
            route=ROUTES[i % 4],
            workflow_version="workflow-1",
            classifier_version="recorded-classifier-1",
            prompt_version="prompt-1",
            policy_version="policy-1",
        )
        for i in range(TEMPLATE)
    )
    # Copy n of template run k is run number n * TEMPLATE + k, received SPAN * number / RUNS
    # before NOW; copy 0 is the template itself.
    columns = [f.column for f in Run._meta.concrete_fields if not f.primary_key]
    number = f"(g * {TEMPLATE} + r.id - m.first)"
    values = {
        "event_id": f"'evt-' || {number}",
        "created_at": f"%(now)s::timestamptz - %(span)s::interval * {number} / {RUNS}",
    }
    sql(
        f"INSERT INTO automation_run ({', '.join(columns)}) "
        f"SELECT {', '.join(values.get(c, f'r.{c}') for c in columns)} "
        "FROM automation_run r, (SELECT min(id) AS first FROM automation_run) m, "
        f"generate_series(1, {RUNS // TEMPLATE - 1}) g",
        {"now": NOW, "span": SPAN},
    )
    sql(
        f"UPDATE automation_run r SET created_at = %(now)s::timestamptz - %(span)s::interval * "
        f"(r.id - m.first) / {RUNS} FROM (SELECT min(id) AS first FROM automation_run) m "
        f"WHERE r.id < m.first + {TEMPLATE}",
        {"now": NOW, "span": SPAN},
    )


def insert_history(lead: User) -> None:
    """Two stage records per run, approvals, corrections and audit rows, all in SQL."""
    held = "CASE WHEN r.outcome = 'low_confidence' THEN 'low_confidence' ELSE 'ok' END"
    for stage, duration, outcome in (
        ("classify", "40 + mod(r.id, 300)", "'ok'"),
        ("decide", "5 + mod(r.id, 7)", held),
    ):
        sql(
            "INSERT INTO automation_stagerecord (run_id, stage, attempt, started_at, finished_at,"
            " duration_ms, outcome, error_class) "
            f"SELECT r.id, '{stage}', 1, r.created_at, r.created_at, {duration}, {outcome}, '' "
            "FROM automation_run r"
        )
    sql(
        "INSERT INTO approvals_approvalrequest (run_id, effect, effect_payload, fingerprint, "
        'workflow_version, policy_version, evidence, "group", required_approvals, status, '
        "status_reason, expires_at, escalate_at, escalate_to, created_at, decided_at) "
        "SELECT r.id, 'queue_account_review', '{}', '', 'workflow-1', 'policy-1', '{}', "
        "'security-approvers', 1, s.status, '', r.created_at + interval '3 days', "
        "r.created_at + interval '1 day', '', r.created_at, CASE WHEN s.status <> 'pending' "
        "THEN r.created_at + mod(r.id, 13) * interval '1 hour' END FROM automation_run r, LATERAL "
        "(SELECT CASE WHEN r.state = 'approval_required' THEN 'pending' WHEN r.state = 'failed' "
        "THEN 'rejected' ELSE 'approved' END AS status) s "
        "WHERE r.state IN ('approval_required', 'failed') OR (r.state = 'completed' AND "
        "mod(r.id, 7) = 0)"
    )
    sql(
        "INSERT INTO automation_recoveryaction (run_id, action, actor_id, reason, result, data, "
        "created_at) SELECT r.id, 'correct', %s, '', 'resumed', '{}', r.created_at "
        "FROM automation_run r WHERE mod(r.id, 97) = 0",
        [lead.pk],
    )
    # The effect retries below, recorded as the product records them.
    sql(
        "INSERT INTO automation_recoveryaction (run_id, action, actor_id, reason, result, data, "
        "created_at) SELECT r.id, 'retry', %s, '', 'executing', '{}', r.created_at "
        "FROM automation_run r WHERE mod(r.id, 89) = 0",
        [lead.pk],
    )
    sql(
        "INSERT INTO audit_auditevent (run_id, actor_id, actor_label, action, from_state, "
        "to_state, data, created_at) SELECT r.id, CASE WHEN mod(r.id, 89) = 0 THEN %s END, "
        "'system', CASE WHEN mod(r.id, 89) = 0 THEN 'run.retry_effect' ELSE 'run.complete' END, "
        "'executing', r.state, '{}', r.created_at FROM automation_run r",
        [lead.pk],
    )


def activate_policies() -> None:
    for weeks, version in ((9, "policy-2"), (3, "policy-3")):
        with time_machine.travel(NOW - timedelta(weeks=weeks), tick=False):
            policy_version_create(document=parse_policy_text(policy_text(version, 0.5)))
            policy_version_activate(name=version)


@pytest.fixture
def lead() -> User:
    policy_ensure_defaults()
    roles_ensure()
    user = User.objects.create_user(username="lena")
    user.groups.add(Group.objects.get(name="ops-leads"))
    return user


def test_a_hundred_thousand_runs_render_with_a_bounded_number_of_queries(
    lead: User, django_assert_max_num_queries: Any, settings: Any
) -> None:
    started = time.monotonic()
    insert_runs()
    insert_history(lead)
    activate_policies()
    sql("ANALYZE")
    inserted = time.monotonic() - started
    assert Run.objects.count() == RUNS
    assert StageRecord.objects.count() == 2 * RUNS
    assert ApprovalRequest.objects.count() > 10_000
    assert RecoveryAction.objects.exists() and AuditEvent.objects.count() > RUNS

    client = Client()
    client.force_login(lead)
    with time_machine.travel(NOW, tick=False):
        started = time.monotonic()
        with django_assert_max_num_queries(QUERY_BOUND):
            response = client.get(reverse("reports:dashboard") + "?period=90d")
        rendered = time.monotonic() - started
        assert response.status_code == 200
        page = response.content.decode()
        assert page.count('<svg class="chart" role="img"') == 6
        assert "policy-2" in page and "policy-3" in page
        for panel in ("straight-through", "handoffs", "rule-changes", "stage-durations"):
            with django_assert_max_num_queries(CSV_QUERY_BOUND):
                assert client.get(f"/reports/{panel}.csv?period=90d").status_code == 200

    settings.GATEHOUSE = {**settings.GATEHOUSE, "METRICS_TOKEN": "t"}
    metrics = Client().get(reverse("metrics"), headers={"Authorization": "Bearer t"})
    assert metrics.status_code == 200
    print(f"\n100,000 runs: written in {inserted:.1f} s, dashboard rendered in {rendered:.2f} s")
