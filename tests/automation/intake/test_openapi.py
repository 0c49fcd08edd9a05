"""/api/v1/openapi.json: a valid OpenAPI 3.1 document, generated from the intake contract,
whose every example the real API accepts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from django.test import Client
from openapi_spec_validator import validate

from automation.api_schemas import OUTCOME_MEANINGS, STATE_MEANINGS
from automation.intake.services import api_token_create
from automation.models import IntakeChannel, Outcome, State
from automation.schemas import IntakeEvent

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
            run = response.json()["run"]
            assert run["state"] == "received"
            assert run["links"]["run_page"] == f"http://testserver/runs/{run['id']}/"
            sent += 1
    assert sent >= 3


# --- the answers: documented by their contracts, and the real ones meet them ---------------


def answer_schema(spec: dict, path: str, method: str, status: int) -> dict:
    """The document's schema for one answer, its references resolvable in place."""
    media = spec["paths"][path][method]["responses"][str(status)]["content"]["application/json"]
    return {**media["schema"], "components": spec["components"]}


def assert_documented(spec: dict, path: str, method: str, response: Any) -> dict:
    body = response.json()
    schema = answer_schema(spec, path, method, response.status_code)
    jsonschema.validate(body, schema, cls=jsonschema.Draft202012Validator)
    return body


def test_every_answer_example_meets_its_documented_schema(client: Client) -> None:
    spec = document(client)
    checked = 0
    for path, methods in spec["paths"].items():
        for method, operation in methods.items():
            for status, answer in operation["responses"].items():
                media = answer["content"]["application/json"]
                assert media.get("examples"), (path, status)  # every answer shows one
                for example in media["examples"].values():
                    schema = answer_schema(spec, path, method, int(status))
                    jsonschema.validate(example["value"], schema)
                    checked += 1
    assert checked >= 12


def test_the_real_answers_meet_the_document_and_link_to_the_run_page(
    client: Client, key: str
) -> None:
    spec = document(client)
    headers = {"authorization": f"Bearer {key}"}
    example = spec["paths"]["/api/v1/events"]["post"]["requestBody"]["content"]
    event = next(iter(example["application/json"]["examples"].values()))["value"]

    sent = client.post(
        "/api/v1/events", data=json.dumps(event), content_type="application/json", headers=headers
    )
    again = client.post(
        "/api/v1/events", data=json.dumps(event), content_type="application/json", headers=headers
    )
    invalid = client.post(
        "/api/v1/events",
        data=json.dumps({**event, "event_id": "other", "source": "fax"}),
        content_type="application/json",
        headers=headers,
    )

    run_id = assert_documented(spec, "/api/v1/events", "post", sent)["run"]["id"]
    for answer in (again, invalid):
        assert_documented(spec, "/api/v1/events", "post", answer)
    assert (again.status_code, invalid.status_code) == (200, 422)
    detail = client.get(f"/api/v1/runs/{run_id}", headers=headers)
    body = assert_documented(spec, "/api/v1/runs/{run_id}", "get", detail)
    assert body["links"]["run_page"] == f"http://testserver/runs/{run_id}/"
    assert sent.json()["run"]["links"] == body["links"]
    missing = client.get(f"/api/v1/runs/{run_id + 1000}", headers=headers)
    assert_documented(spec, "/api/v1/runs/{run_id}", "get", missing)
    assert_documented(spec, "/api/v1/runs/{run_id}", "get", client.get(f"/api/v1/runs/{run_id}"))


def test_the_document_describes_the_run_page_link(client: Client) -> None:
    schemas = document(client)["components"]["schemas"]

    links = schemas["RunSummary"]["properties"]["links"]
    assert links["$ref"] == "#/components/schemas/RunLinks"
    page = schemas["RunLinks"]["properties"]["run_page"]
    assert (page["type"], page["format"]) == ("string", "uri")
    assert "console" in page["description"]
    assert "links" in schemas["RunDetail"]["properties"]


def test_every_field_of_the_contract_is_described(client: Client) -> None:
    contract = document(client)["components"]["schemas"]["IntakeEvent"]

    assert all(field["description"] for field in contract["properties"].values())


@pytest.mark.parametrize(
    ("meanings", "codes"),
    [(STATE_MEANINGS, State), (OUTCOME_MEANINGS, Outcome)],
    ids=["state", "outcome"],
)
def test_every_state_and_outcome_code_has_its_meaning_for_integrators(
    meanings: dict[str, str], codes: type[State] | type[Outcome]
) -> None:
    """A closed set both ways: no code without a meaning, no meaning for a code not there."""
    assert set(meanings) == set(codes.values)
    assert all(meaning.strip() for meaning in meanings.values())


def test_the_document_lists_each_state_and_outcome_with_its_meaning(client: Client) -> None:
    run = document(client)["components"]["schemas"]["RunSummary"]["properties"]

    for field, meanings in (("state", STATE_MEANINGS), ("outcome", OUTCOME_MEANINGS)):
        listed = {c["const"]: c["description"] for c in run[field]["oneOf"] if "const" in c}
        assert listed == meanings, field


def test_the_document_names_its_page_for_people(client: Client) -> None:
    spec = document(client)

    assert spec["externalDocs"]["url"] == "http://testserver/integrators/api/"
    assert client.get(spec["externalDocs"]["url"]).status_code == 200


# --- the document driven against the live server -------------------------------------------

REPO = Path(__file__).resolve().parents[3]
SEED = 27  # fixed: the same requests every run, so a failure is reproducible
EXAMPLES = 25  # per operation and phase: bounded, about a minute on a busy machine


@pytest.mark.django_db(transaction=True)
def test_schemathesis_finds_no_failure_against_the_live_server(
    key: str, live_server: Any, tmp_path: Path
) -> None:
    """Every check schemathesis has (no server error; each status, header, content type and
    body as documented; data the document calls valid accepted and invalid refused; other
    methods refused with 405 and Allow; auth required), in every phase (the examples, the
    schema's boundaries, fuzzing, and sequences that follow the links between operations),
    against the live test server on 127.0.0.1. How to make an e-mail: tests/schemathesis_hooks."""
    command = [sys.executable, "-m", "schemathesis.cli", "run", "--checks", "all"]
    command += ["--seed", str(SEED), "--max-examples", str(EXAMPLES), "--workers", "1"]
    command += ["--header", f"Authorization: Bearer {key}", "--warnings", "off"]
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "tests.schemathesis_hooks", "PYTHONPATH": str(REPO)}

    result = subprocess.run(  # noqa: S603 - our own interpreter, fixed arguments
        [*command, f"{live_server.url}/api/v1/openapi.json"],
        cwd=tmp_path,  # where it keeps its cache
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )

    assert result.returncode == 0, result.stdout[-20_000:] + result.stderr[-5_000:]
    assert "Test cases:" in result.stdout and " passed" in result.stdout
