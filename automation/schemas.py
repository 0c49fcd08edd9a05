"""Contracts at the edges: the intake event and the classifier's decision, both strict."""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections import deque
from collections.abc import Callable
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator

from core.errors import field_messages
from policy.catalogue import Catalogue
from policy.schemas import canonical_json


class Source(StrEnum):
    WEB_FORM = "web_form"
    PARTNER_PORTAL = "partner_portal"


EMAIL = "email"


def normalize_text(value: str) -> str:
    """Collapse runs of whitespace and trim: the only rewrite normalization makes."""
    return re.sub(r"\s+", " ", value).strip()


def _non_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty")
    return value


# A subject is copied whole into the task rows `record` effects write (Task.subject holds
# this many characters): the contract refuses what it could not hold, instead of a delivery
# failing after the run was accepted. The mail reader clips to it.
SUBJECT_LIMIT = 500

Text = Annotated[str, Field(min_length=1, max_length=20_000)]
Subject = Annotated[str, Field(min_length=1, max_length=SUBJECT_LIMIT)]
Token = Annotated[str, Field(min_length=1, max_length=200)]


# A name of the business catalogue (a request type, a route, an effect, a tier): which ones
# exist is the run's catalogue version's to say (intake_contract, decision_contract).
CatalogueName = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,59}$")]


class IntakeEvent(BaseModel):
    """The intake contract: exactly these seven keys, exact types. The request type and the
    account tier are closed by the catalogue of the version that decides for the channel:
    `intake_contract(business)` is the contract an event is held to."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    event_id: Token
    source: Source
    request_type: CatalogueName
    subject: Subject
    body: Text
    account_tier: CatalogueName
    # Open on purpose: an action outside the allowlist is `unsupported_request`, not invalid.
    requested_action: Token

    @field_validator("event_id", "subject", "body", "requested_action")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        return _non_blank(value)

    def normalized(self) -> dict[str, Any]:
        """Canonical spelling: collapsed whitespace, nothing rewritten semantically."""
        data = self.model_dump(mode="json")
        return {key: normalize_text(value) for key, value in data.items()}


def normalize_lines(value: str) -> str:
    """Mail text keeps its lines (quotes, tables); only trailing space and blank runs go."""
    lines = [line.rstrip() for line in value.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


MessageId = Annotated[str, Field(min_length=1, max_length=200)]


class AttachmentInfo(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Annotated[str, Field(min_length=1, max_length=200)]
    content_type: Annotated[str, Field(min_length=3, max_length=200)]
    size: Annotated[int, Field(ge=0)]
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    text: Annotated[str, Field(max_length=20_000)] = ""


class MailEvent(BaseModel):
    """An e-mail as an intake event. It states no request type or action: it must be read."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    event_id: Token
    source: Literal["email"]
    subject: Subject
    body: Text
    sender: Annotated[str, Field(min_length=3, max_length=320, pattern=r"^[^@\s]+@[^@\s]+$")]
    sender_name: Annotated[str, Field(max_length=200)] = ""
    sent_at: Annotated[str, Field(max_length=100)] = ""
    thread: list[MessageId] = Field(default_factory=list, max_length=21)
    attachments: list[AttachmentInfo] = Field(default_factory=list, max_length=50)

    def normalized(self) -> dict[str, Any]:
        data = self.model_dump(mode="json")
        data["subject"] = normalize_text(data["subject"])
        data["body"] = normalize_lines(data["body"])
        data["sender_name"] = normalize_text(data["sender_name"])
        for attachment in data["attachments"]:
            attachment["text"] = normalize_lines(attachment["text"])
        return data


def event_of(data: dict[str, Any]) -> IntakeEvent | MailEvent:
    """The contract an event is held to, by its source. Raises ValidationError."""
    if data.get("source") == EMAIL:
        return MailEvent.model_validate(data)
    return IntakeEvent.model_validate(data)


def is_mail(normalized: dict[str, Any] | None) -> bool:
    return normalized is not None and normalized.get("source") == EMAIL


def event_text(normalized: dict[str, Any]) -> str:
    """Everything a reader may read: subject, body and the text of attachments."""
    parts = [str(normalized.get("subject", "")), str(normalized.get("body", ""))]
    for attachment in normalized.get("attachments") or []:
        if attachment.get("text"):
            parts.append(f"[{attachment['name']}]\n{attachment['text']}")
    return "\n\n".join(part for part in parts if part)


def fingerprint(normalized: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON of the normalized event."""
    return hashlib.sha256(canonical_json(normalized).encode("utf-8")).hexdigest()


Confidence = Annotated[float, Field(ge=0.0, le=1.0, strict=True)]


class MessagePart(StrEnum):
    SUBJECT = "subject"
    OWN = "own"
    QUOTED = "quoted"
    FORWARDED = "forwarded"
    SIGNATURE = "signature"
    DISCLAIMER = "disclaimer"
    ATTACHMENT = "attachment"


class ExtractedField(BaseModel):
    """One fact read from the request, with how sure the reader is and where it read it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    value: Annotated[str, Field(min_length=1, max_length=500)]
    confidence: Confidence
    # The exact words of the request the value came from, shown highlighted to approvers.
    source: Annotated[str, Field(min_length=1, max_length=2000)] | None = None
    # Which part of an e-mail the words are in: the sender's own text, or what the message
    # carries along (a quoted reply, a forwarded message, an attachment), which is evidence.
    part: MessagePart | None = None


class ClassifierDecision(BaseModel):
    """What a classifier may propose. Untrusted: exact keys, nothing else. The category, route
    and effect are closed by the run's catalogue version: `decision_contract(business)` is
    the contract a reading is held to (this one only shapes a stored reading)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    category: CatalogueName
    recommended_route: CatalogueName
    requested_effect: CatalogueName
    reason_code: Annotated[str, Field(min_length=1, max_length=100, pattern=r"^[a-z0-9_.-]+$")]
    confidence: Confidence | None = None
    fields: dict[Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,49}$")], ExtractedField] = Field(
        default_factory=dict, max_length=50
    )


def _one_of(names: tuple[str, ...]) -> Any:
    """The type of a value that must be one of `names` (a Literal: "must be one of …")."""
    return Literal.__getitem__(names) if names else CatalogueName


@functools.lru_cache(maxsize=64)
def _intake_contract(types: tuple[str, ...], tiers: tuple[str, ...]) -> type[IntakeEvent]:
    return create_model(
        "IntakeEvent",
        __base__=IntakeEvent,
        __doc__=IntakeEvent.__doc__,
        request_type=(_one_of(types), ...),
        account_tier=(_one_of(tiers), ...),
    )


def intake_contract(business: Catalogue) -> type[IntakeEvent]:
    """The intake contract under a catalogue: its request types and account tiers only."""
    return _intake_contract(tuple(business.request_types), tuple(business.tier_values()))


@functools.lru_cache(maxsize=64)
def _decision_contract(
    types: tuple[str, ...], routes: tuple[str, ...], effects: tuple[str, ...]
) -> type[ClassifierDecision]:
    return create_model(
        "ClassifierDecision",
        __base__=ClassifierDecision,
        __doc__=ClassifierDecision.__doc__,
        category=(_one_of(types), ...),
        recommended_route=(_one_of(routes), ...),
        requested_effect=(_one_of(effects), ...),
    )


def decision_contract(business: Catalogue) -> type[ClassifierDecision]:
    """What a classifier may propose under a catalogue: its types, routes and effects only.
    A reading naming anything else is invalid output."""
    return _decision_contract(
        tuple(business.request_types), tuple(business.routes), tuple(business.effects)
    )


# --- what the database can store --------------------------------------------------------------

# PostgreSQL text and jsonb hold neither a NUL nor a lone surrogate: a half of a UTF-16 pair,
# which JSON's \u escapes and some charsets (UTF-7) can spell but which is no character.
_UNSTORABLE = re.compile(r"[\x00\ud800-\udfff]")
# Run.failure_field holds a problem's field; a longer path (a hostile key) is shown clipped.
FIELD_PATH_LIMIT = 200
# Problems listed for one event at most: enough to act on, never a copy of a hostile body.
MAX_PROBLEMS = 50


def unstorable(text: str) -> str:
    """Why the database cannot store this text, or '' when it can."""
    found = _UNSTORABLE.search(text)
    if found is None:
        return ""
    if found.group() == "\x00":
        return "contains a NUL character (\\u0000), which cannot be stored"
    return (
        f"contains a lone surrogate (\\u{ord(found.group()):04x}), which is no character "
        "and cannot be stored"
    )


def storable(text: str) -> str:
    """A copy the database can store (a problem's echo of the input, a file name): each NUL
    and lone surrogate becomes U+FFFD, the replacement character."""
    return _UNSTORABLE.sub("\ufffd", text)


class FieldProblem(BaseModel):
    """One thing wrong with an input, as users read it. Runs store it (failure_field, the
    checkpoint), so whatever it echoes of the input is made storable here, once for all."""

    field: str
    message: str

    @field_validator("field")
    @classmethod
    def _storable_field(cls, value: str) -> str:
        return storable(value)[:FIELD_PATH_LIMIT]

    @field_validator("message")
    @classmethod
    def _storable_message(cls, value: str) -> str:
        return storable(value)


def _path(parent: str, key: object) -> str:
    return f"{parent}.{key}" if parent else str(key)


def storage_problems(data: Any) -> list[FieldProblem]:
    """Every key and text of an event, however deep, that the database cannot store.

    Named by path as the contract's problems are (`attachments.0.text`). Walked with a queue,
    not recursion, so no nesting can exhaust the stack.
    """
    problems: list[FieldProblem] = []
    pending: deque[tuple[str, Any]] = deque([("", data)])
    while pending and len(problems) < MAX_PROBLEMS:
        path, value = pending.popleft()
        if isinstance(value, str) and (why := unstorable(value)):
            problems.append(FieldProblem(field=path or "body", message=why))
        elif isinstance(value, dict):
            for key, item in value.items():
                if isinstance(key, str) and (why := unstorable(key)):
                    problems.append(
                        FieldProblem(field=_path(path, key), message=f"is a key that {why}")
                    )
                pending.append((_path(path, key), item))
        elif isinstance(value, list):
            pending.extend((_path(path, index), item) for index, item in enumerate(value))
    return problems


# --- reading a JSON body ---------------------------------------------------------------------

# Python itself refuses an integer of more than 4,300 digits (a ValueError) and JSON nested
# about a thousand deep (a RecursionError, sooner on a deep call stack). The event contract
# is one flat object, so limits far below those come first and are named in the answer.
MAX_JSON_DEPTH = 20
MAX_NUMBER_LENGTH = 1000


class _Unreadable(ValueError):
    """The body is JSON, but past one of the limits above."""


def _bounded(convert: Callable[[str], Any]) -> Callable[[str], Any]:
    def read(literal: str) -> Any:
        if len(literal) > MAX_NUMBER_LENGTH:
            raise _Unreadable(f"has a number longer than {MAX_NUMBER_LENGTH} digits")
        return convert(literal)

    return read


_read_int, _read_float = _bounded(int), _bounded(float)


def _too_deep() -> FieldProblem:
    return FieldProblem(field="body", message=f"nests deeper than {MAX_JSON_DEPTH} levels")


def _nesting(data: Any) -> int:
    """How deep objects and arrays nest (`{}` is 1), counted without recursion; counting
    stops once past the limit."""
    deepest = 0
    pending: list[tuple[Any, int]] = [(data, 1)]
    while pending and deepest <= MAX_JSON_DEPTH:
        value, depth = pending.pop()
        items = list(value.values()) if isinstance(value, dict) else value
        if isinstance(items, list):
            deepest = max(deepest, depth)
            pending.extend((item, depth + 1) for item in items)
    return deepest


def read_json(raw: bytes) -> tuple[Any, FieldProblem | None]:
    """The JSON value of a request body, or the problem that makes it unreadable."""
    try:
        data = json.loads(raw.decode("utf-8"), parse_int=_read_int, parse_float=_read_float)
    except _Unreadable as exc:
        return None, FieldProblem(field="body", message=str(exc))
    except RecursionError:
        return None, _too_deep()
    except ValueError as exc:  # not UTF-8, not JSON: UnicodeDecodeError, JSONDecodeError
        return None, FieldProblem(field="body", message=f"is not valid JSON: {exc}")
    if _nesting(data) > MAX_JSON_DEPTH:
        return None, _too_deep()
    return data, None


# --- problems as users read them -----------------------------------------------------------------


def validation_problems(error: ValidationError) -> list[FieldProblem]:
    """Pydantic's errors as the API and the pages show them (core.errors.field_messages)."""
    return [
        FieldProblem(field=where, message=message)
        for where, message in field_messages(error, root="body")
    ]
