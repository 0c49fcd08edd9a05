"""/metrics: the Prometheus exposition read from the database, and who may read it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from accounts.roles import roles_ensure
from approvals.models import ApprovalRequest, ApprovalStatus
from automation.classifiers.models import ModelServer
from automation.effects.services import effect_pause
from automation.models import (
    Effect,
    EffectAttempt,
    EffectStatus,
    IntakeChannel,
    IntakeRecord,
    Outcome,
    Run,
    State,
)
from reports.metrics import REGISTRY
from tests.conftest import TIMEOUT, Pipeline, decision_for, make_event
from tests.mailboxes import make_mailbox

T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
TOKEN = "scrape-token-0123456789abcdef"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape() -> Samples:
    """Every sample of the exposition, keyed by (sample name, sorted labels)."""
    text = generate_latest(REGISTRY).decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def named(samples: Samples, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {labels: value for (sample, labels), value in samples.items() if sample == name}


@pytest.fixture
def token(settings: Any) -> str:
    settings.GATEHOUSE = {**settings.GATEHOUSE, "METRICS_TOKEN": TOKEN}
    return TOKEN


# --- the values --------------------------------------------------------------------------


@pytest.fixture
def known_state(pipeline: Pipeline, ops_lead: User) -> None:
    """Five runs, two held, one pending approval, one delivered effect, one paused effect."""
    roles_ensure()
    with time_machine.travel(T0, tick=False):
        security = make_event(
            event_id="evt-sec", request_type="security", requested_action="queue_account_review"
        )
        pipeline.submit(security, [decision_for(security, reason_code="security_sensitive")])
    with time_machine.travel(T0 + timedelta(minutes=10), tick=False):
        pipeline.submit(make_event(event_id="evt-held"), [TIMEOUT, TIMEOUT])
    with time_machine.travel(T0 + timedelta(minutes=40), tick=False):
        bad = make_event(event_id="evt-bad")
        pipeline.submit(bad, [decision_for(bad, requested_effect="delete_record")])
        done = make_event(event_id="evt-done")
        pipeline.submit(done, [decision_for(done)])
        pipeline.submit({"event_id": "evt-invalid"})
        effect_pause(name="send_internal_notification", user=ops_lead)
    delivered = Effect.objects.get(run__event_id="evt-done")
    # Attempt rows of a remote delivery's history, as effect_deliver writes them.
    for attempt, outcome in enumerate(["retry", "retry", "lost", "rejected"], start=2):
        EffectAttempt.objects.create(
            effect=delivered, attempt=attempt, started_at=T0, duration_ms=5, outcome=outcome
        )
    waiting = Run.objects.get(event_id="evt-held")
    Effect.objects.create(
        run=waiting,
        name="send_internal_notification",
        idempotency_key="k" * 64,
        payload={},
        authorization={},
        status=EffectStatus.RETRY_WAIT,
    )


@pytest.mark.usefixtures("known_state")
def test_runs_are_counted_by_state_and_outcome() -> None:
    with time_machine.travel(T0 + timedelta(hours=1), tick=False):
        samples = scrape()

    assert named(samples, "gatehouse_runs") == {
        (("outcome", "none"), ("state", "approval_required")): 1,
        (("outcome", "retry_exhausted"), ("state", "needs_review")): 1,
        (("outcome", "classification_invalid"), ("state", "needs_review")): 1,
        (("outcome", "completed"), ("state", "completed")): 1,
        (("outcome", "invalid_event"), ("state", "failed")): 1,
    }


@pytest.mark.usefixtures("known_state")
def test_queues_report_their_depth_and_age_with_empty_ones_at_zero() -> None:
    with time_machine.travel(T0 + timedelta(hours=1), tick=False):
        samples = scrape()

    depth = named(samples, "gatehouse_queue_depth")
    age = named(samples, "gatehouse_queue_oldest_age_seconds")
    assert depth[(("queue", "retry_exhausted"),)] == 1
    assert depth[(("queue", "classification_invalid"),)] == 1
    assert age[(("queue", "retry_exhausted"),)] == 50 * 60
    assert age[(("queue", "classification_invalid"),)] == 20 * 60
    empty = {labels for labels, value in depth.items() if value == 0}
    assert {dict(labels)["queue"] for labels in empty} == {
        "extraction_invalid",
        "low_confidence",
        "risk_signal",
        "approval_expired",
        "effect_unavailable",
        "effect_uncertain",
        "effect_rejected",
    }
    assert all(age[labels] == 0 for labels in empty)


@pytest.mark.usefixtures("known_state")
def test_the_oldest_held_run_and_pending_approval_report_their_age() -> None:
    with time_machine.travel(T0 + timedelta(hours=1), tick=False):
        samples = scrape()

    assert samples[("gatehouse_oldest_held_run_age_seconds", ())] == 50 * 60
    assert samples[("gatehouse_oldest_pending_approval_age_seconds", ())] == 60 * 60
    assert named(samples, "gatehouse_approvals_pending") == {(("group", "security-approvers"),): 1}


@pytest.mark.usefixtures("known_state")
def test_effect_deliveries_are_counted_by_result_and_the_outbox_by_status() -> None:
    samples = scrape()

    assert named(samples, "gatehouse_effect_deliveries_total") == {
        (("result", "delivered"),): 1,
        (("result", "retry"),): 2,
        (("result", "lost"),): 1,
        (("result", "rejected"),): 1,
        (("result", "uncertain"),): 0,
        (("result", "not_sent"),): 0,
    }
    assert named(samples, "gatehouse_effect_outbox") == {
        (("effect", "send_internal_notification"), ("status", "retry_wait")): 1
    }
    assert named(samples, "gatehouse_effect_paused") == {
        (("effect", "send_internal_notification"),): 1
    }


@pytest.mark.django_db
def test_an_empty_database_reports_zero_ages_and_no_runs() -> None:
    samples = scrape()

    assert named(samples, "gatehouse_runs") == {}
    assert samples[("gatehouse_oldest_held_run_age_seconds", ())] == 0
    assert samples[("gatehouse_oldest_pending_approval_age_seconds", ())] == 0
    assert set(named(samples, "gatehouse_queue_depth").values()) == {0}


@pytest.mark.django_db
def test_each_mailbox_reports_its_watcher_and_the_days_mail() -> None:
    today = T0.date()
    make_mailbox(
        "support",
        status="idle",
        last_contact_at=T0 - timedelta(seconds=5),
        day=today,
        taken_today=12,
        refused_today=2,
        errors_today=1,
    )
    make_mailbox(
        "billing",
        status="idle",
        last_contact_at=T0 - timedelta(minutes=20),
        day=today - timedelta(days=1),
        taken_today=9,
        refused_today=4,
        errors_today=3,
    )
    make_mailbox("fresh")  # never started

    with time_machine.travel(T0, tick=False):
        samples = scrape()

    def by_mailbox(name: str) -> dict[str, float]:
        return {dict(labels)["mailbox"]: value for labels, value in named(samples, name).items()}

    assert by_mailbox("gatehouse_mailbox_up") == {"support": 1, "billing": 0, "fresh": 0}
    assert by_mailbox("gatehouse_mailbox_last_contact_seconds") == {
        "support": 5,
        "billing": 20 * 60,
        "fresh": -1,
    }
    # The silent one's counts are yesterday's: today it has taken nothing yet.
    assert by_mailbox("gatehouse_mailbox_taken_today") == {"support": 12, "billing": 0, "fresh": 0}
    assert by_mailbox("gatehouse_mailbox_refused_today") == {"support": 2, "billing": 0, "fresh": 0}
    assert by_mailbox("gatehouse_mailbox_errors_today") == {"support": 1, "billing": 0, "fresh": 0}


# --- bounded queries ---------------------------------------------------------------------


def many_runs(channel: IntakeChannel, count: int) -> None:
    """Runs in every state the metrics group by, without going through the pipeline."""
    intake = IntakeRecord.objects.create(
        channel=channel, raw=b"{}", content_type="application/json", source="test"
    )
    shapes = [
        (State.COMPLETED, Outcome.COMPLETED, ""),
        (State.NEEDS_REVIEW, Outcome.LOW_CONFIDENCE, Outcome.LOW_CONFIDENCE),
        (State.NEEDS_REVIEW, Outcome.EFFECT_UNAVAILABLE, Outcome.EFFECT_UNAVAILABLE),
        (State.FAILED, Outcome.EFFECT_REJECTED, Outcome.EFFECT_REJECTED),
        (State.APPROVAL_REQUIRED, "", ""),
        (State.ENRICHED, "", ""),
    ]
    runs = Run.objects.bulk_create(
        Run(
            channel=channel,
            intake=intake,
            event_id=f"evt-{n}",
            state=shapes[n % len(shapes)][0],
            outcome=shapes[n % len(shapes)][1],
            queue=shapes[n % len(shapes)][2],
            queued_at=T0 if shapes[n % len(shapes)][2] else None,
            workflow_version="workflow-1",
            classifier_version="recorded-classifier-1",
            prompt_version="prompt-1",
        )
        for n in range(count)
    )
    effects = Effect.objects.bulk_create(
        Effect(
            run=run,
            name="create_follow_up",
            idempotency_key=f"{run.pk:064d}",
            payload={},
            authorization={},
            status=EffectStatus.DELIVERED if run.state == State.COMPLETED else "pending",
        )
        for run in runs
    )
    EffectAttempt.objects.bulk_create(
        EffectAttempt(effect=effect, attempt=1, started_at=T0, duration_ms=1, outcome="delivered")
        for effect in effects
    )
    ApprovalRequest.objects.bulk_create(
        ApprovalRequest(
            run=run,
            effect="queue_account_review",
            fingerprint="f",
            workflow_version="workflow-1",
            policy_version="policy-1",
            group="security-approvers" if run.pk % 2 else "finance-approvers",
            status=ApprovalStatus.PENDING,
            expires_at=T0,
            escalate_at=T0,
        )
        for run in runs
        if run.state == State.APPROVAL_REQUIRED
    )


def test_a_scrape_takes_a_fixed_number_of_queries_however_many_runs(
    channel: IntakeChannel, django_assert_max_num_queries: Any, token: str
) -> None:
    many_runs(channel, 600)
    # Runs and queues, approvals, effects, the model servers (a row each, and the runs
    # waiting for one when there is one), and the mailboxes (one query for them all).
    ModelServer.objects.create(key="http://127.0.0.1:9/v1")
    for name in ("support", "billing", "alerts"):
        make_mailbox(name, status="idle", last_contact_at=T0, day=T0.date(), taken_today=1)
    with django_assert_max_num_queries(8):
        response = Client().get(reverse("metrics"), headers={"Authorization": f"Bearer {token}"})

    assert response.status_code == 200
    samples = scrape()
    assert sum(named(samples, "gatehouse_runs").values()) == 600
    assert named(samples, "gatehouse_effect_deliveries_total")[(("result", "delivered"),)] == 600
    assert sum(named(samples, "gatehouse_approvals_pending").values()) == 100


# --- access ------------------------------------------------------------------------------


@pytest.fixture
def client_for() -> Iterator[Any]:
    def login(user: User) -> Client:
        roles_ensure()
        client = Client()
        client.force_login(user)
        return client

    yield login


def get(client: Client, authorization: str = "") -> Any:
    headers = {"Authorization": authorization} if authorization else {}
    return client.get(reverse("metrics"), headers=headers)


@pytest.mark.django_db
def test_without_credentials_the_answer_is_401_with_a_bearer_challenge(token: str) -> None:
    response = get(Client())

    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert b"gatehouse_" not in response.content


@pytest.mark.django_db
def test_a_wrong_token_is_refused(token: str) -> None:
    for header in (f"Bearer {token}x", "Bearer wrong", f"Basic {token}", "Bearer "):
        assert get(Client(), header).status_code == 401


@pytest.mark.django_db
def test_the_configured_token_reads_the_metrics(token: str) -> None:
    response = get(Client(), f"Bearer {token}")

    assert response.status_code == 200
    assert response["Content-Type"] == CONTENT_TYPE_LATEST
    assert b"gatehouse_runs" in response.content


@pytest.mark.django_db
def test_with_no_token_configured_no_bearer_header_gets_in(settings: Any) -> None:
    settings.GATEHOUSE = {**settings.GATEHOUSE, "METRICS_TOKEN": ""}

    assert get(Client(), "Bearer ").status_code == 401
    assert get(Client(), "Bearer none").status_code == 401


def test_an_ops_lead_signed_in_reads_the_metrics(client_for: Any, ops_lead: User) -> None:
    response = get(client_for(ops_lead))

    assert response.status_code == 200
    assert b"gatehouse_queue_depth" in response.content


def test_an_approver_signed_in_is_forbidden(client_for: Any, approver: User, token: str) -> None:
    client = client_for(approver)

    assert get(client).status_code == 403
    assert get(client, "Bearer wrong").status_code == 403
    assert get(client, f"Bearer {token}").status_code == 200


def test_only_get_is_answered(token: str, db: None) -> None:
    response = Client().post(reverse("metrics"), headers={"Authorization": f"Bearer {token}"})

    assert response.status_code == 405
