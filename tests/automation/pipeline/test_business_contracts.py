"""Intake's contract and the classifier's output follow the catalogue of the version that
decides for the run: closed per version, open to any business."""

from __future__ import annotations

import json

import pytest
import yaml
from django.contrib.auth.models import Group
from django.test import Client

from automation.classifiers.openai_compatible import response_format, system_prompt
from automation.intake.services import api_token_create
from automation.models import Outcome, Run, State
from policy.services import parse_policy_text, policy_version_activate, policy_version_create
from tests.conftest import Pipeline
from tests.policy.test_catalogue import WARRANTY

CLAIM = {
    "event_id": "evt-claim-1",
    "source": "web_form",
    "request_type": "warranty_claim",
    "subject": "My kettle stopped working",
    "body": "It broke after two months. Serial SN-123456, bought on 2026-09-01.",
    "account_tier": "standard",
    "requested_action": "open_ticket",
}
READING = {
    "category": "warranty_claim",
    "recommended_route": "warranty_desk",
    "requested_effect": "open_ticket",
    "reason_code": "warranty_claim",
}


@pytest.fixture
def warranty(pipeline: Pipeline) -> Pipeline:
    """The test channel decided by the warranty business's version."""
    for name in ("warranty-approvers", "warranty-desk"):
        Group.objects.get_or_create(name=name)
    policy_version_create(document=parse_policy_text(yaml.safe_dump(WARRANTY)))
    pipeline.channel.policy_version = "warranty-1"
    pipeline.channel.save(update_fields=["policy_version"])
    return pipeline


def test_a_request_of_the_versions_business_is_taken_in_and_decided(warranty: Pipeline) -> None:
    read = {**READING, "fields": fields(serial_number="SN-123456", purchase_date="2026-09-01")}

    result = warranty.submit(CLAIM, [{"type": "decision", "value": read}])

    assert result.code == "accepted"
    run = Run.objects.get(pk=result.run.pk)
    assert run.state == State.APPROVAL_REQUIRED
    assert (run.route, run.effect_name, run.policy_version) == (
        "warranty_desk",
        "open_ticket",
        "warranty-1",
    )
    assert run.approvals.get().group == "warranty-approvers"


def test_a_request_type_the_version_does_not_list_is_invalid(warranty: Pipeline) -> None:
    result = warranty.submit({**CLAIM, "request_type": "support"})

    assert result.code == Outcome.INVALID_EVENT
    (problem,) = result.problems
    assert problem.field == "request_type"
    assert "must be one of" in problem.message
    assert "warranty_claim" in problem.message and "question" in problem.message
    assert "'support'" in problem.message  # what was sent, not what is allowed


def test_a_reading_that_names_another_business_is_invalid_output(warranty: Pipeline) -> None:
    other = {**READING, "category": "support", "recommended_route": "service_desk"}

    result = warranty.submit(CLAIM, [{"type": "decision", "value": other}] * 3)

    run = Run.objects.get(pk=result.run.pk)
    assert (run.state, run.outcome) == (State.NEEDS_REVIEW, Outcome.CLASSIFICATION_INVALID)
    problems = run.classifications.order_by("attempt").first().errors
    assert {p["field"] for p in problems} == {"category", "recommended_route"}


@pytest.mark.django_db
def test_the_api_answers_and_documents_with_the_active_versions_business(
    warranty: Pipeline,
) -> None:
    _, key = api_token_create(name="warranty", channel=warranty.channel)
    client = Client()

    refused = client.post(
        "/api/v1/events",
        json.dumps({**CLAIM, "request_type": "billing"}),
        content_type="application/json",
        headers={"authorization": f"Bearer {key}"},
    )
    assert refused.status_code == 422
    assert refused.json()["problems"][0]["field"] == "request_type"

    def documented() -> set[str]:
        document = client.get("/api/v1/openapi.json").json()
        event = document["components"]["schemas"]["IntakeEvent"]["properties"]
        return set(event["request_type"]["enum"])

    assert documented() == {"support", "billing", "sales", "security"}  # policy-1 is active
    policy_version_activate(name="warranty-1")
    assert documented() == {"warranty_claim", "question"}


def test_a_model_server_is_asked_for_the_versions_names_only() -> None:
    business = parse_policy_text(yaml.safe_dump(WARRANTY)).business

    shape = response_format("json_schema", business)

    assert shape is not None
    schema = shape["json_schema"]["schema"]["properties"]
    assert set(schema["category"]["enum"]) == {"warranty_claim", "question"}
    assert schema["recommended_route"]["const"] == "warranty_desk"  # one route: a constant
    assert set(schema["requested_effect"]["enum"]) == {"open_ticket", "reply_to_customer"}
    assert "warranty_claim" in system_prompt("text", business)


def fields(**values: str) -> dict[str, dict[str, object]]:
    return {name: {"value": value, "confidence": 0.9} for name, value in values.items()}


def test_the_effects_parameters_are_made_from_the_reading_and_approved_with_it(
    warranty: Pipeline,
) -> None:
    read = {**READING, "fields": fields(serial_number="SN-123456", purchase_date="2026-09-01")}

    result = warranty.submit(CLAIM, [{"type": "decision", "value": read}])

    request = Run.objects.get(pk=result.run.pk).approvals.get()
    assert request.effect_payload["params"] == {"serial": "SN-123456", "bought": "2026-09-01"}


@pytest.mark.parametrize(
    "found, field, words",
    [
        pytest.param(
            {"purchase_date": "2026-09-01"}, "fields.serial_number", "is needed for", id="missing"
        ),
        pytest.param(
            {"serial_number": "123456", "purchase_date": "2026-09-01"},
            "fields.serial_number",
            "does not look like a reference",
            id="malformed-reference",
        ),
        pytest.param(
            {"serial_number": "SN-123456", "purchase_date": "the ninth of Sept"},
            "fields.purchase_date",
            "purchase_date",
            id="malformed-date",
        ),
    ],
)
def test_a_missing_or_malformed_parameter_holds_the_run_for_correction(
    warranty: Pipeline, found: dict[str, str], field: str, words: str
) -> None:
    read = {**READING, "fields": fields(**found)}

    result = warranty.submit(CLAIM, [{"type": "decision", "value": read}])

    run = Run.objects.get(pk=result.run.pk)
    assert (run.state, run.outcome, run.failure_field) == (
        State.NEEDS_REVIEW,
        Outcome.EXTRACTION_INVALID,
        field,
    )
    assert words in run.failure_detail
    assert not run.effects.exists() and not run.approvals.exists()
