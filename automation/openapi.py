"""The intake and run APIs as an OpenAPI 3.1 document, generated from the pydantic contracts.

Served at /api/v1/openapi.json, and as a page for people at /integrators/api/
(console/views/integrators.py, rendered from this same document). The request schema is the
intake contract itself (`schemas.IntakeEvent.model_json_schema`) and the response schemas are
the answers' contracts (`api_schemas`), so the document cannot drift from what the API accepts
and says; the tests post its request examples to the real API and check its answers, and its
response examples, against these schemas.
"""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter

from automation.api_schemas import (
    ERROR_MEANINGS,
    LENGTH_REQUIRED,
    ApiError,
    ErrorAnswer,
    RunDetail,
    SubmitAnswer,
)
from automation.schemas import intake_contract
from policy.catalogue import Catalogue, reference_catalogue

REF = "#/components/schemas/{model}"

# A catalogue without a `tier` attribute takes any tier name: its examples send this one.
ANY_TIER = "default"


def event_examples(business: Catalogue) -> dict[str, dict[str, Any]]:
    """Two events of the catalogue's own request types, tiers and effects (its first ones
    and its last ones), keyed by their request types."""
    types = list(business.request_types.items())
    effects = list(business.effects.items())
    tiers = business.tier_values() or [ANY_TIER]
    picks = [(types[0], tiers[0], effects[0]), (types[-1], tiers[-1], effects[-1])]
    examples: dict[str, dict[str, Any]] = {}
    for number, ((kind, spec), tier, (effect, effect_spec)) in enumerate(picks, start=123):
        examples.setdefault(
            kind,
            {
                "summary": f"A request of type “{spec.label}” that asks: {effect_spec.label}",
                "value": {
                    "event_id": f"crm-2026-000{number}",
                    "source": "web_form",
                    "request_type": kind,
                    "subject": f"{spec.label}: a question from a customer",
                    "body": f"{spec.description} Please: {effect_spec.label.lower()}.",
                    "account_tier": tier,
                    "requested_action": effect,
                },
            },
        )
    return examples


MAIL_EXAMPLE = (
    "From: Ana Ortiz <ana@example.com>\r\n"
    "To: requests@gatehouse.test\r\n"
    "Subject: Quote for 40 more seats\r\n"
    "Message-ID: <quote-2026-001@example.com>\r\n"
    "Date: Tue, 01 Dec 2026 09:00:00 +0000\r\n"
    "Content-Type: text/plain; charset=utf-8\r\n"
    "\r\n"
    "Hello, could you send us a quote for 40 more seats?\r\n"
)


# The intake contract's fields, described for integrators (a test holds that each field of
# IntakeEvent has its sentence here).
INTAKE_FIELDS: dict[str, str] = {
    "event_id": "Your id for this request, unique within your channel. The same id again "
    "with the same content is answered as a replay (200); with other content, as a "
    "conflict (409).",
    "source": "Where the request came from.",
    "request_type": "What the request is about, as the sender says. The classifier reads the "
    "text as well, and policy checks that the two agree.",
    "subject": "The request's subject line.",
    "body": "The request's text, as the customer wrote it.",
    "account_tier": "The customer's tier, one of the business's tiers (listed in the schema): "
    "amount limits and approvals may differ by tier.",
    "requested_action": "The effect the sender asks for, one of the business's effects "
    "(listed in the schema). Any other action is answered `unsupported_request` (422), not as "
    "invalid.",
}

MAIL_BODY = (
    "One e-mail message (RFC 5322), its raw bytes. Its Message-ID is its identity on every "
    "path that takes mail (a message without one is known by the SHA-256 of its bytes); "
    "the classifier reads what it asks for."
)

HOST = "https://gatehouse.example.com"


def _run(run_id: int, event_id: str, state: str, outcome: str | None) -> dict[str, Any]:
    return {
        "id": run_id,
        "event_id": event_id,
        "state": state,
        "outcome": outcome,
        "url": f"/api/v1/runs/{run_id}",
        "links": {"run_page": f"{HOST}/runs/{run_id}/"},
    }


def _example(summary: str, value: Any) -> dict[str, Any]:
    return {"summary": summary, "value": value}


def _refusal(code: ApiError, summary: str, message: str) -> dict[str, Any]:
    return {code.value: _example(summary, {"error": code, "message": message})}


SUBMITTED_EXAMPLES: dict[str, dict[str, Any]] = {
    "202": {
        "accepted": _example(
            "A run started",
            {
                "outcome": "accepted",
                "intake_id": 41,
                "run": _run(123, "crm-2026-000123", "received", None),
            },
        )
    },
    "200": {
        "replay": _example(
            "The same request again: the run it started, as it is now",
            {
                "outcome": "idempotent_replay",
                "intake_id": 44,
                "run": _run(123, "crm-2026-000123", "completed", "completed"),
            },
        )
    },
    "400": {
        "malformed": _example(
            "Not JSON at all",
            {
                "outcome": "invalid_event",
                "intake_id": 42,
                "run": _run(124, "", "failed", "invalid_event"),
                "problems": [
                    {
                        "field": "body",
                        "message": "is not valid JSON: Expecting property name enclosed in "
                        "double quotes: line 1 column 33 (char 32)",
                    }
                ],
            },
        )
    },
    "409": {
        "conflict": _example(
            "An event id used before for other content",
            {
                "outcome": "idempotency_conflict",
                "intake_id": 45,
                "run": _run(123, "crm-2026-000123", "completed", "completed"),
                "problems": [
                    {"field": "event_id", "message": "was already used for different content"}
                ],
            },
        )
    },
    "422": {
        "invalid": _example(
            "Two fields that do not meet the contract",
            {
                "outcome": "invalid_event",
                "intake_id": 43,
                "run": _run(125, "crm-2026-000125", "failed", "invalid_event"),
                "problems": [
                    {
                        "field": "source",
                        "message": "must be one of web_form or partner_portal (it was 'fax')",
                    },
                    {"field": "body", "message": "must not be empty"},
                ],
            },
        ),
        "unsupported": _example(
            "An action policy does not allow",
            {
                "outcome": "unsupported_request",
                "intake_id": 46,
                "run": _run(126, "crm-2026-000126", "failed", "unsupported_request"),
            },
        ),
    },
}

STAGES = [
    ("intake", "accepted"),
    ("validate", "ok"),
    ("normalize", "ok"),
    ("enrich", "ok"),
    ("classify", "ok"),
    ("decide", "authorized"),
    ("execute", "delivered"),
    ("complete", "ok"),
]


def run_detail_example(business: Catalogue) -> dict[str, Any]:
    """A finished run of the catalogue's first request type, route and effect."""
    kind, route = next(iter(business.request_types)), next(iter(business.routes))
    effect = next(iter(business.effects))
    return {
        **_run(123, "crm-2026-000123", "completed", "completed"),
        "failure": None,
        "fingerprint": "37b75e8ee927072db7fcfd99ac69eac62166bd415b5ae9365f85d4d5321f5360",
        "versions": {
            "workflow": "workflow-1",
            "classifier": "heuristic-1",
            "prompt": "prompt-1",
            "policy": "default-1",
        },
        "classification": {
            "category": kind,
            "recommended_route": route,
            "requested_effect": effect,
            "reason_code": f"{kind}_request",
            "confidence": 0.92,
            "fields": {},
        },
        "route": route,
        "effect": effect,
        "rules": [
            {
                "rule_id": f"allowlist.{effect}",
                "passed": True,
                "text": f"requested action {effect!r} is in the allowlist",
            },
            {
                "rule_id": f"route.{kind}",
                "passed": True,
                "text": f"route {route!r} must be {route!r} for {kind!r}",
            },
        ],
        "created_at": "2026-12-01T09:00:00.120000+00:00",
        "finished_at": "2026-12-01T09:00:01.480000+00:00",
        "stages": [
            {
                "stage": stage,
                "attempt": 1,
                "started_at": f"2026-12-01T09:00:{second:02d}.{100000 + second:06d}+00:00",
                "duration_ms": 140 if stage == "classify" else 3,
                "outcome": outcome,
                "error_class": "",
            }
            for second, (stage, outcome) in enumerate(STAGES)
        ],
        "checkpoints": 4,
    }


UNAUTHENTICATED = _refusal(
    ApiError.UNAUTHENTICATED, "No token sent", "send 'Authorization: Bearer <token>'"
)


def _refusals(error: dict[str, Any], method: str) -> dict[str, Any]:
    """The answers every API address may give besides its own: another method (405), an
    address that cannot be read (400) and a failure of Gatehouse itself (500). Each is in the
    error shape, as every answer under /api/ is (automation.api.ApiErrorsAsJsonMiddleware)."""
    return {
        "405": _json(
            error,
            f"This address takes {method} only: any other method is refused, with an `Allow` "
            "header that names it.",
            _refusal(
                ApiError.METHOD_NOT_ALLOWED, "Another method", f"this address takes {method} only"
            ),
        ),
        "500": _json(
            error,
            "Gatehouse failed to answer: send the request again later.",
            _refusal(
                ApiError.SERVER_ERROR,
                "A failure on Gatehouse's side",
                f"HTTP 500: {ERROR_MEANINGS[ApiError.SERVER_ERROR]}",
            ),
        ),
    }


UNREADABLE = _refusal(
    ApiError.BAD_REQUEST,
    "A NUL character in the address",
    f"HTTP 400: {ERROR_MEANINGS[ApiError.BAD_REQUEST]}",
)

# What a text field of an event may hold: at least one character that is not white space
# (the contract refuses a blank one) and no NUL (PostgreSQL cannot store it; nor a lone
# surrogate, which no Unicode string holds). White space is what Python's `re` and the
# contract's str.strip() call white space.
STORED_TEXT = r"^[^\u0000]*[^\s\u0000][^\u0000]*$"
TEXT_FIELDS = ("event_id", "subject", "body", "requested_action")


def _json(
    schema: dict[str, Any], description: str, examples: dict[str, Any] | None = None
) -> dict[str, Any]:
    media: dict[str, Any] = {"schema": schema}
    if examples:
        media["examples"] = examples
    return {"description": description, "content": {"application/json": media}}


def _components(business: Catalogue) -> dict[str, Any]:
    """Every schema, each generated from its pydantic contract; nested ones under their own
    names. The event's request types and account tiers are the catalogue's."""
    schemas: dict[str, Any] = {}
    for name, contract in {
        "IntakeEvent": intake_contract(business),
        "Submitted": SubmitAnswer,
        "RunDetail": RunDetail,
        "Error": ErrorAnswer,
    }.items():
        schema = TypeAdapter(contract).json_schema(ref_template=REF)
        schemas.update(schema.pop("$defs", {}))
        schemas[name] = schema
    event = schemas["IntakeEvent"]["properties"]
    for field, description in INTAKE_FIELDS.items():
        event[field]["description"] = description
    for field in TEXT_FIELDS:
        event[field]["pattern"] = STORED_TEXT
    # Open in the contract (an action outside the allowlist is kept, with an
    # `unsupported_request` run), but only these are ever performed.
    event["requested_action"]["enum"] = list(business.effects)
    problem = schemas["FieldProblem"]
    problem["description"] = "One thing wrong with the request."
    problem["properties"]["field"]["description"] = (
        "The field, as a dotted path for a nested one (`extra.list.1`); `body` for the "
        "request as a whole, `message` or a header's name for an e-mail."
    )
    problem["properties"]["message"]["description"] = "What is wrong with it."
    return schemas


def openapi_document(business: Catalogue | None = None) -> dict[str, Any]:
    """The API's OpenAPI document, its closed sets those of `business` (the catalogue of the
    version active now; the reference catalogue when none is given)."""
    business = business if business is not None else reference_catalogue()
    # Its examples also say the names' labels and descriptions: the whole catalogue decides.
    key = business.model_dump_json()
    if key not in _DOCUMENTS:
        if len(_DOCUMENTS) >= 8:
            _DOCUMENTS.clear()
        _DOCUMENTS[key] = _document(business)
    return _DOCUMENTS[key]


# Documents by the catalogue they were made for.
_DOCUMENTS: dict[str, dict[str, Any]] = {}


def _document(business: Catalogue) -> dict[str, Any]:
    submitted = {"$ref": REF.format(model="Submitted")}
    error = {"$ref": REF.format(model="Error")}
    answers = SUBMITTED_EXAMPLES
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Gatehouse intake API",
            "version": "v1",
            "description": "Send requests (JSON events or e-mail messages) and read the runs "
            "they started. Every request needs `Authorization: Bearer <token>`; a token "
            "names its intake channel. Every answer about a run links to the run's page in "
            "the console, for the people who follow it up.",
        },
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}],
        "paths": {
            "/api/v1/events": {
                "post": {
                    "operationId": "submitEvent",
                    "summary": "Send one request",
                    "description": "The raw request is stored before it is validated, and a "
                    "run is started for it. The same event id again is answered as the run it "
                    "started (200); the same id with other content is a conflict (409). A "
                    "request that is refused for its content is kept with a failed run, so "
                    "its answer names that run too. A body sent in chunks "
                    "(`Transfer-Encoding: chunked`, no `Content-Length`) is read, within the "
                    "same size limit, by Gatehouse under gunicorn, its production server; the "
                    "development server (`manage.py runserver`) cannot read one and answers 411 "
                    "before anything is stored.",
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {
                                "schema": {"$ref": REF.format(model="IntakeEvent")},
                                "examples": event_examples(business),
                            },
                            "message/rfc822": {
                                "schema": {
                                    "type": "string",
                                    "format": "email-message",
                                    "description": MAIL_BODY,
                                },
                                "examples": {
                                    "mail": {"summary": "An e-mail", "value": MAIL_EXAMPLE}
                                },
                            },
                        },
                    },
                    "responses": {
                        "202": _json(submitted, "Accepted: a run started.", answers["202"]),
                        "200": _json(submitted, "Sent before: the run it started.", answers["200"]),
                        "400": _json(
                            {"oneOf": [submitted, error]},
                            "Not JSON at all (or nested or numbered past the limits): kept "
                            "with a failed run. Or an address that cannot be read: nothing "
                            "stored.",
                            {**answers["400"], **UNREADABLE},
                        ),
                        "401": _json(error, "No valid token.", UNAUTHENTICATED),
                        "409": _json(
                            submitted,
                            "The event id was used before for other content.",
                            answers["409"],
                        ),
                        "413": _json(
                            error,
                            "Too large.",
                            _refusal(
                                ApiError.TOO_LARGE,
                                "An event over the limit",
                                "a request sent as application/json is at most 65536 bytes",
                            ),
                        ),
                        "411": _json(
                            error,
                            "Sent in chunks to a server that cannot read them: nothing stored.",
                            _refusal(ApiError.LENGTH_REQUIRED, "A chunked body", LENGTH_REQUIRED),
                        ),
                        "415": _json(
                            error,
                            "Neither JSON nor an e-mail.",
                            _refusal(
                                ApiError.UNSUPPORTED_MEDIA_TYPE,
                                "Sent as text/plain",
                                "send an event as application/json or an e-mail message as "
                                "message/rfc822",
                            ),
                        ),
                        "422": _json(
                            submitted,
                            "Invalid, or an action policy does not allow: kept with a failed run.",
                            answers["422"],
                        ),
                        "503": _json(
                            error,
                            "No policy is active yet: the request was kept, not decided.",
                            _refusal(
                                ApiError.NO_ACTIVE_POLICY,
                                "Before an operator loaded a policy",
                                "no policy version is active, so nothing can be taken in: an "
                                "operator runs `manage.py load_policy`; send the event again "
                                "then",
                            ),
                        ),
                        **_refusals(error, "POST"),
                    },
                }
            },
            "/api/v1/runs/{run_id}": {
                "get": {
                    "operationId": "getRun",
                    "summary": "What became of a run",
                    "description": "The run's state and outcome, what failed if it failed, "
                    "the versions and rules its decision was made with, and how long each "
                    "stage took. A token reads the runs of its own channel only.",
                    "parameters": [
                        {
                            "name": "run_id",
                            "in": "path",
                            "required": True,
                            "description": "The run's id, as the answer to sending named it.",
                            "schema": {"type": "integer", "minimum": 0},
                            "example": 123,
                        }
                    ],
                    "responses": {
                        "200": _json(
                            {"$ref": REF.format(model="RunDetail")},
                            "The run, with its stages, versions and rules.",
                            {
                                "completed": _example(
                                    "A run that is done", run_detail_example(business)
                                )
                            },
                        ),
                        "400": _json(error, "An address that cannot be read.", UNREADABLE),
                        "401": _json(error, "No valid token.", UNAUTHENTICATED),
                        "404": _json(
                            error,
                            "No such run for this token, or no such address (a run id is a "
                            "number).",
                            {
                                **_refusal(
                                    ApiError.NOT_FOUND,
                                    "Another channel's run, or none",
                                    "no such run for this token",
                                ),
                                "address": _example(
                                    "A run id that is not a number",
                                    {
                                        "error": ApiError.NOT_FOUND,
                                        "message": "no such address in the API: "
                                        "/api/v1/openapi.json lists them",
                                    },
                                ),
                            },
                        ),
                        **_refusals(error, "GET"),
                    },
                }
            },
        },
        "components": {
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "A token an operator issued for your channel "
                    "(`manage.py issue_token`), sent as `Authorization: Bearer <token>`. "
                    "Only its SHA-256 is stored; a revoked token is refused (401).",
                }
            },
            "schemas": _components(business),
        },
    }
