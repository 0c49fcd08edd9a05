"""Recovery: queues, correction, retry, resume, replay, resolution and batches."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.core.exceptions import PermissionDenied
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounts.roles import roles_ensure
from approvals.models import ApprovalRequest
from approvals.services import approval_decide
from audit.models import AuditEvent
from automation.models import (
    Effect,
    Outcome,
    RecoveryAction,
    RecoveryBatch,
    Run,
    State,
    Task,
)
from automation.pipeline.operations import run_reconsider
from automation.recovery.services import (
    CorrectionInvalid,
    batch_create,
    queue_assign,
    queue_claim,
    queue_release,
    run_correct,
    run_replay,
    run_resolve,
    run_resume,
    run_retry,
    run_retry_effect,
)
from core.errors import ServiceError
from devtools.services import checkpoint_import
from tests.conftest import TIMEOUT, Pipeline, decision_for, make_event


def person(username: str, *groups: str) -> User:
    roles_ensure()
    user = User.objects.create_user(username)
    user.groups.add(*[Group.objects.get(name=g) for g in groups])
    return user


def exhausted(pipeline: Pipeline, event_id: str = "evt-held") -> Run:
    """A run held as retry_exhausted (the test channel allows two classifier attempts)."""
    event = make_event(event_id=event_id)
    return pipeline.run(pipeline.submit(event, [TIMEOUT, TIMEOUT]))


def invalid(pipeline: Pipeline, event_id: str = "evt-bad") -> Run:
    event = make_event(event_id=event_id)
    bad = decision_for(event, requested_effect="delete_record")
    return pipeline.run(pipeline.submit(event, [bad]))


def completed(pipeline: Pipeline, event_id: str = "evt-done") -> Run:
    event = make_event(event_id=event_id)
    return pipeline.run(pipeline.submit(event, [decision_for(event)]))


def good_reading(**overrides: Any) -> dict[str, Any]:
    reading = {
        "category": "support",
        "recommended_route": "service_desk",
        "requested_effect": "create_follow_up",
        "reason_code": "support_request",
    }
    reading.update(overrides)
    return reading


def refreshed(run: Run) -> Run:
    return Run.objects.get(pk=run.pk)


# --- queues ---------------------------------------------------------------------------


def test_held_and_failed_runs_land_in_queues_named_by_their_reason(pipeline: Pipeline) -> None:
    held = exhausted(pipeline)
    bad = invalid(pipeline)
    done = completed(pipeline)
    pipeline.submit(make_event(event_id="evt-x", source="fax"))  # answered to the sender

    summaries = {q.name: q for q in services_queue_summaries()}

    assert refreshed(held).queue == Outcome.RETRY_EXHAUSTED
    assert refreshed(bad).queue == Outcome.CLASSIFICATION_INVALID
    assert refreshed(done).queue == ""
    assert set(summaries) == {Outcome.RETRY_EXHAUSTED, Outcome.CLASSIFICATION_INVALID}
    assert summaries[Outcome.RETRY_EXHAUSTED].owner_group == "ops-leads"


def services_queue_summaries() -> list[Any]:
    from automation.recovery.selectors import queue_summaries

    return queue_summaries(owners={"needs_review": "ops-leads"})


def test_claim_assign_release_are_recorded(pipeline: Pipeline) -> None:
    run = exhausted(pipeline)
    lead = person("lee", "ops-leads")
    other = person("kim", "ops-leads")

    queue_claim(run_id=run.pk, user=lead)
    with pytest.raises(ServiceError, match="already works"):
        queue_claim(run_id=run.pk, user=other)
    queue_assign(run_id=run.pk, user=lead, assignee=other, reason="kim knows sales")
    assert refreshed(run).owner == other
    queue_release(run_id=run.pk, user=other)

    assert refreshed(run).owner is None
    actions = list(RecoveryAction.objects.values_list("action", "actor__username", "data"))
    assert actions == [
        ("claim", "lee", {"owner": "lee", "previous_owner": None}),
        ("assign", "lee", {"owner": "kim", "previous_owner": "lee"}),
        ("release", "kim", {"owner": None, "previous_owner": "kim"}),
    ]


def test_queue_buttons_answer_in_plain_words(pipeline: Pipeline) -> None:
    run = exhausted(pipeline)
    lead, other = person("lee", "ops-leads"), person("kim", "ops-leads")
    client = Client()
    client.force_login(lead)

    def said(action: str, **form: str) -> list[str]:
        url = reverse("runs:queue_action", args=[run.pk, action])
        response = client.post(url, form, follow=True)
        return [str(m) for m in response.context["messages"]]

    assert said("claim") == ["Claimed: the run is yours to work on."]
    assert said("assign", assignee="kim") == ["Assigned to kim."]
    client.force_login(other)
    assert said("release") == ["Released: the run is back in the queue for anyone to take."]


def test_claiming_needs_the_queue_permission(pipeline: Pipeline) -> None:
    run = exhausted(pipeline)
    with pytest.raises(PermissionDenied):
        queue_claim(run_id=run.pk, user=person("aud", "auditors"))
    assert refreshed(run).owner is None


def test_queue_actions_refuse_a_person_without_the_permission_before_reading_anything(
    pipeline: Pipeline,
) -> None:
    """Whether a username exists is nobody's business who may not work the queues."""
    run = exhausted(pipeline)
    client = Client()
    client.force_login(person("aud", "auditors"))
    url = reverse("runs:queue_action", args=[run.pk, "assign"])

    for assignee in ("aud", "no-such-person"):
        assert client.post(url, {"assignee": assignee}).status_code == 403
    assert client.post(reverse("runs:queue_action", args=[run.pk, "nap"])).status_code == 403
    assert refreshed(run).owner is None


@pytest.mark.django_db(transaction=True)
def test_two_people_claiming_at_once_one_wins(pipeline: Pipeline) -> None:
    run = exhausted(pipeline)
    a, b = person("a", "ops-leads"), person("b", "ops-leads")

    results = at_once(
        lambda: queue_claim(run_id=run.pk, user=a),
        lambda: queue_claim(run_id=run.pk, user=b),
    )

    assert sorted(type(r).__name__ for r in results) == ["Run", "ServiceError"]
    assert RecoveryAction.objects.filter(action="claim").count() == 1


# --- correction ----------------------------------------------------------------------


def test_correction_resumes_through_policy_and_is_recorded(pipeline: Pipeline) -> None:
    run = invalid(pipeline)
    lead = person("lee", "ops-leads")

    with pipeline.capture():
        result = run_correct(
            run_id=run.pk, user=lead, corrected=good_reading(), reason="effect misread"
        )
    pipeline.drain()

    run = refreshed(run)
    assert run.state == State.COMPLETED
    assert "requested_effect" in result.changed or "category" in result.changed
    action = RecoveryAction.objects.get(action="correct")
    assert (action.actor, action.reason) == (lead, "effect misread")
    assert AuditEvent.objects.filter(run=run, action="run.correct_reading", actor=lead).exists()
    assert Task.objects.count() == 1


def test_invalid_correction_names_the_field_and_changes_nothing(pipeline: Pipeline) -> None:
    run = invalid(pipeline)
    version = refreshed(run).version
    with pytest.raises(CorrectionInvalid) as refused:
        run_correct(
            run_id=run.pk,
            user=person("lee", "ops-leads"),
            corrected=good_reading(reason_code="not valid!"),
            reason="try",
        )
    assert [p.field for p in refused.value.problems] == ["reason_code"]
    assert refreshed(run).version == version
    assert not RecoveryAction.objects.exists()


def test_correction_without_permission_is_refused(pipeline: Pipeline) -> None:
    run = invalid(pipeline)
    with pytest.raises(PermissionDenied):
        run_correct(
            run_id=run.pk,
            user=person("sam", "recovery-staff"),
            corrected=good_reading(),
            reason="x",
        )
    assert refreshed(run).state == State.NEEDS_REVIEW


def test_correction_never_skips_policy(pipeline: Pipeline) -> None:
    run = invalid(pipeline)
    with pipeline.capture():
        run_correct(
            run_id=run.pk,
            user=person("lee", "ops-leads"),
            corrected=good_reading(category="billing", recommended_route="finance"),
            reason="x",
        )
    pipeline.drain()
    assert (refreshed(run).state, refreshed(run).outcome) == (State.BLOCKED, Outcome.POLICY_BLOCK)
    assert not Effect.objects.exists()


def test_correction_never_skips_approval_and_the_corrector_cannot_approve(
    pipeline: Pipeline,
) -> None:
    event = make_event(
        event_id="evt-sec", request_type="security", requested_action="queue_account_review"
    )
    run = pipeline.run(pipeline.submit(event, [TIMEOUT, TIMEOUT]))
    lead = person("lee", "ops-leads", "security-approvers")
    reading = good_reading(
        category="security",
        recommended_route="security_review",
        requested_effect="queue_account_review",
        reason_code="security_sensitive",
    )
    with pipeline.capture():
        run_correct(run_id=run.pk, user=lead, corrected=reading, reason="read by hand")
    pipeline.drain()

    assert refreshed(run).state == State.APPROVAL_REQUIRED
    request = ApprovalRequest.objects.get(run=run)
    with pytest.raises(ServiceError) as refused:
        approval_decide(request_id=request.pk, user=lead, approve=True, seen=request.binding())
    assert refused.value.code == "separation_of_duties"


# --- retry, resume, replay, resolve --------------------------------------------------------


def test_retry_of_an_exhausted_classifier_gets_a_fresh_budget(pipeline: Pipeline) -> None:
    run = exhausted(pipeline)
    pipeline.record("evt-held", [TIMEOUT, TIMEOUT, decision_for(make_event(event_id="evt-held"))])
    staff = person("sam", "recovery-staff")

    with pipeline.capture():
        result = run_retry(run_id=run.pk, user=staff, reason="classifier back")
    pipeline.drain()

    assert result == State.ENRICHED
    assert refreshed(run).state == State.COMPLETED
    assert RecoveryAction.objects.get(action="retry").result == State.ENRICHED


def test_retry_of_a_non_retryable_hold_is_refused_and_recorded(pipeline: Pipeline) -> None:
    run = invalid(pipeline)
    staff = person("sam", "recovery-staff")
    with pytest.raises(ServiceError) as refused:
        run_retry(run_id=run.pk, user=staff, reason="x")
    assert refused.value.code == Outcome.STATE_CONFLICT
    assert refreshed(run).state == State.NEEDS_REVIEW
    assert RecoveryAction.objects.get(action="retry").result == Outcome.STATE_CONFLICT


def test_a_reason_is_required(pipeline: Pipeline) -> None:
    run = exhausted(pipeline)
    with pytest.raises(ServiceError, match="say why"):
        run_retry(run_id=run.pk, user=person("sam", "recovery-staff"), reason="  ")


def test_replaying_a_completed_run_delivers_no_second_effect(pipeline: Pipeline) -> None:
    original = completed(pipeline)
    staff = person("sam", "recovery-staff")

    with pipeline.capture():
        replay = run_replay(run_id=original.pk, user=staff, reason="audit check")
    pipeline.drain()

    replay = refreshed(replay)
    assert replay.replay_of == original
    assert replay.state == State.COMPLETED
    assert replay.fingerprint == original.fingerprint
    assert Effect.objects.count() == 1
    assert Task.objects.count() == 1
    assert replay.stages.filter(stage="execute", outcome="already_delivered").exists()
    assert set(RecoveryAction.objects.values_list("run", "action")) == {
        (original.pk, "replay"),
        (replay.pk, "replay"),
    }


@pytest.mark.parametrize(
    "operation",
    [run_reconsider, run_retry_effect, run_resume],
    ids=lambda f: f.__name__,
)
@pytest.mark.parametrize("groups", [("security-approvers",), ()], ids=["approver", "no group"])
def test_an_operation_without_its_permission_records_nothing_on_the_run(
    pipeline: Pipeline, operation: Callable[..., str], groups: tuple[str, ...]
) -> None:
    run = completed(pipeline)  # neither operation applies: once, this was recorded as refused
    user = person("ana", *groups)

    with pytest.raises(PermissionDenied):
        operation(run_id=run.pk, user=user, reason="let me")

    assert not AuditEvent.objects.filter(actor=user).exists()
    assert refreshed(run).version == run.version


def test_a_run_still_in_flight_is_not_replayed(pipeline: Pipeline) -> None:
    run = exhausted(pipeline)
    with pytest.raises(ServiceError, match="only a finished run"):
        run_replay(run_id=run.pk, user=person("sam", "recovery-staff"), reason="x")


def test_resume_revalidates_the_checkpoint(pipeline: Pipeline) -> None:
    run = invalid(pipeline)
    staff = person("sam", "recovery-staff")
    checkpoint_import(run_id=run.pk, classification=good_reading(), actor_label="ops")

    with pipeline.capture():
        run_resume(run_id=run.pk, user=staff, reason="fixed by hand")
    pipeline.drain()

    assert refreshed(run).state == State.COMPLETED
    assert RecoveryAction.objects.get(action="resume").actor == staff


def test_resolved_by_hand_and_abandoned_runs_leave_the_queue_with_evidence(
    pipeline: Pipeline,
) -> None:
    done_by_hand, dropped = exhausted(pipeline, "evt-1"), exhausted(pipeline, "evt-2")
    staff = person("sam", "recovery-staff")

    run_resolve(
        run_id=done_by_hand.pk,
        user=staff,
        reason="called the customer",
        evidence="ticket 4471",
        done=True,
    )
    run_resolve(
        run_id=dropped.pk,
        user=staff,
        reason="duplicate request",
        evidence="same as evt-1",
        done=False,
    )

    assert (refreshed(done_by_hand).state, refreshed(done_by_hand).queue) == (State.COMPLETED, "")
    assert (refreshed(dropped).state, refreshed(dropped).outcome) == (
        State.FAILED,
        Outcome.RETRY_EXHAUSTED,
    )
    evidence = dict(RecoveryAction.objects.values_list("action", "data__evidence"))
    assert evidence == {"resolve": "ticket 4471", "abandon": "same as evt-1"}
    with pytest.raises(ServiceError, match="describe"):
        run_resolve(run_id=done_by_hand.pk, user=staff, reason="x", evidence="", done=True)


@pytest.mark.django_db(transaction=True)
def test_two_staff_retrying_the_same_run_at_once_produce_one_retry(pipeline: Pipeline) -> None:
    run = exhausted(pipeline)
    a, b = person("a", "recovery-staff"), person("b", "recovery-staff")

    results = at_once(
        lambda: run_retry(run_id=run.pk, user=a, reason="go"),
        lambda: run_retry(run_id=run.pk, user=b, reason="go"),
    )

    codes = [r.code if isinstance(r, ServiceError) else r for r in results]
    assert sorted(codes) == sorted([State.ENRICHED, Outcome.STATE_CONFLICT])
    assert AuditEvent.objects.filter(run=run, action="run.retry_stage").count() == 1
    assert RecoveryAction.objects.filter(action="retry").count() == 2


# --- batches -------------------------------------------------------------------------


def test_a_batch_retries_the_queue_in_its_window_and_records_each_item(
    pipeline: Pipeline,
) -> None:
    runs = [exhausted(pipeline, f"evt-{i}") for i in range(3)]
    for run in runs:
        reading = decision_for(make_event(event_id=run.event_id))
        pipeline.record(run.event_id, [TIMEOUT, TIMEOUT, reading])
    outside = exhausted(pipeline, "evt-late")
    Run.objects.filter(pk=outside.pk).update(queued_at=timezone.now() + timedelta(hours=2))
    staff = person("sam", "recovery-staff")
    now = timezone.now()

    with pipeline.capture():
        batch = batch_create(
            action="retry",
            queue=Outcome.RETRY_EXHAUSTED,
            since=now - timedelta(hours=1),
            until=now + timedelta(minutes=1),
            user=staff,
            reason="classifier back",
        )
    pipeline.drain()

    batch = RecoveryBatch.objects.get(pk=batch.pk)
    assert (batch.total, batch.done, batch.succeeded, batch.status) == (3, 3, 3, "finished")
    assert all(refreshed(run).state == State.COMPLETED for run in runs)
    assert refreshed(outside).state == State.NEEDS_REVIEW
    assert RecoveryAction.objects.filter(batch=batch).count() == 3


def test_recover_command_is_a_dry_run_unless_committed(pipeline: Pipeline) -> None:
    run = exhausted(pipeline)
    person("sam", "recovery-staff")
    since = (timezone.now() - timedelta(hours=1)).isoformat()
    args = [
        "--queue",
        "retry_exhausted",
        "--since",
        since,
        "--action",
        "retry",
        "--reason",
        "back",
        "--user",
        "sam",
    ]

    dry = StringIO()
    call_command("recover", *args, stdout=dry)
    assert "would retry 1 run" in dry.getvalue()
    assert refreshed(run).state == State.NEEDS_REVIEW

    out = StringIO()
    with pipeline.capture():
        call_command("recover", *args, "--commit", stdout=out)
    assert "1/1 done, 1 ok, 0 failed" in out.getvalue()
    assert refreshed(run).state == State.ENRICHED


# --- pages ---------------------------------------------------------------------------


def test_queue_pages_and_run_page_render_for_an_auditor_without_operations(
    pipeline: Pipeline,
) -> None:
    run = exhausted(pipeline)
    client = Client()
    client.force_login(person("aud", "auditors"))

    overview = client.get(reverse("queues:list")).content.decode()
    items = client.get(reverse("queues:queue", args=["retry_exhausted"])).content.decode()
    page = client.get(reverse("runs:run", args=[run.pk])).content.decode()

    assert 'data-testid="count-retry_exhausted">1<' in overview
    assert "evt-held" in items and "Claim" not in items
    assert "Stage timings" not in page and "Timeline" in page
    assert 'data-testid="operations"' not in page
    retry = client.post(reverse("runs:recover", args=[run.pk, "retry"]), {"reason": "x"})
    assert retry.status_code == 403


def test_approvers_cannot_read_runs(pipeline: Pipeline) -> None:
    run = exhausted(pipeline)
    client = Client()
    client.force_login(person("ana", "security-approvers"))
    assert client.get(reverse("runs:run", args=[run.pk])).status_code == 403
    assert client.get(reverse("queues:list")).status_code == 403


def at_once(*calls: Callable[[], Any]) -> list[Any]:
    """Run the calls in threads released together; each result or raised exception."""
    barrier = threading.Barrier(len(calls))
    results: list[Any] = [None] * len(calls)

    def work(index: int, call: Callable[[], Any]) -> None:
        try:
            barrier.wait()
            results[index] = call()
        except Exception as exc:
            results[index] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=work, args=(i, c)) for i, c in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_admin_action_asks_for_a_reason_then_retries(pipeline: Pipeline) -> None:
    run = exhausted(pipeline)
    pipeline.record("evt-held", [TIMEOUT, TIMEOUT, decision_for(make_event(event_id="evt-held"))])
    staff = person("sam", "recovery-staff")
    staff.is_staff = True
    staff.save()
    client = Client()
    client.force_login(staff)
    url = reverse("admin:automation_run_changelist")
    form = {"action": "retry_selected", "_selected_action": [run.pk]}

    ask = client.post(url, form)
    assert b"Every recovery operation is recorded with its reason" in ask.content
    assert refreshed(run).state == State.NEEDS_REVIEW

    with pipeline.capture():
        client.post(url, {**form, "reason": "classifier back"})
    pipeline.drain()
    assert refreshed(run).state == State.COMPLETED
    assert RecoveryAction.objects.get(action="retry").reason == "classifier back"
