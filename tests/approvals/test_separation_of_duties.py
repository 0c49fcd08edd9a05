"""Separation of duties: whoever acted on a run, or on a run it replays, never approves it.

Built with the real services: a security event asking for an account review stops for an
approval; people correct, retry, resume, re-decide and replay runs through the recovery
services, and the approval is decided through the same service (and pages) as in production.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from datetime import UTC, timedelta
from typing import Any

import pytest
import time_machine
from django.contrib.auth.models import Group, User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounts.roles import roles_ensure
from approvals import selectors
from approvals.models import ApprovalDecision, ApprovalRequest, ApprovalStatus
from approvals.services import (
    approval_assign,
    approval_claim,
    approval_decide,
    approvals_decide_bulk,
    delegation_give,
)
from audit.models import AuditEvent
from automation.models import (
    Effect,
    EffectStatus,
    Outcome,
    RecoveryAction,
    RecoveryBatch,
    Run,
    State,
)
from automation.pipeline.operations import run_reconsider, sweep_due
from automation.recovery.preview import preview_runs
from automation.recovery.services import (
    batch_preview,
    batch_start,
    queue_assign,
    run_correct,
    run_replay,
    run_resume,
    run_retry,
)
from core.errors import ServiceError
from devtools.services import checkpoint_import, run_nudge
from tests.approvals.test_bulk import bulk_policy
from tests.conftest import TIMEOUT, Pipeline, decision_for, make_event

EVENT_ID = "evt-sod"
SECURITY = make_event(
    event_id=EVENT_ID, request_type="security", requested_action="queue_account_review"
)
READING = {
    "category": "security",
    "recommended_route": "security_review",
    "requested_effect": "queue_account_review",
    "reason_code": "security_sensitive",
}


@pytest.fixture(autouse=True)
def _roles(db: None, settings: Any) -> None:
    roles_ensure()
    # Logins need passwords; the default hasher costs ~0.3 s each.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def member(username: str, *groups: str) -> User:
    user = User.objects.create_user(username=username, password="pw-" + username)
    user.groups.add(*[Group.objects.get(name=name) for name in groups])
    return user


def refreshed(run: Run) -> Run:
    return Run.objects.get(pk=run.pk)


def pending_of(run: Run) -> ApprovalRequest:
    return ApprovalRequest.objects.get(run=run, status=ApprovalStatus.PENDING)


def decide(
    pipeline: Pipeline, run: Run, user: User, *, approve: bool = True, comment: str = ""
) -> str:
    request = pending_of(run)
    with pipeline.capture():
        result = approval_decide(
            request_id=request.pk,
            user=user,
            approve=approve,
            comment=comment,
            seen=request.binding(),
        )
    pipeline.drain()
    return result.code


def refusal(pipeline: Pipeline, run: Run, user: User, **kwargs: Any) -> str:
    with pytest.raises(ServiceError) as refused:
        decide(pipeline, run, user, **kwargs)
    return refused.value.code


def awaiting_approval(pipeline: Pipeline) -> Run:
    run = pipeline.run(pipeline.submit(SECURITY, [decision_for(SECURITY)]))
    assert run.state == State.APPROVAL_REQUIRED
    return run


def rejected(pipeline: Pipeline, run: Run) -> Run:
    """A security approver rejects the run's request: it fails, ready to be replayed."""
    rita = User.objects.filter(username="rita").first() or member("rita", "security-approvers")
    assert decide(pipeline, run, rita, approve=False, comment="no") == "rejected"
    run = refreshed(run)
    assert (run.state, run.outcome) == (State.FAILED, Outcome.APPROVAL_REJECTED)
    return run


def replayed(pipeline: Pipeline, run: Run, user: User) -> Run:
    """Replay a finished run; the classifier reads the replay as before, so it waits again."""
    pipeline.record(EVENT_ID, [decision_for(SECURITY)])
    with pipeline.capture():
        replay = run_replay(run_id=run.pk, user=user, reason="customer asked again")
    pipeline.drain()
    replay = refreshed(replay)
    assert replay.state == State.APPROVAL_REQUIRED
    return replay


def escalate(pipeline: Pipeline, run: Run) -> None:
    """Let the replay's request pass its SLA: the sweep sends it to ops-leads too."""
    due = pending_of(run).escalate_at + timedelta(minutes=1)
    with time_machine.travel(due, tick=False), pipeline.capture():
        assert sweep_due(now=due)["escalated"] == 1
    pipeline.queue.clear()


def assert_nothing_delivered(run: Run) -> None:
    assert refreshed(run).state == State.APPROVAL_REQUIRED
    assert not Effect.objects.filter(run=run).exists()
    assert not ApprovalDecision.objects.filter(request__run=run).exists()


# --- the replay itself ----------------------------------------------------------------------


def test_an_ops_lead_who_replayed_a_run_cannot_approve_its_escalated_request(
    pipeline: Pipeline,
) -> None:
    lead = member("lee", "ops-leads")
    replay = replayed(pipeline, rejected(pipeline, awaiting_approval(pipeline)), lead)
    escalate(pipeline, replay)
    assert "ops-leads" in pending_of(replay).visible_groups()

    assert refusal(pipeline, replay, lead) == "separation_of_duties"
    assert refusal(pipeline, replay, lead, approve=False, comment="no") == ("separation_of_duties")

    assert_nothing_delivered(replay)
    assert pending_of(replay).status == ApprovalStatus.PENDING


def test_another_ops_lead_may_approve_the_replay_and_its_effect_is_delivered(
    pipeline: Pipeline,
) -> None:
    lead = member("lee", "ops-leads")
    replay = replayed(pipeline, rejected(pipeline, awaiting_approval(pipeline)), lead)
    escalate(pipeline, replay)

    assert decide(pipeline, replay, member("kim", "ops-leads")) == "approved"

    replay = refreshed(replay)
    assert replay.state == State.COMPLETED
    assert Effect.objects.get(run=replay).status == EffectStatus.DELIVERED


def test_a_replayer_in_the_approving_group_too_cannot_approve(pipeline: Pipeline) -> None:
    both = member("kim", "ops-leads", "security-approvers")
    replay = replayed(pipeline, rejected(pipeline, awaiting_approval(pipeline)), both)

    assert refusal(pipeline, replay, both) == "separation_of_duties"

    assert_nothing_delivered(replay)
    assert decide(pipeline, replay, member("ana", "security-approvers")) == "approved"
    assert refreshed(replay).state == State.COMPLETED


def test_the_replay_is_on_the_trail_of_both_runs_with_who_did_it(pipeline: Pipeline) -> None:
    lead = member("lee", "ops-leads")
    original = rejected(pipeline, awaiting_approval(pipeline))
    replay = replayed(pipeline, original, lead)

    replayed_row = original.audit_events.filter(action="run.replay", actor=lead).get()
    assert replayed_row.data["replayed_as"] == replay.pk
    assert replayed_row.data["reason"] == "customer asked again"
    assert replay.audit_events.filter(action="run.replay_started", actor=lead).get().data == {
        "replay_of": original.pk,
        "reason": "customer asked again",
    }
    assert lead.pk in pending_of(replay).evidence["conflicted_user_ids"]


# --- actions on the run the replay came from ------------------------------------------------


def corrected(pipeline: Pipeline, actor: User) -> Run:
    run = pipeline.run(pipeline.submit(SECURITY, [TIMEOUT, TIMEOUT]))
    with pipeline.capture():
        run_correct(run_id=run.pk, user=actor, corrected=READING, reason="read it")
    pipeline.drain()
    return run


def retried(pipeline: Pipeline, actor: User) -> Run:
    run = pipeline.run(pipeline.submit(SECURITY, [TIMEOUT, TIMEOUT]))
    pipeline.record(EVENT_ID, [TIMEOUT, TIMEOUT, decision_for(SECURITY)])
    with pipeline.capture():
        run_retry(run_id=run.pk, user=actor, reason="classifier back")
    pipeline.drain()
    return run


def resumed(pipeline: Pipeline, actor: User) -> Run:
    bad = decision_for(SECURITY, requested_effect="delete_record")
    run = pipeline.run(pipeline.submit(SECURITY, [bad]))
    checkpoint_import(run_id=run.pk, classification=READING, actor_label="import")
    with pipeline.capture():
        run_resume(run_id=run.pk, user=actor, reason="read by hand")
    pipeline.drain()
    return run


def redecided(pipeline: Pipeline, actor: User) -> Run:
    run = awaiting_approval(pipeline)
    with pipeline.capture():
        run_reconsider(run_id=run.pk, user=actor, reason="policy changed")
    pipeline.drain()
    return run


ACTIONS: dict[str, Callable[[Pipeline, User], Run]] = {
    "correct": corrected,
    "retry": retried,
    "resume": resumed,
    "re-decide": redecided,
}


@pytest.mark.parametrize("act", ACTIONS.values(), ids=ACTIONS.keys())
def test_whoever_acted_on_the_original_cannot_approve_its_replay(
    pipeline: Pipeline, act: Callable[[Pipeline, User], Run]
) -> None:
    actor = member("lee", "ops-leads", "security-approvers")
    original = act(pipeline, actor)
    assert refreshed(original).state == State.APPROVAL_REQUIRED
    assert refusal(pipeline, original, actor) == "separation_of_duties"
    replay = replayed(pipeline, rejected(pipeline, original), member("sam", "recovery-staff"))

    assert refusal(pipeline, replay, actor) == "separation_of_duties"

    assert_nothing_delivered(replay)
    assert not selectors.can_decide(actor, pending_of(replay))
    assert decide(pipeline, replay, member("ana", "security-approvers")) == "approved"
    assert refreshed(replay).state == State.COMPLETED


def test_an_action_on_any_run_up_the_replay_chain_counts(pipeline: Pipeline) -> None:
    actor = member("lee", "ops-leads", "security-approvers")
    staff = member("sam", "recovery-staff")
    first = rejected(pipeline, corrected(pipeline, actor))
    second = rejected(pipeline, replayed(pipeline, first, staff))
    third = replayed(pipeline, second, staff)

    assert third.replay_of == second and second.replay_of == first
    assert refusal(pipeline, third, actor) == "separation_of_duties"
    assert_nothing_delivered(third)


# --- when the action comes after the request opened -----------------------------------------


def test_an_approval_given_before_acting_on_the_run_stops_counting(
    pipeline: Pipeline, two_approver_policy: None
) -> None:
    lead = member("lee", "ops-leads", "security-approvers")
    run = awaiting_approval(pipeline)
    assert decide(pipeline, run, lead) == "recorded"
    run_nudge(
        run_id=run.pk,
        target=State.APPROVAL_REQUIRED,
        reason="nudge",
        actor_label=lead.get_username(),
        actor=lead,
    )
    pipeline.queue.clear()

    assert decide(pipeline, run, member("ana", "security-approvers")) == "recorded"
    assert not Effect.objects.filter(run=run).exists()
    assert decide(pipeline, run, member("bob", "security-approvers")) == "approved"
    assert refreshed(run).state == State.COMPLETED


# --- the inbox and the pages ----------------------------------------------------------------


def test_the_inbox_does_not_offer_the_replayer_the_request(pipeline: Pipeline) -> None:
    lead, other = member("lee", "ops-leads"), member("kim", "ops-leads")
    replay = replayed(pipeline, rejected(pipeline, awaiting_approval(pipeline)), lead)
    escalate(pipeline, replay)
    request = pending_of(replay)
    now = request.created_at

    mine = selectors.inbox(user=lead, scope="mine", overdue_only=False, now=now)
    everything = selectors.inbox(user=lead, scope="all", overdue_only=False, now=now)
    theirs = selectors.inbox(user=other, scope="mine", overdue_only=False, now=now)

    assert [row.request.pk for row in mine] == []
    assert [(row.request.pk, row.can_decide) for row in everything] == [(request.pk, False)]
    assert [row.request.pk for row in theirs] == [request.pk]
    assert selectors.inbox_count(lead, now) == 0


def test_the_evidence_page_says_why_and_the_decision_is_refused(pipeline: Pipeline) -> None:
    lead = member("lee", "ops-leads")
    replay = replayed(pipeline, rejected(pipeline, awaiting_approval(pipeline)), lead)
    escalate(pipeline, replay)
    request = pending_of(replay)
    client = Client()
    client.force_login(lead)

    page = client.get(reverse("approvals:evidence", args=[request.pk])).content.decode()
    why = (
        f"You cannot decide this request: you acted by hand on run #{replay.replay_of_id}, "
        f"which this run replays (Replayed, {when_replayed(replay)}). Whoever acted on a run "
        "by hand may not approve it: someone else must decide it."
    )
    assert cannot_decide(page) == why
    assert 'name="decision" value="approve"' not in page
    form = {
        "decision": "approve",
        "comment": "",
        "seen_fingerprint": request.fingerprint,
        "seen_workflow_version": request.workflow_version,
        "seen_policy_version": request.policy_version,
        "seen_effect": request.effect,
    }
    with pipeline.capture():
        answer = client.post(reverse("approvals:decide", args=[request.pk]), form, follow=True)
    pipeline.drain()

    assert why in [str(m) for m in answer.context["messages"]]
    assert_nothing_delivered(replay)


def cannot_decide(page: str) -> str:
    """The page's sentence on why this person cannot decide the request."""
    found = re.search(r'data-testid="cannot-decide">([^<]*)</p>', page)
    assert found, "the page does not say why the request cannot be decided"
    return html.unescape(found.group(1))


def when_replayed(replay: Run) -> str:
    moment = AuditEvent.objects.get(run_id=replay.replay_of_id, action="run.replay").created_at
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def evidence_of(client: Client, request: ApprovalRequest) -> str:
    return client.get(reverse("approvals:evidence", args=[request.pk])).content.decode()


def test_the_evidence_page_says_which_reason_applies_to_this_person(pipeline: Pipeline) -> None:
    """It said "…another group, you already decided it, or you submitted or corrected the
    run" whatever applied."""
    lead, auditor = member("lee", "ops-leads"), member("aud", "auditors")
    run = redecided(pipeline, lead)
    request = pending_of(run)
    as_lead, as_auditor = Client(), Client()
    as_lead.force_login(lead)
    as_auditor.force_login(auditor)
    due = request.escalate_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")

    assert cannot_decide(evidence_of(as_lead, request)) == (
        "You cannot decide this request: it is routed to Security approvers, and you are not "
        f"one of them; it goes to Ops leads if nobody decides it by {due}."
    )
    assert cannot_decide(evidence_of(as_auditor, request)) == (
        "You cannot decide this request: your role reads approvals but decides none."
    )
    escalate(pipeline, run)
    redecision = AuditEvent.objects.get(run=run, action="run.reconsider", actor=lead)
    at = redecision.created_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    assert cannot_decide(evidence_of(as_lead, request)) == (
        f"You cannot decide this request: you acted on this run by hand (Decided again, {at}). "
        "Whoever acted on a run by hand may not approve it: someone else must decide it."
    )


def test_an_approver_who_approved_is_told_the_next_approval_is_someone_elses(
    pipeline: Pipeline, two_approver_policy: None
) -> None:
    ana = member("ana", "security-approvers")
    run = awaiting_approval(pipeline)
    assert decide(pipeline, run, ana) == "recorded"
    request = pending_of(run)
    client = Client()
    client.force_login(ana)
    approved = ApprovalDecision.objects.get(request=request, user=ana).created_at
    at = approved.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    why = (
        f"You cannot decide this request again: you approved it on {at}. It needs 2 distinct "
        "approvers (1 so far), so the next approval is someone else's."
    )

    assert cannot_decide(evidence_of(client, request)) == why
    form = {
        "decision": "approve",
        "seen_fingerprint": request.fingerprint,
        "seen_workflow_version": request.workflow_version,
        "seen_policy_version": request.policy_version,
        "seen_effect": request.effect,
    }
    answer = client.post(reverse("approvals:decide", args=[request.pk]), form, follow=True)
    assert why in [str(m) for m in answer.context["messages"]]


# --- hand-offs: a batch someone else prepared, and every path that acts for someone ---------


def prepared(lead: User, action: str, run_ids: list[int] | None = None) -> RecoveryBatch:
    """A batch previewed by `lead`: over the queue's held runs (a retry), or over the runs
    given (a replay of finished runs, which no queue holds: chosen as by hand)."""
    now = timezone.now()
    batch = batch_preview(
        action=action,
        queue=Outcome.RETRY_EXHAUSTED,
        since=now - timedelta(hours=1),
        until=now + timedelta(minutes=1),
        user=lead,
        reason="customers asked again",
    )
    if run_ids is not None:
        rows = [r.as_dict() for r in preview_runs(run_ids=run_ids, action=action, user=lead)]
        RecoveryBatch.objects.filter(pk=batch.pk).update(run_ids=run_ids, preview=rows)
    return batch


def started(pipeline: Pipeline, batch: RecoveryBatch, user: User) -> RecoveryBatch:
    with pipeline.capture():
        batch_start(batch_id=batch.pk, user=user)
    pipeline.drain()
    batch.refresh_from_db()
    assert (batch.status, batch.failures) == ("finished", [])
    return batch


def replayed_in_batch(pipeline: Pipeline, previewer: User, starter: User) -> Run:
    """A rejected run replayed by a batch `previewer` prepared and `starter` started."""
    original = rejected(pipeline, awaiting_approval(pipeline))
    batch = prepared(previewer, "replay", [original.pk])
    pipeline.record(EVENT_ID, [decision_for(SECURITY)])
    started(pipeline, batch, starter)
    replay = Run.objects.get(replay_of=original)
    assert replay.state == State.APPROVAL_REQUIRED
    return replay


def test_whoever_starts_a_replay_batch_another_prepared_cannot_approve_its_replays(
    pipeline: Pipeline,
) -> None:
    lee, kim = member("lee", "ops-leads"), member("kim", "ops-leads")
    replay = replayed_in_batch(pipeline, lee, kim)
    escalate(pipeline, replay)
    assert "ops-leads" in pending_of(replay).visible_groups()

    assert refusal(pipeline, replay, kim) == "separation_of_duties"
    assert refusal(pipeline, replay, lee) == "separation_of_duties"
    assert not selectors.can_decide(kim, pending_of(replay))
    assert selectors.inbox_count(kim, pending_of(replay).created_at) == 0

    assert_nothing_delivered(replay)
    assert decide(pipeline, replay, member("max", "ops-leads")) == "approved"
    assert refreshed(replay).state == State.COMPLETED


def test_a_batch_item_is_on_the_record_of_its_starter_and_its_preparer(
    pipeline: Pipeline,
) -> None:
    lee, kim = member("lee", "ops-leads"), member("kim", "ops-leads")
    replay = replayed_in_batch(pipeline, lee, kim)
    original = replay.replay_of
    assert original is not None

    assert original.audit_events.filter(action="run.replay", actor=kim).exists()
    assert replay.audit_events.filter(action="run.replay_started", actor=kim).exists()
    (chose,) = original.audit_events.filter(action="run.batch_prepared")
    assert chose.actor == lee and chose.data["started_by"] == kim.pk
    done = RecoveryAction.objects.get(run=replay)
    assert (done.actor, done.data["prepared_by"]) == (kim, "lee")
    batch = RecoveryBatch.objects.get()
    assert (batch.created_by, batch.started_by) == (lee, kim)
    client = Client()
    client.force_login(lee)
    page = client.get(reverse("queues:batch", args=[batch.pk])).content.decode()
    assert "Prepared by lee" in page
    assert 'started by <span data-testid="batch-started-by">kim</span>' in page


def test_whoever_starts_a_retry_batch_another_prepared_cannot_approve_the_runs(
    pipeline: Pipeline,
) -> None:
    lee = member("lee", "ops-leads", "security-approvers")
    kim = member("kim", "ops-leads", "security-approvers")
    run = pipeline.run(pipeline.submit(SECURITY, [TIMEOUT, TIMEOUT]))
    assert run.queue == Outcome.RETRY_EXHAUSTED
    pipeline.record(EVENT_ID, [TIMEOUT, TIMEOUT, decision_for(SECURITY)])
    started(pipeline, prepared(lee, "retry"), kim)
    assert refreshed(run).state == State.APPROVAL_REQUIRED

    assert refusal(pipeline, run, kim) == "separation_of_duties"
    assert refusal(pipeline, run, lee) == "separation_of_duties"

    assert_nothing_delivered(run)
    assert decide(pipeline, run, member("ana", "security-approvers")) == "approved"


def test_one_who_prepares_and_starts_a_batch_alone_is_on_its_record_once(
    pipeline: Pipeline,
) -> None:
    lee = member("lee", "ops-leads", "security-approvers")
    replay = replayed_in_batch(pipeline, lee, lee)

    assert refusal(pipeline, replay, lee) == "separation_of_duties"
    assert not AuditEvent.objects.filter(action="run.batch_prepared").exists()
    assert "prepared_by" not in RecoveryAction.objects.get(run=replay).data


def bulk_approved(pipeline: Pipeline, run: Run, user: User, others: dict[str, User]) -> None:
    request = pending_of(run)
    with pipeline.capture():
        (result,) = approvals_decide_bulk(
            seen={request.pk: request.binding()}, user=user, approve=True
        )
    pipeline.drain()
    assert result.code == "separation_of_duties", result


def decided_for(pipeline: Pipeline, run: Run, user: User, others: dict[str, User]) -> None:
    """`user` away, their approvals delegated to fred: fred may not decide for them."""
    now = timezone.now()
    delegation_give(
        delegator=user,
        delegate=others["fred"],
        starts_at=now - timedelta(minutes=1),
        ends_at=now + timedelta(hours=8),
        reason="holiday",
        by=user,
    )
    with pytest.raises(ServiceError, match="kim acted on this run, so nobody decides it"):
        decide(pipeline, run, others["fred"])


def assigned(pipeline: Pipeline, run: Run, user: User, others: dict[str, User]) -> None:
    with pytest.raises(ServiceError, match="kim acted on this run"):
        approval_assign(
            request_id=pending_of(run).pk, assignee=user, by=others["max"], now=timezone.now()
        )
    with pytest.raises(ServiceError, match="kim acted on this run"):
        approval_claim(request_id=pending_of(run).pk, user=user, now=timezone.now())
    assert pending_of(run).assignee is None


HAND_OFFS: dict[str, Callable[[Pipeline, Run, User, dict[str, User]], None]] = {
    "bulk": bulk_approved,
    "delegation": decided_for,
    "assign": assigned,
}


@pytest.mark.parametrize("hand_off", HAND_OFFS.values(), ids=HAND_OFFS.keys())
def test_the_batch_starter_gets_no_decision_through_another_hand_off(
    pipeline: Pipeline, hand_off: Callable[[Pipeline, Run, User, dict[str, User]], None]
) -> None:
    bulk_policy()  # the replay is decided under today's policy: one that allows bulk
    kim = member("kim", "ops-leads", "security-approvers")
    others = {"fred": member("fred", "finance-approvers"), "max": member("max", "ops-leads")}
    replay = replayed_in_batch(pipeline, member("lee", "ops-leads"), kim)
    assert pending_of(replay).evidence["bulk"]

    hand_off(pipeline, replay, kim, others)

    assert_nothing_delivered(replay)
    assert pending_of(replay).status == ApprovalStatus.PENDING


def test_whoever_is_given_a_queue_item_and_corrects_it_cannot_approve_it(
    pipeline: Pipeline,
) -> None:
    lead = member("lee", "ops-leads")
    sam = member("sam", "ops-leads", "security-approvers")
    run = pipeline.run(pipeline.submit(SECURITY, [TIMEOUT, TIMEOUT]))
    queue_assign(run_id=run.pk, user=lead, assignee=sam, reason="sam reads these")
    with pipeline.capture():
        run_correct(run_id=run.pk, user=sam, corrected=READING, reason="read it")
    pipeline.drain()
    assert refreshed(run).state == State.APPROVAL_REQUIRED

    assert refusal(pipeline, run, sam) == "separation_of_duties"

    assert_nothing_delivered(run)
    assert decide(pipeline, run, member("ana", "security-approvers")) == "approved"
