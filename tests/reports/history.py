"""A small history with known answers, built through the real services at chosen moments.

Twenty runs over four weeks (February and March 2026), seven of them touched by a person:
five waited for approval (three decided after 5 h, 30 min and 2 h; two still pending), one
was corrected after a low-confidence hold, one was resolved by hand after the classifier ran
out of attempts. Of the thirteen nobody touched, eleven went straight through, one was
blocked by policy and one is held with invalid classifier output and merely claimed.
policy-2 (a confidence threshold of 0.8) was activated on Friday 20 February at 12:00 and
policy-3 (no threshold again) on Friday 27 February at 12:00. The dashboard is read on
Wednesday 4 March 2026 at 12:00 UTC.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import time_machine
from django.contrib.auth.models import Group, User

from accounts.roles import roles_ensure
from approvals.models import ApprovalRequest
from approvals.services import approval_decide
from automation.models import IntakeChannel, Run, StageRecord
from automation.recovery.services import queue_claim, run_correct, run_resolve
from policy.services import (
    DEFAULTS_DIR,
    parse_policy_text,
    policy_ensure_defaults,
    policy_version_activate,
    policy_version_create,
)
from tests.conftest import TIMEOUT, Pipeline, decision_for, make_event

NOW = datetime(2026, 3, 4, 12, 0, tzinfo=UTC)
POLICY_2_AT = datetime(2026, 2, 20, 12, 0, tzinfo=UTC)
POLICY_3_AT = datetime(2026, 2, 27, 12, 0, tzinfo=UTC)

ACTIONS = {
    "support": "create_follow_up",
    "billing": "send_internal_notification",
    "sales": "create_follow_up",
    "security": "queue_account_review",
}


def at(day: int, hour: int, minute: int = 0, month: int = 2) -> datetime:
    return datetime(2026, month, day, hour, minute, tzinfo=UTC)


def policy_text(version: str, threshold: float) -> str:
    text = (DEFAULTS_DIR / "policy-1.yaml").read_text(encoding="utf-8")
    text = text.replace("version: policy-1", f"version: {version}")
    block = "confidence:\n  default: 0.0\n"
    assert block in text
    return text.replace(block, f"confidence:\n  default: {threshold}\n")


def event(event_id: str, kind: str) -> dict[str, Any]:
    return make_event(event_id=event_id, request_type=kind, requested_action=ACTIONS[kind])


def reading(ev: dict[str, Any], confidence: float = 0.95, **overrides: Any) -> dict[str, Any]:
    outcome = decision_for(ev, **overrides)
    outcome["value"]["confidence"] = confidence
    return outcome


@dataclass
class History:
    pipeline: Pipeline
    lead: User
    approver: User
    # Added to every moment: a browser test, whose server runs on the real clock, moves the
    # whole history so that NOW is now.
    shift: timedelta = timedelta(0)
    runs: dict[str, Run] = field(default_factory=dict)
    approvals: dict[str, ApprovalRequest] = field(default_factory=dict)

    def travel(self, when: datetime) -> Any:
        return time_machine.travel(when + self.shift, tick=False)

    def submit(self, name: str, when: datetime, kind: str, outcomes: list[Any]) -> Run:
        with self.travel(when):
            ev = event(f"evt-{name}", kind)
            run = self.pipeline.run(self.pipeline.submit(ev, outcomes))
        self.runs[name] = run
        return run

    def straight(self, name: str, when: datetime, kind: str) -> Run:
        ev = event(f"evt-{name}", kind)
        return self.submit(name, when, kind, [reading(ev)])

    def awaiting(self, name: str, when: datetime) -> ApprovalRequest:
        self.straight(name, when, "security")
        request = ApprovalRequest.objects.get(run=self.runs[name])
        self.approvals[name] = request
        return request

    def decide(self, name: str, when: datetime, *, approve: bool) -> None:
        request = self.approvals[name]
        with self.travel(when), self.pipeline.capture():
            approval_decide(
                request_id=request.pk,
                user=self.approver,
                approve=approve,
                comment="" if approve else "not this account",
                seen=request.binding(),
            )
        with self.travel(when):
            self.pipeline.drain()

    def activate(self, version: str, threshold: float, when: datetime) -> None:
        with self.travel(when):
            policy_version_create(document=parse_policy_text(policy_text(version, threshold)))
            policy_version_activate(name=version)


def person(username: str, *groups: str) -> User:
    user = User.objects.create_user(username=username, password=f"pw-{username}")
    user.groups.set(Group.objects.filter(name__in=groups))
    return user


def build_history(*, shift: timedelta = timedelta(0)) -> History:
    with time_machine.travel(datetime(2025, 11, 3, 9, 0, tzinfo=UTC) + shift, tick=False):
        policy_ensure_defaults()
        roles_ensure()
        channel = IntakeChannel.objects.create(
            name="history",
            classifier="recorded",
            classifier_version="recorded-classifier-1",
            workflow_version="workflow-1",
            prompt_version="prompt-1",
            max_classifier_attempts=2,
        )
    lead, approver = person("lena", "ops-leads"), person("ana", "security-approvers")
    h = History(Pipeline(channel), lead, approver, shift)

    # Week of 9 February: four runs, three straight through; one resolved by hand.
    h.straight("r1", at(10, 9), "support")
    h.straight("r2", at(11, 9), "billing")
    held = h.submit("x1", at(12, 10), "support", [TIMEOUT, TIMEOUT])
    with h.travel(at(12, 11)), h.pipeline.capture():
        run_resolve(
            run_id=held.pk,
            user=h.lead,
            reason="classifier down",
            evidence="done by phone",
            done=True,
        )
    h.straight("r3", at(13, 9), "sales")

    # Week of 16 February: three runs; one approval, rejected on 18 February after 5 h.
    h.straight("r4", at(16, 9), "support")
    h.straight("r5", at(17, 9), "billing")
    h.awaiting("a1", at(18, 9))
    h.decide("a1", at(18, 14), approve=False)
    h.activate("policy-2", 0.8, POLICY_2_AT)

    # Week of 23 February: seven runs under policy-2 then policy-3.
    h.straight("r7", at(23, 9), "sales")
    low = h.submit("l1", at(23, 10), "billing", [reading(event("evt-l1", "billing"), 0.6)])
    with h.travel(at(23, 11)), h.pipeline.capture():
        corrected = {**reading(event("evt-l1", "billing"), 1.0)["value"]}
        run_correct(run_id=low.pk, user=h.lead, corrected=corrected, reason="read it")
    with h.travel(at(23, 11)):
        h.pipeline.drain()
    h.straight("r8", at(24, 9), "support")
    h.awaiting("a2", at(24, 10))
    h.decide("a2", at(24, 10, 30), approve=True)
    blocked = event("evt-b1", "support")
    h.submit(
        "b1",
        at(25, 10),
        "support",
        [reading(blocked, category="billing", recommended_route="finance")],
    )
    h.awaiting("a3", at(26, 9))
    h.decide("a3", at(26, 11), approve=True)
    h.activate("policy-3", 0.0, POLICY_3_AT)
    h.straight("r9", at(27, 15), "billing")

    # Week of 2 March: six runs; two approvals still pending, one invalid reading claimed.
    h.straight("r10", at(2, 8, month=3), "support")
    h.awaiting("a4", at(2, 9, month=3))
    h.straight("r11", at(3, 9, month=3), "billing")
    bad = event("evt-c1", "sales")
    claimed = h.submit(
        "c1", at(3, 10, month=3), "sales", [reading(bad, requested_effect="delete_record")]
    )
    with h.travel(at(3, 11, month=3)):
        queue_claim(run_id=claimed.pk, user=h.lead)
    h.awaiting("a5", at(4, 8, month=3))
    h.straight("r12", at(4, 9, month=3), "sales")
    h.runs = {name: Run.objects.get(pk=run.pk) for name, run in h.runs.items()}
    return h


def stage_inventory() -> list[tuple[str, str, str, int]]:
    return list(
        StageRecord.objects.order_by("started_at", "pk").values_list(
            "run__event_id", "stage", "outcome", "attempt"
        )
    )
