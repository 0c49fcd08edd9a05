"""The page benchmark's bulk history (bench.generate) stays true to the schema and the mix.

The generator writes SQL by hand for speed; these tests run it small into the test database
and read the result back through the product, so a model change it does not follow fails
here rather than in a benchmark nobody runs in CI.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.db.models import Count, Max, Min
from django.test import Client
from django.utils import timezone
from django_fsm import FSMField

from accounts.roles import roles_ensure
from approvals.models import ApprovalDecision, ApprovalRequest
from audit.models import AuditEvent
from automation.intake.services import api_token_create
from automation.models import (
    Checkpoint,
    ClassificationAttempt,
    Effect,
    EffectAttempt,
    IntakeChannel,
    IntakeRecord,
    Run,
    StageRecord,
    State,
    Task,
)
from automation.schemas import ClassifierDecision, IntakeEvent
from bench.generate import QUEUES, generate, mix
from bench.pages import Figures, summary, table
from policy.models import PolicyVersion

RUNS = 300
STATES = {
    "completed": ("completed", "completed"),
    "approval": ("approval_required", ""),
    "blocked": ("blocked", "policy_block"),
    "rejected": ("failed", "approval_rejected"),
    **{queue: ("needs_review", queue) for queue in QUEUES},
}

# The tables the generator fills besides runs.
RECORDS = (
    IntakeRecord,
    StageRecord,
    Checkpoint,
    ClassificationAttempt,
    Effect,
    EffectAttempt,
    Task,
    ApprovalRequest,
    ApprovalDecision,
    AuditEvent,
)


@pytest.fixture
def history(channel: IntakeChannel, approver: User, ops_lead: User) -> int:
    roles_ensure()
    policy = PolicyVersion.objects.get(is_active=True)
    with connection.cursor() as cursor:
        generate(
            cursor,
            runs=RUNS,
            channel_id=channel.pk,
            approver_id=approver.pk,
            policy_version=policy.name,
            now=timezone.now(),
        )
    return RUNS


def test_the_history_has_the_mix(history: int) -> None:
    expected = mix(history)
    # 85 of every 100 completed, less the last run, which waits for approval.
    assert expected["completed"] == 254 and expected["approval"] == 4
    for kind, (state, outcome) in STATES.items():
        runs = Run.objects.filter(state=state, outcome=outcome)
        assert runs.count() == expected[kind], kind
    for queue in QUEUES:
        held = Run.objects.filter(queue=queue, state="needs_review", queued_at__isnull=False)
        assert held.count() == expected[queue] == 3, queue
    pending = ApprovalRequest.objects.filter(
        status="pending", group="security-approvers", run__state="approval_required"
    )
    assert pending.count() == expected["approval"]
    assert Run.objects.count() == history


def test_every_run_has_its_records(history: int) -> None:
    completed = Run.objects.filter(state="completed").annotate(n=Count("stages", distinct=True))
    assert set(completed.values_list("n", flat=True)) == {8}
    per_run = Run.objects.annotate(
        n_stages=Count("stages", distinct=True),
        n_checkpoints=Count("checkpoints", distinct=True),
        n_trail=Count("audit_events", distinct=True),
    )
    assert not per_run.filter(n_stages__lt=5).exists()
    assert not per_run.filter(n_checkpoints__lt=1).exists()
    assert not per_run.filter(n_trail__lt=2).exists()
    delivered = Effect.objects.filter(status="delivered", run__state="completed")
    assert delivered.count() == completed.count()
    decided = ApprovalRequest.objects.exclude(status="pending")
    assert ApprovalDecision.objects.filter(request__in=decided).count() == decided.count()
    assert AuditEvent.objects.filter(action="run.received", intake__isnull=False).count() == (
        history
    )


def test_the_stored_values_are_what_the_pipeline_writes(history: int) -> None:
    for model in RECORDS:
        rows = model.objects.all()
        assert rows.exists(), model
        # A protected FSM field refuses being set, which full_clean does: its value is
        # checked against its choices instead.
        moved = [
            field for field in model._meta.fields if isinstance(field, FSMField) and field.protected
        ]
        for row in rows:
            # Every value fits its field: lengths, choices, JSON (the constraints are the
            # database's own and held it already).
            row.full_clean(
                exclude=[field.name for field in moved],
                validate_unique=False,
                validate_constraints=False,
            )
            for field in moved:
                assert getattr(row, field.name) in dict(field.choices), (model, field.name)
    for run in Run.objects.select_related("intake"):
        # The FSM field refuses being set, which full_clean does: its value is checked here.
        run.full_clean(exclude=["state"], validate_unique=False, validate_constraints=False)
        assert run.state in State.values
        event = IntakeEvent.model_validate(json.loads(run.intake.text))
        assert event.normalized() == run.normalized
        if run.classification is not None:
            ClassifierDecision.model_validate(run.classification)
    span = Run.objects.aggregate(first=Min("created_at"), last=Max("created_at"))
    assert span["last"] - span["first"] > timedelta(days=200)
    assert span["last"] < timezone.now()


def test_the_pages_answer_on_the_history(
    history: int, channel: IntakeChannel, approver: User, ops_lead: User
) -> None:
    admin = User.objects.create_superuser("bench-admin")
    oldest, newest = (Run.objects.order_by(o).first() for o in ("pk", "-pk"))
    assert oldest is not None and newest is not None
    held = Run.objects.filter(queue="low_confidence").first()
    assert held is not None
    _, key = api_token_create(name="bench", channel=channel)
    pages = [
        (approver, "/approvals/", None),
        (ops_lead, "/ops/queues/", None),
        (ops_lead, "/ops/queues/low_confidence/", held.event_id),
        (ops_lead, f"/runs/{oldest.pk}/", oldest.event_id),
        (ops_lead, f"/runs/{newest.pk}/", newest.event_id),
        (admin, "/admin/automation/run/", None),
        (admin, f"/admin/automation/run/?q={held.event_id}", held.event_id),
        (ops_lead, "/reports/", None),
    ]
    for user, path, shown in pages:
        client = Client()
        client.force_login(user)
        response = client.get(path)
        assert response.status_code == 200, path
        if shown is not None:
            assert shown in response.content.decode(), path
    api = Client().get(f"/api/v1/runs/{newest.pk}", headers={"Authorization": f"Bearer {key}"})
    assert api.status_code == 200
    assert api.json()["state"] == newest.state


def test_the_summary_gives_each_page_as_a_ratio_to_the_trivial_page() -> None:
    trivial = Figures(times_ms=[2.0] * 19 + [4.0])  # p95: the 19th of 20, 2.0
    page = Figures(times_ms=[10.0] * 18 + [30.0, 50.0], queries=7, sql_ms=3.5)

    result = summary(1000, trivial, {"inbox": page})

    assert result["trivial_p95_ms"] == 2.0
    assert result["pages"]["inbox"]["p95_ms"] == 30.0
    assert result["pages"]["inbox"]["x_trivial"] == 15.0
    assert result["pages"]["inbox"]["sql_ms"] == 3.5
    assert result["load_1min"] >= 0
    assert "15.0" in table(trivial, {"inbox": page})
