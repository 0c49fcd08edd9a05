"""What the integrators' API answers, as pydantic contracts.

The selectors build these dicts (mypy checks their keys), automation.openapi publishes their
JSON Schema, and the tests validate the real answers against that document. Every code an
answer carries is listed with what it means, in words an integrator reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Annotated, Any, NotRequired

from pydantic import ConfigDict, Field, WithJsonSchema, with_config
from typing_extensions import TypedDict

from automation.runs.models import State
from automation.schemas import FieldProblem
from core.codes import Outcome

CLOSED = ConfigDict(extra="forbid")


class ApiError(StrEnum):
    UNAUTHENTICATED = "unauthenticated"
    UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"
    TOO_LARGE = "too_large"
    LENGTH_REQUIRED = "length_required"
    NO_ACTIVE_POLICY = "no_active_policy"
    NOT_FOUND = "not_found"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    BAD_REQUEST = "bad_request"
    SERVER_ERROR = "server_error"


# What a 411 says: a chunked body reached a server that passes the chunks on undecoded.
LENGTH_REQUIRED = (
    "send the body with a Content-Length header: this server does not read a chunked body"
)

ERROR_MEANINGS: dict[str, str] = {
    ApiError.UNAUTHENTICATED: "No `Authorization: Bearer <token>` header, or a token that is "
    "unknown or was revoked. Nothing was stored.",
    ApiError.UNSUPPORTED_MEDIA_TYPE: "The body is neither `application/json` (an event) nor "
    "`message/rfc822` (an e-mail). Nothing was stored.",
    ApiError.TOO_LARGE: "The body is larger than its content type allows (the message states "
    "the limit in bytes). Nothing was stored.",
    ApiError.LENGTH_REQUIRED: "The body was sent in chunks (`Transfer-Encoding: chunked`) to "
    "a server that cannot read them: send it with a `Content-Length` header. Nothing was "
    "stored.",
    ApiError.NO_ACTIVE_POLICY: "No policy is active yet, so nothing can be decided. The "
    "request was kept; send it again once an operator has loaded a policy.",
    ApiError.NOT_FOUND: "No run with this id came in through this token's channel, or no "
    "such address in the API (a run id is a number).",
    ApiError.METHOD_NOT_ALLOWED: "This address does not take this method: the `Allow` header "
    "names the ones it takes. Nothing was stored.",
    ApiError.BAD_REQUEST: "The request could not be read at all (for example a NUL character "
    "in its address). Nothing was stored.",
    ApiError.SERVER_ERROR: "Gatehouse failed to answer: nothing to correct on your side. Send "
    "the request again later; an event sent again is answered as the run it started.",
}

ACCEPTED = "accepted"
SUBMIT_MEANINGS: dict[str, str] = {
    ACCEPTED: "A new request: its run started and goes on in the background. Follow it at "
    "`run.url`, or open `run.links.run_page` in the console.",
    Outcome.IDEMPOTENT_REPLAY: "Received before (the same event id, or the same e-mail, with "
    "the same content): the answer names the run it started, and nothing runs again.",
    Outcome.IDEMPOTENCY_CONFLICT: "The event id was used before for other content: refused, "
    "and `problems` names `event_id`. Send new content under a new id.",
    Outcome.INVALID_EVENT: "The request does not meet the contract, or is not JSON at all: it "
    "is kept with a failed run, and `problems` names each field and what is wrong with it.",
    Outcome.UNSUPPORTED_REQUEST: "Well formed, but policy does not allow the requested action: "
    "it is kept with a failed run, and nothing is done.",
}


def codes(meanings: Mapping[str, str], *, nullable: bool = False) -> WithJsonSchema:
    """A closed set of codes, each with its meaning (JSON Schema `oneOf` of `const`s)."""
    one_of: list[dict[str, Any]] = [{"const": c, "description": m} for c, m in meanings.items()]
    if nullable:
        one_of.append({"type": "null", "description": "none (yet)"})
    return WithJsonSchema({"type": ["string", "null"] if nullable else "string", "oneOf": one_of})


# Where a run is, and why it ended or waits: written for the integrator reading an answer, in
# this module like ERROR_MEANINGS (the console's words for the same codes are its own).
STATE_MEANINGS: dict[str, str] = {
    State.RECEIVED: "Stored as it arrived; nothing has been checked yet.",
    State.VALIDATED: "The request's shape and identity were checked.",
    State.NORMALIZED: "The request's text and fields were put in one form and fingerprinted.",
    State.ENRICHED: "The customer and account were looked up; the request is read next.",
    State.CLASSIFIED: "The request was read; policy decides what happens next.",
    State.APPROVAL_REQUIRED: "Policy requires a person to approve the effect first: the run "
    "waits for their decision.",
    State.APPROVED: "A person approved the effect; it is delivered next.",
    State.EXECUTING: "The effect is being delivered to the system that carries it out.",
    State.COMPLETED: "Final: the effect was delivered, or a person finished the request by hand.",
    State.BLOCKED: "Final: a policy rule refused the effect, and nothing was done.",
    State.NEEDS_REVIEW: "Held until a person corrects or recovers the run; `outcome` says why.",
    State.FAILED: "Final: the run ended without its effect (refused, rejected or abandoned); "
    "`outcome` says why.",
}

OUTCOME_MEANINGS: dict[str, str] = {
    Outcome.COMPLETED: "The run finished and its effect happened.",
    Outcome.IDEMPOTENT_REPLAY: "The same request was sent again; the first answer was repeated.",
    Outcome.IDEMPOTENCY_CONFLICT: "Different content reused an event id already taken; it was "
    "refused.",
    Outcome.INVALID_EVENT: "The request was malformed or missing required parts.",
    Outcome.UNSUPPORTED_REQUEST: "The request asked for something the active policy does not "
    "allow.",
    Outcome.CLASSIFICATION_INVALID: "The classifier's reading of the request did not fit the "
    "expected shape; a person checks it.",
    Outcome.EXTRACTION_INVALID: "A field read from the request failed its checks; a person "
    "checks it.",
    Outcome.LOW_CONFIDENCE: "The reading of the request was less sure than the policy "
    "requires; a person checks it.",
    Outcome.RISK_SIGNAL: "The request mentions something policy wants a person to read first.",
    Outcome.RETRY_EXHAUSTED: "The classifier failed every attempt it was given; the run waits "
    "for a person.",
    Outcome.POLICY_BLOCK: "A policy rule refused the effect.",
    Outcome.APPROVAL_STALE: "The run or the policy changed after the approval; a fresh approval "
    "is needed.",
    Outcome.APPROVAL_EXPIRED: "Nobody decided before the approval's deadline.",
    Outcome.APPROVAL_REJECTED: "An approver rejected the effect.",
    Outcome.SENT_BACK: "An approver sent the request back; a person corrects the reading and "
    "it is decided again.",
    Outcome.EFFECT_UNAVAILABLE: "The system that carries out the effect could not be reached "
    "within its attempts.",
    Outcome.EFFECT_REJECTED: "The system that carries out the effect refused it.",
    Outcome.EFFECT_UNCERTAIN: "It is not known whether the system carried out the effect; the "
    "run is held for a person to check.",
    Outcome.STATE_CONFLICT: "The run was not in a state where that step could be done.",
}


@with_config(CLOSED)
class RunLinks(TypedDict):
    """Addresses for people."""

    run_page: Annotated[
        str,
        Field(
            description="The run's page in the Gatehouse console, for a person who signs in "
            "with a role that may read runs: its history, decisions, rules and effects.",
            json_schema_extra={"format": "uri"},
        ),
    ]


@with_config(CLOSED)
class RunSummary(TypedDict):
    """A run, in short: where it is and why it ended or waits."""

    id: Annotated[int, Field(description="The run's id: GET /api/v1/runs/{id} reads it.")]
    event_id: Annotated[
        str,
        Field(
            description="The request's identity: your `event_id`, an e-mail's Message-ID "
            "(without the angle brackets), or `sha256:<hash>` for a message without one."
        ),
    ]
    state: Annotated[
        str, codes(STATE_MEANINGS), Field(description="Where the run is now (received ... done).")
    ]
    outcome: Annotated[
        str | None,
        codes(OUTCOME_MEANINGS, nullable=True),
        Field(description="Why the run ended or waits; null while it is under way."),
    ]
    url: NotRequired[
        Annotated[
            str,
            Field(
                description="This run's detail in the API (relative). Absent when this token "
                "may not read the run: an e-mail another path took in."
            ),
        ]
    ]
    links: NotRequired[
        Annotated[
            RunLinks,
            Field(description="Pages for people; absent when this token may not read the run."),
        ]
    ]


@with_config(CLOSED)
class RunFailure(TypedDict):
    """What made a run fail."""

    field: Annotated[str, Field(description="The field that failed, e.g. `source`.")]
    detail: Annotated[str, Field(description="Why, as the run recorded it.")]


@with_config(CLOSED)
class RunVersions(TypedDict):
    """Everything the decision was made with: the same versions reproduce it."""

    workflow: Annotated[str, Field(description="The steps the run went through.")]
    classifier: Annotated[str, Field(description="What read the request.")]
    prompt: Annotated[str, Field(description="The instructions the classifier read it with.")]
    policy: Annotated[
        str | None, Field(description="The policy that decided; null when none did (invalid).")
    ]


@with_config(CLOSED)
class StageTiming(TypedDict):
    """One stage of the run, timed."""

    stage: Annotated[
        str, Field(description="intake, validate, normalize, enrich, classify, decide, ...")
    ]
    attempt: Annotated[int, Field(description="1, or more when the stage was tried again.")]
    started_at: Annotated[
        str, Field(description="When it started.", json_schema_extra={"format": "date-time"})
    ]
    duration_ms: Annotated[int, Field(description="How long it took, in milliseconds.")]
    outcome: Annotated[str, Field(description="How it ended, e.g. ok, delivered, held.")]
    error_class: Annotated[str, Field(description="The error's class, empty when none.")]


@with_config(CLOSED)
class RunDetail(RunSummary):
    """A run in full: its failure, versions, reading, route, rules and timed stages."""

    failure: Annotated[
        RunFailure | None, Field(description="What failed, for a failed run; else null.")
    ]
    fingerprint: Annotated[
        str, Field(description="SHA-256 of the normalized request; empty for an invalid one.")
    ]
    versions: RunVersions
    classification: Annotated[
        dict[str, Any] | None, Field(description="The classifier's reading, once read.")
    ]
    route: Annotated[str | None, Field(description="The team policy routed the run to.")]
    effect: Annotated[str | None, Field(description="The effect policy allowed, if any.")]
    rules: Annotated[
        list[dict[str, Any]], Field(description="The policy rules that decided, with their text.")
    ]
    created_at: Annotated[
        str, Field(description="When it was received.", json_schema_extra={"format": "date-time"})
    ]
    finished_at: Annotated[
        str | None,
        Field(
            description="When it ended; null while it goes on.",
            json_schema_extra={"format": "date-time"},
        ),
    ]
    stages: Annotated[list[StageTiming], Field(description="Each stage, in order.")]
    checkpoints: Annotated[int, Field(description="How many checkpoints the run stored.")]


@with_config(CLOSED)
class SubmitAnswer(TypedDict):
    """What sending a request answers, whatever became of it."""

    outcome: Annotated[str, codes(SUBMIT_MEANINGS)]
    intake_id: Annotated[int, Field(description="The stored raw request's id.")]
    run: NotRequired[RunSummary]
    problems: NotRequired[
        Annotated[list[FieldProblem], Field(description="Each field that is wrong, and why.")]
    ]


@with_config(CLOSED)
class ErrorAnswer(TypedDict):
    """A refusal before anything was decided."""

    error: Annotated[str, codes(ERROR_MEANINGS)]
    message: Annotated[str, Field(description="What to do about it, in a sentence.")]
