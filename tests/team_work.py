"""A claims desk's tasks, for the tests of a team's work: the insurer of tests/approvals/claims
takes a van claim in, a claims manager approves opening the claim, and the record effect
keeps a task for the claims desk, the team that owns the route."""

from __future__ import annotations

from django.contrib.auth.models import User

from approvals.models import ApprovalRequest, ApprovalStatus
from approvals.services import approval_decide
from automation.effects.models import Task
from automation.intake.services import intake_submit
from automation.models import Run
from tests.approvals.claims import CORRECTED, van_mail
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
