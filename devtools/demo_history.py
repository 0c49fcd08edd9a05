"""Weeks of plausible history for the demo, so that every report has something to show.

The runs are made by the real services at past moments: intake, the recorded classifier,
policy, approvals, corrections, retries, resolutions by hand and local effects, with the
workers' tasks run in process. Only the clock is moved (time-machine, a development tool,
like everything in devtools), so each run's page, stage records and audit trail are
those of a real run. A stricter policy version is active for a few weeks in the middle.
Guarded: once the history channel exists, seeding again does nothing. Run before
`load_policy` on a new database, it loads the shipped policy as of the history's first day.
"""

from __future__ import annotations

import json
import logging
import random
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NamedTuple

import time_machine
import yaml
from django.contrib.auth.models import Group, User

from accounts.roles import roles_ensure
from approvals.models import ApprovalRequest, ApprovalStatus
from approvals.services import approval_decide
from automation.classifiers.quality import reading_of
from automation.intake.services import intake_submit
from automation.models import (
    IntakeChannel,
    Label,
    LabelSource,
    QAReview,
    QAStatus,
    RecordedOutcome,
    Run,
    State,
)
from automation.pipeline.services import run_advance
from automation.recovery.services import run_correct, run_resolve, run_retry
from core.errors import ServiceError
from policy.models import PolicyVersion
from policy.services import (
    parse_policy_text,
    policy_ensure_defaults,
    policy_version_activate,
    policy_version_create,
)
from worker.dispatch import Message, drain, inline

CHANNEL = "history"
STRICT = "policy-1-strict"
# Confidence a reading must reach under the strict version (policy-1 asks for none).
STRICT_THRESHOLD = 0.7
TIMEOUT = {"type": "timeout"}
KINDS = {
    "support": ("service_desk", "create_follow_up"),
    "billing": ("finance", "create_follow_up"),
    "sales": ("commercial", "create_follow_up"),
    "security": ("security_review", "queue_account_review"),
}
SUBJECTS = {
    "support": ["Cannot log in", "Password reset link expired", "Export fails", "2FA lost"],
    "billing": ["Invoice disputed", "Refund for order", "VAT number missing", "Card declined"],
    "sales": ["Pricing for 40 seats", "Quote for licences", "Renewal terms", "Upgrade options"],
    "security": ["Suspicious sign-ins", "Password reset from new device", "Unknown API key"],
}
# What happens to a run, and how often: the rest of the weights go straight through.
SCENARIOS = {
    "straight": 60,
    "approval": 16,
    "low_confidence": 8,
    "invalid_output": 4,
    "retries": 5,
    "blocked": 3,
}
MAX_STEPS = 200


@dataclass(frozen=True)
class Seeded:
    runs: int
    weeks: int
    skipped: bool = False


class _Step(NamedTuple):
    """Something a person or the system does at one moment of the history."""

    at: datetime
    order: int  # unique: steps at the same moment keep the order they were planned in
    action: Callable[[], None]


@dataclass
class _People:
    lead: User
    recovery: User
    approver: User


def _person(username: str, group: str) -> User:
    """The demo user of a role (demo_setup gives them passwords), made if missing."""
    user, created = User.objects.get_or_create(username=username)
    if created:
        user.set_unusable_password()
        user.save()
    user.groups.add(Group.objects.get(name=group))
    return user


def _strict_policy() -> str:
    """policy-1 with a confidence threshold: low-confidence readings wait for a person."""
    document = PolicyVersion.objects.get(name="policy-1").parsed.model_dump(mode="json")
    document["version"] = STRICT
    document["note"] = f"Readings below {STRICT_THRESHOLD} confidence wait for a person."
    document["confidence"]["default"] = STRICT_THRESHOLD
    return yaml.safe_dump(document, sort_keys=False)


class _History:
    """Plans the history as timed steps, then plays them in order under a moved clock."""

    def __init__(self, channel: IntakeChannel, people: _People, rng: random.Random) -> None:
        self.channel = channel
        self.people = people
        self.rng = rng
        self.steps: list[_Step] = []
        self.runs = 0

    def at(self, when: datetime, action: Callable[[], None]) -> None:
        self.steps.append(_Step(when, len(self.steps), action))

    def play(self, now: datetime) -> None:
        for step in sorted(s for s in self.steps if s.at < now):
            with _travel(step.at):
                step.action()

    # --- one run ---------------------------------------------------------------------------

    def plan_run(self, when: datetime, number: int, scenario: str = "") -> None:
        """One run and what people do about it later ("waiting": an approval nobody decided)."""
        waiting = scenario == "waiting"
        if waiting:
            scenario = "approval"
        scenario = scenario or self.rng.choices(list(SCENARIOS), list(SCENARIOS.values()))[0]
        kind = "security" if scenario == "approval" else self.rng.choice(list(KINDS)[:3])
        event = self._event(number, kind)
        reading = self._reading(event, kind, self.rng.uniform(0.78, 0.97))
        outcomes: list[Any] = [reading]
        if scenario == "low_confidence":
            reading["value"]["confidence"] = round(self.rng.uniform(0.45, 0.65), 2)
        elif scenario == "invalid_output":
            reading["value"]["requested_effect"] = "delete_record"
        elif scenario == "retries":
            outcomes = [TIMEOUT, TIMEOUT, self._reading(event, kind, 0.9)]
        elif scenario == "blocked":
            other = "billing" if kind != "billing" else "support"
            reading["value"]["category"] = other
            reading["value"]["recommended_route"] = KINDS[other][0]
        self.at(when, lambda: self._submit(event, outcomes))
        later = when + timedelta(minutes=self.rng.randint(20, 600))
        follow = {
            "approval": lambda: self._decide(event["event_id"]),
            "low_confidence": lambda: self._correct(event["event_id"], kind, reading),
            "invalid_output": lambda: self._correct(event["event_id"], kind, reading),
            "retries": lambda: self._recover(event["event_id"]),
        }.get(scenario)
        if scenario == "approval":
            # Most approvals within a few hours, some overnight, a few over a day.
            later = when + timedelta(minutes=self.rng.choice([15, 40, 90, 180, 300, 900, 1500]))
        if follow is not None and not waiting:
            self.at(later, follow)
        self.runs += 1

    def _event(self, number: int, kind: str) -> dict[str, Any]:
        subject = self.rng.choice(SUBJECTS[kind])
        return {
            "event_id": f"hist-{number:05d}",
            "source": self.rng.choice(["web_form", "partner_portal"]),
            "request_type": kind,
            "subject": subject,
            "body": f"{subject}. Please take care of it.",
            "account_tier": self.rng.choice(["standard", "standard", "priority"]),
            "requested_action": KINDS[kind][1],
        }

    @staticmethod
    def _reading(event: dict[str, Any], kind: str, confidence: float) -> dict[str, Any]:
        route, effect = KINDS[kind]
        value = {
            "category": kind,
            "recommended_route": route,
            "requested_effect": effect,
            "reason_code": "security_sensitive" if kind == "security" else f"{kind}_request",
            "confidence": round(confidence, 2),
        }
        return {"type": "decision", "value": value}

    # --- what happens at each step -----------------------------------------------------------

    def _submit(self, event: dict[str, Any], outcomes: list[Any]) -> None:
        for attempt, outcome in enumerate(outcomes, start=1):
            RecordedOutcome.objects.create(
                channel=self.channel, event_id=event["event_id"], attempt=attempt, outcome=outcome
            )
        with self._worked() as queue:
            intake_submit(
                channel=self.channel,
                raw=json.dumps(event).encode(),
                content_type="application/json",
                source="history",
            )
            self._settle(queue)

    def _decide(self, event_id: str) -> None:
        request = ApprovalRequest.objects.filter(
            run__channel=self.channel, run__event_id=event_id, status=ApprovalStatus.PENDING
        ).first()
        if request is None:
            return
        approve = self.rng.random() > 0.15
        with self._worked() as queue:
            try:
                approval_decide(
                    request_id=request.pk,
                    user=self.people.approver,
                    approve=approve,
                    comment="" if approve else "Not enough evidence for a review.",
                    seen=request.binding(),
                )
            except ServiceError:
                return
            self._settle(queue)

    def _correct(self, event_id: str, kind: str, reading: dict[str, Any]) -> None:
        run = self._held(event_id)
        if run is None:
            return  # policy let it through (no threshold at the time)
        corrected = {**self._reading({}, kind, 1.0)["value"]}
        with self._worked() as queue:
            run_correct(
                run_id=run.pk,
                user=self.people.lead,
                corrected=corrected,
                reason="Read the request myself.",
            )
            self._settle(queue)

    def _recover(self, event_id: str) -> None:
        run = self._held(event_id)
        if run is None:
            return
        with self._worked() as queue:
            if self.rng.random() < 0.5:
                run_retry(run_id=run.pk, user=self.people.recovery, reason="Classifier back.")
            else:
                run_resolve(
                    run_id=run.pk,
                    user=self.people.recovery,
                    reason="Classifier down for hours.",
                    evidence="Handled by phone with the customer.",
                    done=True,
                )
            self._settle(queue)

    def _held(self, event_id: str) -> Run | None:
        return Run.objects.filter(
            channel=self.channel, event_id=event_id, state=State.NEEDS_REVIEW
        ).first()

    @contextmanager
    def _worked(self) -> Iterator[deque[Message]]:
        with inline() as queue:
            yield queue

    @staticmethod
    def _settle(queue: deque[Message]) -> None:
        """Run the queued work; a classifier retry runs at the time its backoff ends."""

        def backoff_ends() -> bool:
            waiting = Run.objects.filter(
                state=State.ENRICHED, next_attempt_at__isnull=False, channel__name=CHANNEL
            ).first()
            if waiting is None:
                return False
            run_advance(run_id=waiting.pk, now=waiting.next_attempt_at)
            return True

        drain(queue, limit=MAX_STEPS, when_idle=backoff_ends)


def _travel(when: datetime) -> time_machine.travel:
    """The clock stopped at `when`, for everything this process does (database stamps too)."""
    return time_machine.travel(when, tick=False)


def _activate(name: str, text: str = "") -> Callable[[], None]:
    def activate() -> None:
        if text:
            policy_version_create(document=parse_policy_text(text))
        policy_version_activate(name=name)

    return activate


def history_seed(*, now: datetime, weeks: int = 8, per_day: int = 3, seed: int = 7) -> Seeded:
    """Plan `weeks` of runs (about `per_day` a day, fewer at weekends) and play them."""
    if IntakeChannel.objects.filter(name=CHANNEL).exists():
        return Seeded(runs=0, weeks=weeks, skipped=True)
    start = (now - timedelta(weeks=weeks)).replace(hour=0, minute=0, second=0, microsecond=0)
    with _travel(start - timedelta(days=1)):
        # On a new database the shipped policy is loaded (and active) since before the history.
        policy_ensure_defaults()
        roles_ensure()
    channel = IntakeChannel.objects.create(
        name=CHANNEL,
        classifier="recorded",
        classifier_version="recorded-classifier-1",
        workflow_version="workflow-1",
        prompt_version="prompt-1",
        max_classifier_attempts=2,
    )
    people = _People(
        _person("opslead", "ops-leads"),
        _person("recovery", "recovery-staff"),
        _person("approver", "security-approvers"),
    )
    rng = random.Random(seed)  # noqa: S311 - a repeatable demo, not cryptography
    history = _History(channel, people, rng)
    # The stricter version is active through the middle of the history (weeks 3 to 6 of 8).
    days = weeks * 7
    strict_from = start + timedelta(days=days * 3 // 8)
    strict_until = start + timedelta(days=days * 6 // 8)
    history.at(strict_from, _activate(STRICT, _strict_policy()))
    history.at(strict_until, _activate("policy-1"))
    number = 0
    for day in range(weeks * 7):
        midnight = start + timedelta(days=day)
        busy = per_day if midnight.weekday() < 5 else max(per_day // 3, 1)
        for _ in range(rng.randint(max(busy - 1, 1), busy + 1)):
            when = midnight + timedelta(hours=rng.uniform(7, 19))
            if when < now - timedelta(hours=1):
                number += 1
                history.plan_run(when, number)
    # Two requests still waiting: one past its escalation time, one from this morning.
    for hours in (30, 4):
        number += 1
        history.plan_run(now - timedelta(hours=hours), number, "waiting")
    quiet = logging.getLogger("gatehouse.runs")
    level = quiet.level
    quiet.setLevel(logging.WARNING)  # hundreds of past transitions are not news
    try:
        history.play(now)
    finally:
        quiet.setLevel(level)
    _qa_history(channel, people.lead, rng, now)
    return Seeded(runs=history.runs, weeks=weeks)


# About this share of the history's straight-through runs were sampled for QA and reviewed;
# of those, about this share read wrongly.
QA_SHARE = 0.2
QA_WRONG = 0.08
# Samples of runs that went through in the last days are not reviewed yet.
QA_WAITING = timedelta(days=4)


def _qa_history(channel: IntakeChannel, reviewer: User, rng: random.Random, now: datetime) -> None:
    """QA reviews of past straight-through runs, reviewed a day later (a few still open), with
    the labels they left: the reports' measured error rate has weeks to show."""
    done = Run.objects.filter(
        channel=channel,
        state=State.COMPLETED,
        approvals__isnull=True,
        qa_review__isnull=True,  # a policy that samples has already made it one
    )
    waiting = 0
    for run in done.order_by("pk"):
        if rng.random() >= QA_SHARE or run.finished_at is None:
            continue
        waiting += _qa_review(run, run.finished_at, reviewer, rng, now)
    # The last days hold only a few runs: by chance (and the day the history is seeded) none
    # of them may be drawn, and the reviewer's queue would be empty. Their latest waits.
    latest = done.filter(finished_at__gte=now - QA_WAITING).order_by("pk").last()
    if not waiting and latest is not None and latest.finished_at is not None:
        _qa_review(latest, latest.finished_at, reviewer, rng, now)


def _qa_review(
    run: Run, finished_at: datetime, reviewer: User, rng: random.Random, now: datetime
) -> bool:
    """The run's QA review: reviewed a day after it finished, with its label, or still open
    (True) if it finished in the last days."""
    reading = reading_of(run)
    reviewed_at = finished_at + timedelta(days=1)
    review = QAReview.objects.create(
        run=run,
        route=run.route or "",
        group="ops-leads",
        policy_version=run.policy_version,
        classifier_version=run.classifier_version,
        reading=reading,
        created_at=finished_at,
    )
    if finished_at >= now - QA_WAITING:
        return True  # the last days' samples wait for their reviewer
    wrong = rng.random() < QA_WRONG
    category, effect = (
        ("billing", "send_internal_notification")
        if wrong
        else (reading["category"], reading["effect"])
    )
    QAReview.objects.filter(pk=review.pk).update(
        status=QAStatus.CORRECTED if wrong else QAStatus.CONFIRMED,
        reviewer=reviewer,
        reviewed_at=reviewed_at,
        correction={"category": category, "effect": effect} if wrong else {},
    )
    Label.objects.create(
        run=run,
        source=LabelSource.QA_CORRECTED if wrong else LabelSource.QA_CONFIRMED,
        actor=reviewer,
        created_at=reviewed_at,
        classifier_version=run.classifier_version,
        reading={k: reading[k] for k in ("category", "effect", "confidence")},
        category=category,
        effect=effect,
        reading_was_right=not wrong,
    )
    return False
