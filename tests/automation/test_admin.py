"""The operators' admin pages render for every kind of run and never offer edits."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from approvals.models import ApprovalRequest
from automation.models import AuditEvent, Effect, IntakeRecord, Run
from tests.conftest import TIMEOUT, Pipeline, decision_for, make_event


@pytest.fixture
def admin_client_for_runs(pipeline: Pipeline) -> Client:
    completed = make_event(event_id="evt-a1")
    pipeline.submit(completed, [TIMEOUT, decision_for(completed)])
    review = make_event(
        event_id="evt-a2", request_type="security", requested_action="queue_account_review"
    )
    pipeline.submit(review, [decision_for(review)])
    pipeline.submit(make_event(event_id="evt-a3", source="fax"))
    user = User.objects.create_superuser("root", "root@example.com", "pw-root-12345")
    client = Client()
    client.force_login(user)
    return client


def test_run_list_and_every_run_page_render(admin_client_for_runs: Client) -> None:
    listing = admin_client_for_runs.get(reverse("admin:automation_run_changelist"))
    assert listing.status_code == 200
    for run in Run.objects.all():
        page = admin_client_for_runs.get(reverse("admin:automation_run_change", args=[run.pk]))
        assert page.status_code == 200, run
        assert run.state.encode() in page.content
        assert b"Stage timings" in page.content


@pytest.mark.parametrize(
    "model", [Effect, AuditEvent, IntakeRecord, ApprovalRequest], ids=lambda m: m.__name__
)
def test_machine_made_rows_render_read_only(admin_client_for_runs: Client, model: type) -> None:
    meta = model._meta
    row = model.objects.first()
    url = reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[row.pk])
    page = admin_client_for_runs.get(url)
    assert page.status_code == 200
    assert b'name="_save"' not in page.content
    add = reverse(f"admin:{meta.app_label}_{meta.model_name}_add")
    assert admin_client_for_runs.get(add).status_code == 403
