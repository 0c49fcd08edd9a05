"""The intake and run APIs as an OpenAPI 3.1 document, generated from the pydantic contracts.

Served at /api/v1/openapi.json. The request schema is the intake contract itself
(`schemas.IntakeEvent.model_json_schema`), so the document cannot drift from what the API
accepts; its examples are posted to the real API by the tests.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from automation.schemas import FieldProblem, IntakeEvent

REF = "#/components/schemas/{model}"

EXAMPLES: dict[str, dict[str, Any]] = {
    "support": {
        "summary": "A support request that asks for a follow-up",
        "value": {
            "event_id": "crm-2026-000123",
            "source": "web_form",
            "request_type": "support",
            "subject": "Cannot log in to the portal",
            "body": "Since this morning the password reset link does not arrive. "
            "Please create a follow-up.",
            "account_tier": "standard",
            "requested_action": "create_follow_up",
        },
    },
    "billing": {
        "summary": "A billing question for finance",
        "value": {
            "event_id": "crm-2026-000124",
            "source": "web_form",
            "request_type": "billing",
            "subject": "Invoice INV-4411 charged twice",
            "body": "We were charged twice for invoice INV-4411 (1,250.00 EUR). "
            "Please let finance know.",
            "account_tier": "priority",
            "requested_action": "send_internal_notification",
        },
    },
}

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


def _run_summary() -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["id", "event_id", "state", "outcome"],
        "properties": {
            "id": {"type": "integer"},
            "event_id": {"type": "string"},
            "state": {"type": "string", "description": "where the run is (received ... completed)"},
            "outcome": {"type": ["string", "null"], "description": "why it ended or waits"},
            "url": {
                "type": "string",
                "description": "this run's detail in the API; absent when this token may not "
                "read it",
            },
        },
    }


def _error() -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["error", "message"],
        "properties": {"error": {"type": "string"}, "message": {"type": "string"}},
    }


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


@lru_cache(maxsize=1)
def openapi_document() -> dict[str, Any]:
    schemas: dict[str, Any] = {
        "IntakeEvent": IntakeEvent.model_json_schema(ref_template=REF),
        "FieldProblem": FieldProblem.model_json_schema(ref_template=REF),
        "RunSummary": _run_summary(),
        "Error": _error(),
    }
    for name in ("IntakeEvent", "FieldProblem"):
        schemas.update(schemas[name].pop("$defs", {}))
    submitted = {
        "type": "object",
        "required": ["outcome", "intake_id"],
        "properties": {
            "outcome": {"type": "string"},
            "intake_id": {"type": "integer"},
            "run": {"$ref": REF.format(model="RunSummary")},
            "problems": {"type": "array", "items": {"$ref": REF.format(model="FieldProblem")}},
        },
    }
    error = {"$ref": REF.format(model="Error")}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Gatehouse intake API",
            "version": "v1",
            "description": "Send requests (JSON events or e-mail messages) and read the runs "
            "they started. Every request needs `Authorization: Bearer <token>`; a token "
            "names its intake channel.",
        },
        "servers": [{"url": "/"}],
        "security": [{"bearer": []}],
        "paths": {
            "/api/v1/events": {
                "post": {
                    "operationId": "submitEvent",
                    "summary": "Send one request",
                    "description": "The raw request is stored before it is validated. The same "
                    "event id again is answered as the run it started (200); the same id "
                    "with other content is a conflict (409).",
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {
                                "schema": {"$ref": REF.format(model="IntakeEvent")},
                                "examples": EXAMPLES,
                            },
                            "message/rfc822": {
                                "schema": {"type": "string"},
                                "examples": {
                                    "mail": {"summary": "An e-mail", "value": MAIL_EXAMPLE}
                                },
                            },
                        },
                    },
                    "responses": {
                        "202": _json(submitted, "accepted: a run started"),
                        "200": _json(submitted, "the same request again: its run"),
                        "400": _json(submitted, "not JSON at all"),
                        "401": _json(error, "no token, or an unknown or revoked one"),
                        "409": _json(submitted, "the event id was used for other content"),
                        "413": _json(error, "too large"),
                        "415": _json(error, "neither JSON nor an e-mail message"),
                        "422": _json(submitted, "invalid, or a request policy does not allow"),
                        "503": _json(error, "no policy is active yet"),
                    },
                }
            },
            "/api/v1/runs/{run_id}": {
                "get": {
                    "operationId": "getRun",
                    "summary": "What became of a run",
                    "parameters": [
                        {
                            "name": "run_id",
                            "in": "path",
                            "required": True,
                            "schema": {"type": "integer"},
                        }
                    ],
                    "responses": {
                        "200": _json(
                            {"$ref": REF.format(model="RunSummary")},
                            "the run, with its stages, versions and rules",
                        ),
                        "401": _json(error, "no token, or an unknown or revoked one"),
                        "404": _json(error, "no such run for this token's channel"),
                    },
                }
            },
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": schemas,
        },
    }
