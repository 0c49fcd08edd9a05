"""No effect reaches the outbox unless its parameters satisfy the run's catalogue, whatever
path brought the run there: a classifier's reading, a correction, a confirmation of the
reading as it was, a resume, a replay, a decision taken again, a bulk approval, a batch.

The business is a travel agency's refunds desk (neither the reference nor the shop): a refund
names a booking, the date of travel and the amount, and the amount is money, so a refund
without one (or with one whose currency cannot be told) waits for a person.
"""

from __future__ import annotations

import copy
import itertools
import re
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import yaml
from django.contrib.auth.models import Group, User
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accounts.roles import permissions_of, roles_ensure
from approvals.models import ApprovalRequest
from approvals.services import approvals_decide_bulk
from automation.extraction import parse_date
from automation.models import Effect, Outcome, RecoveryBatch, Run, State
from automation.pipeline.operations import run_reconsider
from automation.recovery.selectors import current_reading
from automation.recovery.services import (
    CorrectionInvalid,
    batch_create,
    run_correct,
    run_replay,
    run_resolve,
    run_resume,
)
from devtools.services import checkpoint_import
from policy.models import PolicyVersion
from policy.services import parse_policy_text, policy_version_activate, policy_version_create
from tests.conftest import TIMEOUT, Pipeline, rolled_back

TRAVEL: dict[str, Any] = {
    "version": "harbour-1",
    "routes": {"refund_request": "refunds_desk", "question": "refunds_desk"},
    "allowed_effects": ["issue_refund", "answer_question"],
    "confidence": {"default": 0.5},
    "catalogue": {
        "request_types": {
            "refund_request": {
                "label": "Refund request",
                "description": "A traveller asks for money back for a booking.",
                "fields": {
                    "booking_ref": {
                        "type": "reference",
                        "required": True,
                        "pattern": "HT-[0-9]{5}",
                    },
                    "travel_date": {"type": "date"},
                    "amount": {"type": "amount"},
                    "reason": {"type": "text"},
                },
            },
            "question": {"label": "Question", "description": "Anything else."},
        },
        "routes": {"refunds_desk": {"label": "Refunds desk", "group": "harbour-refunds"}},
        "effects": {
            "issue_refund": {
                "label": "Issue a refund",
                "description": "A refund task for the payments clerk.",
                "adapter": "record",
                "parameters": {
                    "booking": {"value": "{{ fields.booking_ref }}", "type": "reference"},
                    "travel_date": {"value": "{{ fields.travel_date }}", "type": "date"},
                    # Not required, yet money: a refund without an amount waits for a person.
                    "amount": {"value": "{{ fields.amount }}", "type": "amount", "required": False},
                },
            },
            "answer_question": {
                "label": "Answer the question",
                "description": "A task to answer the traveller.",
                "adapter": "record",
            },
        },
    },
}
# The same business with every refund approved by the payments team first.
APPROVED: dict[str, Any] = {
    **copy.deepcopy(TRAVEL),
    "version": "harbour-2",
    "approvals": {"issue_refund": {"group": "harbour-payments", "bulk": True}},
}
GOOD = {"booking_ref": "HT-10442", "travel_date": "2026-12-03", "amount": "640.00 EUR"}
# A missing and a malformed value of a parameter, and the field each is named by.
BROKEN = [
    pytest.param({"amount": None}, "fields.amount", id="amount-missing"),
    pytest.param({"amount": "640"}, "fields.amount", id="amount-without-currency"),
    pytest.param({"travel_date": None}, "fields.travel_date", id="date-missing"),
    pytest.param({"travel_date": "soon"}, "fields.travel_date", id="date-malformed"),
    pytest.param({"booking_ref": "10442"}, "fields.booking_ref", id="booking-malformed"),
]
_events = itertools.count(1)


def _store(document: dict[str, Any]) -> PolicyVersion:
    for name in ("harbour-refunds", "harbour-payments"):
        # The agency's approving teams hold the approver role: a team decides only through it.
        group, _ = Group.objects.get_or_create(name=name)
        group.permissions.set(permissions_of(["approver"]))
    version, _ = policy_version_create(document=parse_policy_text(yaml.safe_dump(document)))
    return version


@pytest.fixture
def travel(pipeline: Pipeline) -> Pipeline:
    """The test channel, decided by whichever harbour version is active."""
    roles_ensure()
    _store(APPROVED)
    _store(TRAVEL)
    policy_version_activate(name="harbour-1")
    return pipeline


@pytest.fixture
def payments(travel: Pipeline) -> User:
    """A refund approver; harbour-2 (every refund approved) is active."""
    policy_version_activate(name="harbour-2")
    user = User.objects.create_user("pat")
    user.groups.add(Group.objects.get(name="harbour-payments"))
    return user


def reading(values: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    """A refund request read with these field values (None: the field was not found)."""
    fields = {
        name: {"value": value, "confidence": 0.9}
        for name, value in {**GOOD, **values}.items()
        if value is not None
    }
    return {
        "category": "refund_request",
        "recommended_route": "refunds_desk",
        "requested_effect": "issue_refund",
        "reason_code": "refund_request",
        "confidence": 0.9,
        "fields": fields,
        **overrides,
    }


def submit(pipeline: Pipeline, outcomes: list[dict[str, Any]]) -> Run:
    event = {
        "event_id": f"evt-travel-{next(_events)}",
        "source": "web_form",
        "request_type": "refund_request",
        "subject": "Refund for my cancelled ferry",
        "body": "The crossing was cancelled; please refund booking HT-10442.",
        "account_tier": "standard",
        "requested_action": "issue_refund",
    }
    return pipeline.run(pipeline.submit(event, outcomes))


def answer(values: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    return {"type": "decision", "value": reading(values, **overrides)}


def assert_held_for(run: Run, field: str) -> None:
    """Held for a person with the parameter named, and nothing in the outbox."""
    run = Run.objects.get(pk=run.pk)
    assert (run.state, run.outcome) == (State.NEEDS_REVIEW, Outcome.EXTRACTION_INVALID)
    assert field in run.failure_field + run.failure_detail
    assert not Effect.objects.filter(run=run).exists()


def waiting_with(pipeline: Pipeline, values: dict[str, Any]) -> Run:
    """A refund waiting for approval whose reading lacks what `values` takes away: as a run
    that reached approval before the rule was enforced (and is still waiting) can."""
    run = submit(pipeline, [answer({})])
    assert run.state == State.APPROVAL_REQUIRED
    Run.objects.filter(pk=run.pk).update(classification=reading(values))
    return run


# --- each path --------------------------------------------------------------------------


@pytest.mark.parametrize(("values", "field"), BROKEN)
def test_a_classifier_s_reading(travel: Pipeline, values: dict[str, Any], field: str) -> None:
    run = submit(travel, [answer(values)])

    assert_held_for(run, field)


def test_a_good_reading_goes_through_with_its_parameters(travel: Pipeline) -> None:
    run = submit(travel, [answer({})])

    effect = Effect.objects.get(run=run)
    assert Run.objects.get(pk=run.pk).state == State.COMPLETED
    assert effect.payload["params"]["booking"] == "HT-10442"
    assert effect.payload["params"]["amount"]


@pytest.mark.parametrize(("values", "field"), BROKEN)
def test_a_correction(travel: Pipeline, ops_lead: User, values: dict[str, Any], field: str) -> None:
    held = _held_for_low_confidence(travel)

    with pytest.raises(CorrectionInvalid) as refused:
        run_correct(run_id=held.pk, user=ops_lead, corrected=reading(values), reason="read it")

    assert field in {problem.field for problem in refused.value.problems}
    assert Run.objects.get(pk=held.pk).state == State.NEEDS_REVIEW
    assert not Effect.objects.filter(run=held).exists()


@pytest.mark.parametrize(("values", "field"), BROKEN[:2])
def test_confirming_the_reading_as_it_was(
    travel: Pipeline, ops_lead: User, values: dict[str, Any], field: str
) -> None:
    """The issue's case: a refund held for its missing amount, saved by an ops lead as read."""
    held = submit(travel, [answer(values)])
    assert held.state == State.NEEDS_REVIEW

    with pytest.raises(CorrectionInvalid) as refused:
        run_correct(
            run_id=held.pk, user=ops_lead, corrected=current_reading(held), reason="as read"
        )

    assert field in {problem.field for problem in refused.value.problems}
    assert not Effect.objects.filter(run=held).exists()


def _held_for_low_confidence(pipeline: Pipeline) -> Run:
    """A refund held because the reader was unsure (under the floor of 0.5)."""
    run = submit(pipeline, [answer({}, confidence=0.2)])
    assert (run.state, run.outcome) == (State.NEEDS_REVIEW, Outcome.LOW_CONFIDENCE), run.outcome
    return run


@pytest.mark.parametrize(("values", "field"), BROKEN)
def test_a_resume(travel: Pipeline, staff: User, values: dict[str, Any], field: str) -> None:
    roles_ensure()
    held = submit(travel, [TIMEOUT, TIMEOUT])
    checkpoint_import(run_id=held.pk, classification=reading(values), actor_label="test")

    with travel.capture():
        run_resume(run_id=held.pk, user=staff, reason="read by hand")
    travel.drain()

    assert_held_for(held, field)


@pytest.mark.parametrize(("values", "field"), BROKEN)
def test_a_replay(travel: Pipeline, staff: User, values: dict[str, Any], field: str) -> None:
    roles_ensure()
    original = submit(travel, [answer(values)])
    run_resolve(run_id=original.pk, user=staff, reason="gave up", evidence="x", done=False)
    travel.record(original.event_id, [answer(values)])

    with travel.capture():
        replay = run_replay(run_id=original.pk, user=staff, reason="once more")
    travel.drain()

    assert_held_for(replay, field)


@pytest.mark.parametrize(("values", "field"), BROKEN)
def test_deciding_again(
    travel: Pipeline, payments: User, staff: User, values: dict[str, Any], field: str
) -> None:
    run = waiting_with(travel, values)
    policy_version_activate(name="harbour-1")  # refunds need no approval any more

    with travel.capture():
        run_reconsider(run_id=run.pk, user=staff, reason="the rule changed")
    travel.drain()

    assert_held_for(run, field)


@pytest.mark.parametrize(("values", "field"), BROKEN)
def test_a_bulk_approval(
    travel: Pipeline, payments: User, values: dict[str, Any], field: str
) -> None:
    runs = [waiting_with(travel, values), waiting_with(travel, values)]
    requests = ApprovalRequest.objects.filter(run__in=runs)

    with travel.capture():
        results = approvals_decide_bulk(
            seen={r.pk: r.binding() for r in requests}, user=payments, approve=True
        )
    travel.drain()

    assert [result.code for result in results] == ["approved", "approved"]
    for run in runs:
        assert_held_for(run, field)


@pytest.mark.parametrize(("values", "field"), BROKEN)
def test_a_batch_retry(travel: Pipeline, staff: User, values: dict[str, Any], field: str) -> None:
    roles_ensure()
    runs = [submit(travel, [TIMEOUT, TIMEOUT]) for _ in range(2)]
    for run in runs:
        travel.record(run.event_id, [TIMEOUT, TIMEOUT, answer(values)])
    now = timezone.now()

    with travel.capture():
        batch = batch_create(
            action="retry",
            queue=Outcome.RETRY_EXHAUSTED,
            since=now - timedelta(hours=1),
            until=now + timedelta(minutes=1),
            user=staff,
            reason="the reader is back",
        )
    travel.drain()

    assert RecoveryBatch.objects.get(pk=batch.pk).done == 2
    for run in runs:
        assert_held_for(run, field)


def test_the_corrected_reading_goes_through_once_it_has_its_parameters(
    travel: Pipeline, ops_lead: User
) -> None:
    held = submit(travel, [answer({"amount": None})])

    with travel.capture():
        run_correct(run_id=held.pk, user=ops_lead, corrected=reading({}), reason="added it")
    travel.drain()

    assert Run.objects.get(pk=held.pk).state == State.COMPLETED
    assert Effect.objects.get(run=held).payload["params"]["booking"] == "HT-10442"


def test_resume_refuses_a_checkpoint_its_catalogue_lacks(travel: Pipeline, staff: User) -> None:
    """A stored reading that names an effect, a type or a route of another business is
    invalid for this run, not left to policy to catch."""
    roles_ensure()
    for other in (
        {"requested_effect": "create_follow_up"},
        {"category": "support"},
        {"recommended_route": "service_desk"},
    ):
        held = submit(travel, [TIMEOUT, TIMEOUT])
        checkpoint_import(run_id=held.pk, classification=reading({}, **other), actor_label="t")

        with travel.capture():
            result = run_resume(run_id=held.pk, user=staff, reason="read by hand")
        travel.drain()

        assert result == Outcome.CLASSIFICATION_INVALID
        run = Run.objects.get(pk=held.pk)
        assert run.state == State.NEEDS_REVIEW
        assert not Effect.objects.filter(run=run).exists()


# --- the rule, over readings and corrections a test cannot list -------------------------

VALUE = {
    "booking_ref": st.sampled_from(["HT-10442", "HT-1", "10442", "", "ht-10442 "]),
    "travel_date": st.sampled_from(["2026-12-03", "3 December 2026", "soon", "2026-02-30", ""]),
    "amount": st.sampled_from(["640.00 EUR", "640", "1.250,00 EUR", "12 XYZ", "EUR", ""]),
}
READINGS = st.fixed_dictionaries(
    {name: st.one_of(st.none(), values) for name, values in VALUE.items()}
)


@pytest.fixture
def travel_once(django_db_setup: None, django_db_blocker: Any) -> Iterator[Pipeline]:
    """The harbour business in a transaction rolled back after the property's examples."""
    from automation.models import IntakeChannel
    from policy.services import policy_ensure_defaults

    with django_db_blocker.unblock(), rolled_back():
        policy_ensure_defaults()
        roles_ensure()
        _store(TRAVEL)
        policy_version_activate(name="harbour-1")
        channel = IntakeChannel.objects.create(
            name="travel-property",
            workflow_version="workflow-1",
            prompt_version="prompt-1",
            max_classifier_attempts=2,
        )
        lead = User.objects.create_user("lead-property")
        lead.groups.add(Group.objects.get(name="ops-leads"))
        pipeline = Pipeline(channel)
        pipeline.lead = lead  # type: ignore[attr-defined]
        yield pipeline


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(read=READINGS, corrected=READINGS)
def test_no_path_writes_an_effect_its_catalogue_would_refuse(
    travel_once: Pipeline, read: dict[str, Any], corrected: dict[str, Any]
) -> None:
    """Read one way, then corrected by a person if it was held: whatever reaches the outbox
    has a booking of its pattern, a date and an amount with its currency."""
    run = submit(travel_once, [answer(read)])
    if Run.objects.get(pk=run.pk).state == State.NEEDS_REVIEW:
        try:
            with travel_once.capture():
                run_correct(
                    run_id=run.pk,
                    user=travel_once.lead,  # type: ignore[attr-defined]
                    corrected=reading(corrected),
                    reason="read by hand",
                )
            travel_once.drain()
        except CorrectionInvalid:
            pass
    run = Run.objects.get(pk=run.pk)
    effect = Effect.objects.filter(run=run).first()
    if effect is None:
        assert run.state == State.NEEDS_REVIEW
        assert run.failure_field.startswith(("fields.", "params."))
        return
    params = effect.payload["params"]
    assert _sendable(params), params
    assert run.state == State.COMPLETED


def _sendable(params: dict[str, Any]) -> bool:
    """What the catalogue asks of a refund's parameters, written out on their own."""
    amount = params.get("amount")
    if isinstance(amount, dict):
        has_currency = bool(amount.get("currency"))
    else:
        has_currency = bool(re.search(r"[0-9]\s*[A-Z]{3}$", str(amount or "")))
    try:
        parse_date(str(params.get("travel_date", "")))
    except ValueError:
        return False
    return bool(re.fullmatch("HT-[0-9]{5}", str(params.get("booking", "")))) and has_currency
