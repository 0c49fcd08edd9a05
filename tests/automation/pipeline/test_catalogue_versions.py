"""A run keeps the catalogue version that read and decided it: a later version that drops a
request type or an effect never breaks a run decided before it."""

from __future__ import annotations

from django.contrib.auth.models import User

from accounts.roles import roles_ensure
from approvals.models import ApprovalRequest, ApprovalStatus
from approvals.services import approval_decide
from automation.models import Effect, EffectStatus, Outcome, Run, State, Task
from policy.catalogue import reference_catalogue
from policy.models import PolicyVersion
from policy.schemas import NEW_VERSION, PolicyDocument
from policy.services import policy_version_activate, policy_version_create
from tests.conftest import Pipeline, decision_for, make_event

SECURITY = make_event(
    event_id="evt-sec-keep",
    request_type="security",
    subject="Unrecognised sign-in",
    body="Please review the account after an unrecognised sign-in.",
    requested_action="queue_account_review",
)


def without_the_account_review() -> PolicyVersion:
    """The active version with the account review gone from the catalogue and the policy."""
    roles_ensure()
    active = PolicyVersion.objects.get(is_active=True)
    data = active.parsed.stored()
    catalogue = reference_catalogue().model_dump(mode="json", exclude_none=True)
    del catalogue["effects"]["queue_account_review"]
    security = catalogue["request_types"]["security"]
    security.update(default_effect="create_follow_up", default_effect_always=False)
    data.update(
        version="no-review-1",
        catalogue=catalogue,
        allowed_effects=[e for e in data["allowed_effects"] if e != "queue_account_review"],
        approvals={k: v for k, v in data["approvals"].items() if k != "queue_account_review"},
    )
    version, _ = policy_version_create(
        document=PolicyDocument.model_validate(data, context=NEW_VERSION)
    )
    return policy_version_activate(name=version.name)


def test_an_approval_given_after_the_effect_was_removed_delivers_it_as_decided(
    pipeline: Pipeline, approver: User
) -> None:
    run = pipeline.run(pipeline.submit(SECURITY, [decision_for(SECURITY)]))
    assert run.state == State.APPROVAL_REQUIRED
    decided_under = run.policy_version
    request = ApprovalRequest.objects.get(run=run, status=ApprovalStatus.PENDING)

    without_the_account_review()
    with pipeline.capture():
        approval_decide(request_id=request.pk, user=approver, approve=True, seen=request.binding())
    pipeline.drain()

    run = Run.objects.get(pk=run.pk)
    effect = Effect.objects.get(run=run)
    assert (run.state, run.policy_version) == (State.COMPLETED, decided_under)
    assert (effect.status, effect.authorization["policy_version"]) == (
        EffectStatus.DELIVERED,
        decided_under,
    )
    task = Task.objects.get(idempotency_key=effect.idempotency_key)
    assert (task.effect, task.group) == ("queue_account_review", "security-approvers")


def test_a_new_request_of_the_removed_kind_is_refused_under_the_new_version(
    pipeline: Pipeline,
) -> None:
    without_the_account_review()

    event = {**SECURITY, "event_id": "evt-sec-new"}
    run = pipeline.run(pipeline.submit(event, [decision_for(event)]))

    # The request asks for an action the active version no longer allows.
    assert (run.state, run.outcome) == (State.FAILED, Outcome.UNSUPPORTED_REQUEST)
    assert not Effect.objects.filter(run=run).exists()
