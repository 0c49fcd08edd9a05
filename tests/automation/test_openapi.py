"""/api/v1/openapi.json: a valid OpenAPI 3.1 document, generated from the intake contract,
whose every example the real API accepts."""

from __future__ import annotations

import json

import pytest
from django.test import Client
from openapi_spec_validator import validate

from automation.models import IntakeChannel
from automation.schemas import IntakeEvent
from automation.services import api_token_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def key(channel: IntakeChannel) -> str:
    return api_token_create(name="partner", channel=channel)[1]


def document(client: Client) -> dict:
    response = client.get("/api/v1/openapi.json")
    assert response.status_code == 200
    return response.json()


def test_the_document_is_valid_openapi_3_1_and_follows_the_contract(client: Client) -> None:
    spec = document(client)
    validate(spec)  # raises on any departure from OpenAPI 3.1
    assert spec["openapi"] == "3.1.0"
    contract = spec["components"]["schemas"]["IntakeEvent"]
    assert set(contract["required"]) == set(IntakeEvent.model_fields)
    assert contract["additionalProperties"] is False


def test_every_example_is_accepted_by_the_real_api(client: Client, key: str) -> None:
    body = document(client)["paths"]["/api/v1/events"]["post"]["requestBody"]["content"]
    sent = 0
    for content_type, media in body.items():
        for example in media["examples"].values():
            value = example["value"]
            raw = json.dumps(value) if content_type == "application/json" else value
            response = client.post(
                "/api/v1/events",
                data=raw,
                content_type=content_type,
                HTTP_AUTHORIZATION=f"Bearer {key}",
            )
            assert response.status_code == 202, (example["summary"], response.content)
            assert response.json()["run"]["state"] == "received"
            sent += 1
    assert sent >= 3
