"""Run a case set (shared fixture format) through the real pipeline and count what happened.

Each invocation gets its own intake channel, so it can run again and again on one database.
Outcomes come from what the pipeline answered; `expected` is only compared at the end.
"""

from __future__ import annotations

import json
import secrets
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.contrib.auth.models import Group, User
from django.db.models import Exists, OuterRef
from django.utils import timezone

from accounts.roles import roles_ensure
from approvals.binding import Binding
from approvals.models import ApprovalRequest, ApprovalStatus
from approvals.services import approval_decide
from audit.models import AuditAction
from automation.effects.services import effect_is_authorized
from automation.intake.services import intake_submit
from automation.models import (
    AuditEvent,
    ClassificationAttempt,
    ClassifierResult,
    Effect,
    IntakeChannel,
    Outcome,
    RecordedOutcome,
    Run,
    State,
)
from automation.pipeline.services import run_advance
from automation.schemas import normalize_text
from core.errors import ServiceError
from devtools.services import checkpoint_import, checkpoint_resume, run_nudge
from policy.models import PolicyVersion
from policy.services import policy_ensure_defaults
from worker.dispatch import Message, drain, inline

CONTROLLED_FAILURES = {
    Outcome.INVALID_EVENT,
    Outcome.UNSUPPORTED_REQUEST,
    Outcome.CLASSIFICATION_INVALID,
    Outcome.RETRY_EXHAUSTED,
    Outcome.APPROVAL_STALE,
    Outcome.STATE_CONFLICT,
}
COUNTER_ORDER = [
    "cases",
    "completed",
    "approval_required",
    "policy_blocks",
    "idempotent_replays",
    "idempotency_conflicts",
    "bounded_retries",
    "checkpoint_resumes",
    "controlled_failures",
    "authorized_effects",
    "unauthorized_effects",
]
ACTOR = "fixture-runner"
# Bounds the steps one case may take: a pipeline that loops is a bug, not a hang.
MAX_STEPS_PER_CASE = 200


class FixtureError(Exception):
    """The case set itself is unusable (unreadable file, unknown policy version)."""


@dataclass
class CaseResult:
    case_id: str
    expected: str
    outcome: str
    run_id: int | None

    @property
    def ok(self) -> bool:
        return self.outcome == self.expected


@dataclass
class FixtureReport:
    dataset: str
    channel: str
    cases: list[CaseResult] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(case.ok for case in self.cases)

    def as_json(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "channel": self.channel,
            "cases": [
                {"id": c.case_id, "expected": c.expected, "outcome": c.outcome, "run": c.run_id}
                for c in self.cases
            ],
            "counters": self.counters,
        }


def load_case_set(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise FixtureError(f"cannot read {path}: {exc}") from exc
    missing = {
        "workflow_version",
        "classifier_version",
        "prompt_version",
        "policy_version",
        "cases",
    } - set(data)
    if missing:
        raise FixtureError(f"{path} lacks {', '.join(sorted(missing))}")
    return data


def fixture_run(*, data: dict[str, Any]) -> FixtureReport:
    """Process every case in order through intake, workers' tasks, approvals and effects."""
    policy_ensure_defaults()
    if not PolicyVersion.objects.filter(name=data["policy_version"]).exists():
        raise FixtureError(f"policy version {data['policy_version']!r} is not loaded")
    channel = _new_channel(data)
    approver = _fixture_approver()
    report = FixtureReport(dataset=data.get("dataset", ""), channel=channel.name)
    for case in data["cases"]:
        outcome, run_id = _run_case(channel, case, approver)
        report.cases.append(CaseResult(case["id"], case.get("expected", ""), outcome, run_id))
    report.counters = count(channel=channel, results=report.cases)
    return report


def _new_channel(data: dict[str, Any]) -> IntakeChannel:
    stamp = timezone.now().strftime("%Y%m%d%H%M%S")
    return IntakeChannel.objects.create(
        name=f"fixture-{stamp}-{secrets.token_hex(4)}",
        classifier="recorded",
        classifier_version=data["classifier_version"],
        workflow_version=data["workflow_version"],
        prompt_version=data["prompt_version"],
        policy_version=data["policy_version"],
        max_classifier_attempts=int(data.get("max_classifier_attempts", 3)),
    )


def _fixture_approver() -> User:
    """The case set's approver, put in each request's team as it comes: the sample teams
    hold their roles' permissions (deciding takes the approver role's)."""
    roles_ensure()
    user, _ = User.objects.get_or_create(
        username=ACTOR, defaults={"is_active": True, "first_name": "Fixture approver"}
    )
    return user


def record_classifier_outcomes(channel: IntakeChannel, case: dict[str, Any]) -> None:
    for attempt, outcome in enumerate(case.get("classifier", []), start=1):
        RecordedOutcome.objects.update_or_create(
            channel=channel,
            event_id=normalize_text(str(case["event"].get("event_id", ""))),
            attempt=attempt,
            defaults={"outcome": outcome},
        )


def _run_case(
    channel: IntakeChannel, case: dict[str, Any], approver: User
) -> tuple[str, int | None]:
    record_classifier_outcomes(channel, case)
    with inline() as queue:
        result = intake_submit(
            channel=channel,
            raw=json.dumps(case["event"]).encode("utf-8"),
            content_type="application/json",
            source=f"fixture:{case['id']}",
        )
        if result.code != "accepted" or result.run is None:
            return str(result.code), result.run.pk if result.run else None
        run_id = result.run.pk
        if case.get("scenario") == "state_conflict":
            # The one deliberate illegal transition: received straight to executing.
            queue.clear()
            outcome = run_nudge(
                run_id=run_id,
                target=State.EXECUTING,
                reason="deliberate illegal transition",
                actor_label=ACTOR,
            )
            return outcome, run_id
        if "resume_decision" in case:
            refused = _resume_from_decision(queue, run_id, case["resume_decision"])
            if refused is not None:
                return refused, run_id
        _drain(queue, run_id)
        if "approval" in case:
            refusal = _give_approval(queue, run_id, case["approval"], approver)
            if refusal is not None:
                return refusal, run_id
    run = Run.objects.get(pk=run_id)
    return run.outcome or run.state, run_id


def _resume_from_decision(queue: deque[Message], run_id: int, decision: Any) -> str | None:
    """Bring the run to where a classification belongs, store it as a checkpoint, resume."""
    _drain(queue, run_id, stop_at=State.ENRICHED)
    queue.clear()  # the classifier call this would have made is replaced by the checkpoint
    checkpoint_import(run_id=run_id, classification=decision, actor_label=ACTOR)
    outcome = checkpoint_resume(run_id=run_id, actor_label=ACTOR)
    return outcome if outcome not in (State.CLASSIFIED,) else None


def _give_approval(
    queue: deque[Message], run_id: int, approval: dict[str, str], approver: User
) -> str | None:
    request = ApprovalRequest.objects.filter(run_id=run_id, status=ApprovalStatus.PENDING).first()
    if request is None:
        return None
    group, _ = Group.objects.get_or_create(name=request.group)
    approver.groups.add(group)
    try:
        result = approval_decide(
            request_id=request.pk,
            user=approver,
            approve=True,
            comment="approval from the case set",
            seen=Binding.from_dict({"fingerprint": request.fingerprint, **approval}),
        )
    except ServiceError as exc:
        return exc.code
    _drain(queue, run_id)
    if result.code in (Outcome.APPROVAL_STALE, Outcome.APPROVAL_EXPIRED):
        return result.code
    return None


def _drain(queue: deque[Message], run_id: int, stop_at: str | None = None) -> None:
    """Run queued messages one by one; when none are left, let due retries come due."""

    def reached() -> bool:
        return Run.objects.filter(pk=run_id, state=stop_at).exists()

    def backoff_ends() -> bool:
        run = Run.objects.get(pk=run_id)
        if run.state != State.ENRICHED or run.next_attempt_at is None:
            return False
        # Time passes: the backoff has run out and the sweep would now nudge this run.
        run_advance(run_id=run_id, now=run.next_attempt_at)
        return True

    stop = reached if stop_at is not None else None
    if not drain(queue, limit=MAX_STEPS_PER_CASE, stop=stop, when_idle=backoff_ends):
        raise FixtureError(f"run {run_id} did not settle within {MAX_STEPS_PER_CASE} steps")


def count(*, channel: IntakeChannel, results: list[CaseResult]) -> dict[str, int]:
    """The summary counters of the fixtures README, read back from the run records."""
    outcomes = [r.outcome for r in results]
    runs = Run.objects.filter(channel=channel)
    audit = AuditEvent.objects.filter(run__channel=channel)
    effects = list(Effect.objects.filter(run__channel=channel).select_related("run"))
    authorized = sum(1 for e in effects if effect_is_authorized(e))
    counters = {
        "cases": len(results),
        "completed": outcomes.count(Outcome.COMPLETED),
        "approval_required": audit.filter(action=AuditAction.RUN_REQUIRE_APPROVAL)
        .values("run")
        .distinct()
        .count(),
        "policy_blocks": runs.filter(outcome=Outcome.POLICY_BLOCK).count(),
        "idempotent_replays": outcomes.count(Outcome.IDEMPOTENT_REPLAY),
        "idempotency_conflicts": outcomes.count(Outcome.IDEMPOTENCY_CONFLICT),
        "bounded_retries": _bounded_retries(channel),
        "checkpoint_resumes": audit.filter(action=AuditAction.RUN_RESUMED)
        .values("run")
        .distinct()
        .count(),
        "controlled_failures": sum(1 for o in outcomes if o in CONTROLLED_FAILURES),
        "authorized_effects": authorized,
        "unauthorized_effects": len(effects) - authorized,
    }
    return {name: counters[name] for name in COUNTER_ORDER}


def _bounded_retries(channel: IntakeChannel) -> int:
    """Timeouts followed by another attempt of the same run."""
    later = ClassificationAttempt.objects.filter(
        run=OuterRef("run"), attempt__gt=OuterRef("attempt")
    )
    return (
        ClassificationAttempt.objects.filter(run__channel=channel, outcome=ClassifierResult.TIMEOUT)
        .filter(Exists(later))
        .count()
    )
