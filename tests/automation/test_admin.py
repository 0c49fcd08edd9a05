"""The operators' admin pages render for every kind of run and never offer edits."""

from __future__ import annotations

import socket

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from django.urls import reverse

from accounts.roles import roles_ensure
from approvals.models import ApprovalRequest
from automation.models import (
    AuditEvent,
    Effect,
    EffectStatus,
    IntakeChannel,
    IntakeRecord,
    Outcome,
    Run,
    State,
)
from automation.recovery.services import OPERATIONS as RECOVERY_OPERATIONS
from core.errors import state_conflict
from tests.catalogues import SIGNING_VARIABLE, activate_effects, http_effect
from tests.conftest import TIMEOUT, Pipeline, decision_for, make_event
from tests.downstream import running_downstream


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
    form |= {"prompt_version": "prompt-1", "classifier_version": "heuristic-3"}
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


def test_a_channels_attempts_are_a_number_in_ascii_digits(
    admin_client_for_runs: Client, channel: IntakeChannel
) -> None:
    """int() reads an Arabic-Indic digit as the number it looks like; the form does not."""
    url = reverse("admin:automation_intakechannel_change", args=[channel.pk])
    form = {"classifier": "recorded", "workflow_version": "workflow-1"}
    form |= {"prompt_version": "prompt-1", "classifier_version": "recorded-classifier-1"}
    form |= {"policy_version": "", "max_classifier_attempts": "\u0663"}  # 3, Arabic-Indic

    response = admin_client_for_runs.post(url, form)

    assert response.status_code == 200  # the form again, with its error
    assert "Enter a whole number." in response.content.decode()
    channel.refresh_from_db()
    assert channel.max_classifier_attempts == 2


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


# --- operations on a run: permission before anything is read or recorded --------------------


def held_for_its_effect(pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch) -> Run:
    """A notification to a receiver nobody listens on, one attempt allowed: held. The active
    version says so from now on (notifications written later go there too)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv(SIGNING_VARIABLE, "s" * 32)
    roles_ensure()  # a version is stored only if the groups its catalogue names exist
    notification = http_effect(
        f"http://127.0.0.1:{port}/effects",
        read_timeout=0.3,
        connect_timeout=0.3,
        max_attempts=1,
        deadline_seconds=3600,
        honours_idempotency_keys=True,
    )
    activate_effects({"send_internal_notification": notification})
    event = make_event(
        event_id="evt-held",
        request_type="billing",
        requested_action="send_internal_notification",
    )
    run = pipeline.run(pipeline.submit(event, [decision_for(event)]))
    assert (run.state, run.outcome) == (State.NEEDS_REVIEW, Outcome.EFFECT_UNAVAILABLE)
    return run


def awaiting_approval(pipeline: Pipeline) -> Run:
    review = make_event(
        event_id="evt-op", request_type="security", requested_action="queue_account_review"
    )
    run = pipeline.run(pipeline.submit(review, [decision_for(review)]))
    assert run.state == State.APPROVAL_REQUIRED
    return run


OPERATIONS = ["reconsider", "retry_effect"]
NOT_ALLOWED = {"approver": ("security-approvers",), "no group": (), "auditor": ("auditors",)}


@pytest.mark.parametrize("name", OPERATIONS)
@pytest.mark.parametrize("who", NOT_ALLOWED.keys())
def test_an_operation_is_refused_before_the_run_is_read_or_recorded(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch, name: str, who: str
) -> None:
    runs = [awaiting_approval(pipeline), held_for_its_effect(pipeline, monkeypatch)]
    client = _staff_client("someone", *NOT_ALLOWED[who])
    trail = AuditEvent.objects.count()

    for run in runs:  # one where the operation applies, one where it does not
        url = reverse("admin:automation_run_operation", args=[run.pk, name])
        with pipeline.capture():
            answer = client.post(url, {"reason": "let me in"}, follow=True)
        assert answer.status_code == 403
        for state in State.values:
            assert state.encode() not in answer.content
        assert Run.objects.get(pk=run.pk).version == run.version
    unknown_run = reverse("admin:automation_run_operation", args=[999999, name])
    assert client.post(unknown_run, {"reason": "x"}).status_code == 403

    assert AuditEvent.objects.count() == trail
    assert not pipeline.queue


def test_an_operation_needs_a_staff_login(pipeline: Pipeline) -> None:
    run = awaiting_approval(pipeline)
    roles_ensure()
    user = User.objects.create_user("ana")
    user.groups.add(Group.objects.get(name="recovery-staff"))
    client = Client()
    client.force_login(user)  # recovery staff, but not admin staff

    answer = client.post(
        reverse("admin:automation_run_operation", args=[run.pk, "reconsider"]), {"reason": "x"}
    )

    assert answer.status_code == 302 and "/login/" in answer["Location"]
    assert Run.objects.get(pk=run.pk).state == State.APPROVAL_REQUIRED
    assert not AuditEvent.objects.filter(run=run, actor=user).exists()


def test_recovery_staff_retry_a_held_effect_from_the_admin(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = held_for_its_effect(pipeline, monkeypatch)
    staff = _staff_client("sam", "recovery-staff")

    with pipeline.capture():
        answer = staff.post(
            reverse("admin:automation_run_operation", args=[run.pk, "retry_effect"]),
            {"reason": "receiver is back"},
        )
    pipeline.queue.clear()  # nobody listens yet: the delivery itself is another test's

    assert answer.status_code == 302
    assert Run.objects.get(pk=run.pk).state == State.EXECUTING
    assert Effect.objects.get(run=run).status == EffectStatus.RETRY_WAIT
    assert AuditEvent.objects.filter(
        run=run, action="run.retry_effect", actor__username="sam", data__reason="receiver is back"
    ).exists()


@pytest.mark.parametrize("name", OPERATIONS)
def test_recovery_staff_get_a_state_conflict_where_an_operation_does_not_apply(
    pipeline: Pipeline, name: str
) -> None:
    done = make_event(event_id="evt-done")
    finished = pipeline.run(pipeline.submit(done, [decision_for(done)]))
    staff = _staff_client("sam", "recovery-staff")

    answer = staff.post(
        reverse("admin:automation_run_operation", args=[finished.pk, name]),
        {"reason": "try"},
        follow=True,
    )

    assert answer.status_code == 200
    refused = state_conflict("re-deciding" if name == "reconsider" else "retry").message
    assert [str(m) for m in answer.context["messages"]] == [f"{name}: {refused}"]
    assert AuditEvent.objects.filter(run=finished, action="transition.refused").count() == 1
    assert Run.objects.get(pk=finished.pk).state == State.COMPLETED


@pytest.mark.parametrize("name", OPERATIONS)
def test_an_unknown_run_is_a_404_for_recovery_staff(pipeline: Pipeline, name: str) -> None:
    staff = _staff_client("sam", "recovery-staff")
    url = reverse("admin:automation_run_operation", args=[999999, name])
    assert staff.post(url, {"reason": "x"}).status_code == 404
    assert staff.get(url).status_code == 405


@pytest.mark.parametrize("action", ["retry_selected", "replay_selected"])
@pytest.mark.parametrize("who", NOT_ALLOWED.keys())
def test_the_run_list_actions_are_refused_too(pipeline: Pipeline, action: str, who: str) -> None:
    done = make_event(event_id="evt-done")
    finished = pipeline.run(pipeline.submit(done, [decision_for(done)]))
    client = _staff_client("someone", *NOT_ALLOWED[who])
    trail = AuditEvent.objects.count()

    answer = client.post(
        reverse("admin:automation_run_changelist"),
        {"action": action, "_selected_action": [finished.pk], "reason": "let me in"},
    )

    assert answer.status_code == 403
    assert AuditEvent.objects.count() == trail
    assert not Run.objects.filter(replay_of=finished).exists()


def test_each_operation_checks_the_permission_its_transition_declares() -> None:
    for name, operation in RECOVERY_OPERATIONS.items():
        declared = {t.permission for t in getattr(Run, name)._django_fsm.transitions.values()}
        assert declared == {operation.permission}, name


# --- what a receiver answered: to the people who handle deliveries only ----------------------


def test_a_receivers_answer_is_shown_to_delivery_staff_and_never_to_auditors(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(SIGNING_VARIABLE, "s" * 32)
    answer = {"error": "upstream-internal-detail-7f3a"}
    with running_downstream("s" * 32) as downstream:
        downstream.then(("status", 503, {}, answer))
        roles_ensure()
        activate_effects({"create_follow_up": http_effect(downstream.url, max_attempts=1)})
        event = make_event(event_id="evt-answer")
        run = pipeline.run(pipeline.submit(event, [decision_for(event)]))
    effect = Effect.objects.get(run=run)
    assert "upstream-internal-detail-7f3a" in effect.response_body
    page = reverse("admin:automation_effect_change", args=[effect.pk])

    for who, groups in {"auditor": ("auditors",), "approver": ("security-approvers",)}.items():
        shown = _staff_client(who, *groups).get(page)
        assert shown.status_code in (200, 403), who
        assert b"upstream-internal-detail-7f3a" not in shown.content, who
    auditor = _staff_client("aud2", "auditors").get(page)
    assert auditor.status_code == 200
    assert effect.idempotency_key.encode() in auditor.content  # the rest of the page is there
    for who, groups in {"staff": ("recovery-staff",), "lead": ("ops-leads",)}.items():
        shown = _staff_client(who, *groups).get(page)
        assert b"upstream-internal-detail-7f3a" in shown.content, who
