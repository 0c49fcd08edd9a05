"""A claims desk's tasks, for the tests of a team's work: the insurer of tests/approvals/claims
takes a van claim in, a claims manager approves opening the claim, and the record effect
keeps a task for the claims desk, the team that owns the route."""

from __future__ import annotations

import copy

import yaml
from django.contrib.auth.models import User

from approvals.models import ApprovalRequest, ApprovalStatus
from approvals.services import approval_decide
from automation.effects.models import Task
from automation.intake.services import intake_submit
from automation.models import Run
from policy.services import parse_policy_text, policy_version_activate, policy_version_create
from tests.approvals.claims import CLAIMS, CORRECTED, VAN_MAIL_ID, van_mail
from tests.conftest import Pipeline, _user

DESK = "claims-desk"


def claims_task(pipeline: Pipeline, *, mail: bytes | None = None) -> Task:
    """A task for the claims desk, made as the business makes it: through intake, the
    approval and the record effect's delivery."""
    with pipeline.capture():
        result = intake_submit(
            channel=pipeline.channel,
            raw=mail or van_mail(),
            content_type="message/rfc822",
            source="test",
        )
    assert result.run is not None
    pipeline.record(result.run.event_id, [{"type": "decision", "value": CORRECTED}])
    pipeline.drain()
    request = ApprovalRequest.objects.get(run_id=result.run.pk, status=ApprovalStatus.PENDING)
    manager = User.objects.filter(username="claims-manager").first() or _user(
        "claims-manager", "claims-managers"
    )
    with pipeline.capture():
        approval_decide(request_id=request.pk, user=manager, approve=True, seen=request.binding())
    pipeline.drain()
    run = Run.objects.get(pk=result.run.pk)
    return Task.objects.get(run=run)


def unsure_of_claims() -> None:
    """The claims business again, now holding a reading it is less than 80% sure of for a
    person to look at (a new version, activated)."""
    document = copy.deepcopy(CLAIMS) | {"version": "claims-2", "confidence": {"default": 0.8}}
    version, _ = policy_version_create(document=parse_policy_text(yaml.safe_dump(document)))
    policy_version_activate(name=version.name)


def held_claim(pipeline: Pipeline, message_id: str = "<van-claim-2@fleet.example>") -> Run:
    """A van claim read with little confidence: held in a queue, on the claims desk's route."""
    mail = van_mail().replace(VAN_MAIL_ID.encode(), message_id.encode())
    with pipeline.capture():
        result = intake_submit(
            channel=pipeline.channel, raw=mail, content_type="message/rfc822", source="test"
        )
    assert result.run is not None
    unsure = {**CORRECTED, "confidence": 0.3}
    pipeline.record(result.run.event_id, [{"type": "decision", "value": unsure}])
    pipeline.drain()
    run = Run.objects.get(pk=result.run.pk)
    assert run.queue and run.route == "claims_desk", (run.state, run.queue, run.route)
    return run
