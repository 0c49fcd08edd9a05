"""The demo gives every group that approves something to decide, once it is running.

The finance approver's inbox was empty, the security approver had two requests, and none
needed two people, while the banner promised finance work. After the demo's preparation
and the work its worker does, each group the active policy asks to approve has a request
waiting that one of its demo users may decide; one needs two distinct approvers, and two
demo users of its group may give them; one expires within a few hours.
"""

from __future__ import annotations

from collections import deque
from datetime import timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.utils import timezone

from approvals.models import ApprovalRequest, ApprovalStatus
from approvals.selectors import decidable_by
from automation.models import Run, State
from automation.pipeline.operations import sweep_due
from automation.pipeline.services import run_advance
from policy.models import PolicyVersion
from policy.schemas import PolicyDocument
from worker.dispatch import Message, drain, inline

ROOT = Path(__file__).resolve().parents[2]
NEAR_EXPIRY = timedelta(hours=6)


def approving_groups(policy: PolicyDocument) -> set[str]:
    """Every group the policy asks to approve, or to decide once a request escalates."""
    rules = [*policy.approvals.values(), policy.amount_approval]
    rules += [signal.approval for signal in policy.signals.values()]
    return {
        group
        for rule in rules
        if rule is not None
        for group in (rule.group, rule.escalate_to)
        if group
    }


def backoff_ends() -> bool:
    """A classifier retry runs when its backoff ends (the worker waits; the test need not)."""
    waiting = Run.objects.filter(state=State.ENRICHED, next_attempt_at__isnull=False).first()
    if waiting is None:
        return False
    run_advance(run_id=waiting.pk, now=waiting.next_attempt_at)
    return True


def work(queue: deque[Message]) -> None:
    """What the worker does: every message, then its minute's sweep (escalations), again."""
    assert drain(queue, when_idle=backoff_ends)
    sweep_due()
    assert drain(queue, when_idle=backoff_ends)


def deciders(request: ApprovalRequest) -> set[str]:
    """The demo users who may decide `request` now."""
    waiting = ApprovalRequest.objects.filter(pk=request.pk)
    return {user.username for user in User.objects.all() if decidable_by(user, waiting).exists()}


def group_members(group: str) -> set[str]:
    return set(User.objects.filter(groups__name=group).values_list("username", flat=True))


@pytest.mark.django_db(transaction=True)  # the demo's work runs on real commits
def test_every_approving_group_has_waiting_work_after_the_demo_starts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(ROOT)  # bin/demo runs from the repository's root
    with inline() as queue:
        call_command("prepare_demo", stdout=StringIO(), stderr=StringIO())
        work(queue)
    now = timezone.now()
    pending = list(ApprovalRequest.objects.filter(status=ApprovalStatus.PENDING))
    who = {request.pk: deciders(request) for request in pending}
    policy = PolicyVersion.objects.get(is_active=True).parsed

    for group in sorted(approving_groups(policy)):
        members = group_members(group)
        assert any(who[request.pk] & members for request in pending), f"nothing for {group}"
    four_eyes = [r for r in pending if r.required_approvals >= 2]
    assert four_eyes, "no request needs two approvers"
    assert any(len(who[r.pk] & group_members(r.group)) >= 2 for r in four_eyes)
    soon = [r for r in pending if now < r.expires_at <= now + NEAR_EXPIRY]
    assert soon, "no request expires within a few hours"
    assert all(who[r.pk] for r in soon)
