"""The operators' admin pages render for every kind of run and never offer edits."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from django.urls import reverse

from approvals.models import ApprovalRequest
from automation.models import AuditEvent, Effect, IntakeChannel, IntakeRecord, Run
from automation.roles import roles_ensure
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


def test_a_channels_name_and_mail_identity_cannot_be_changed(
    admin_client_for_runs: Client, channel: IntakeChannel
) -> None:
    # Both make up the identity scope of its runs: a request sent again after a rename would
    # no longer meet its first run, nor its effect key.
    url = reverse("admin:automation_intakechannel_change", args=[channel.pk])
    page = admin_client_for_runs.get(url)
    form = {"classifier": "heuristic", "workflow_version": "workflow-1"}
    form |= {"prompt_version": "prompt-1", "classifier_version": "heuristic-1"}
    form |= {"max_classifier_attempts": "2", "policy_version": ""}

    response = admin_client_for_runs.post(
        url, {**form, "name": "renamed", "shares_mail_identity": ""}
    )

    assert b'name="name"' not in page.content
    assert b'name="shares_mail_identity"' not in page.content
    assert response.status_code == 302
    channel.refresh_from_db()
    assert (channel.name, channel.shares_mail_identity) == ("test", True)
    assert channel.classifier == "heuristic"  # the rest of the form was taken


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


def _staff_client(username: str, *groups: str) -> Client:
    roles_ensure()
    user = User.objects.create_user(username, password="pw-" + username, is_staff=True)
    user.groups.add(*[Group.objects.get(name=name) for name in groups])
    client = Client()
    client.force_login(user)
    return client


def test_decide_again_is_offered_only_where_allowed_and_runs_the_service(
    pipeline: Pipeline,
) -> None:
    review = make_event(
        event_id="evt-op", request_type="security", requested_action="queue_account_review"
    )
    run = pipeline.run(pipeline.submit(review, [decision_for(review)]))
    done = make_event(event_id="evt-done")
    finished = pipeline.run(pipeline.submit(done, [decision_for(done)]))
    staff = _staff_client("sam", "recovery-staff")
    auditor = _staff_client("aud", "auditors")
    change = "admin:automation_run_change"

    assert b"Decide again" in staff.get(reverse(change, args=[run.pk])).content
    assert b"Decide again" not in staff.get(reverse(change, args=[finished.pk])).content
    assert b"Decide again" not in auditor.get(reverse(change, args=[run.pk])).content

    operation = reverse("admin:automation_run_operation", args=[run.pk, "reconsider"])
    with pipeline.capture():
        staff.post(operation, {"reason": "policy changed"})
    pipeline.drain()
    request = ApprovalRequest.objects.get(run=run, status="stale")
    assert request.status_reason == "approval_stale"
    assert ApprovalRequest.objects.filter(run=run, status="pending").count() == 1
    assert AuditEvent.objects.filter(run=run, action="run.reconsider").get().data == {
        "outcome": "",
        "reason": "policy changed",
    }
