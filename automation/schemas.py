"""Contracts at the edges: the intake event and the classifier's decision, both strict."""

from __future__ import annotations

import hashlib
import re
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from policy.schemas import canonical_json


class Source(StrEnum):
    WEB_FORM = "web_form"
    PARTNER_PORTAL = "partner_portal"


EMAIL = "email"


class AccountTier(StrEnum):
    STANDARD = "standard"
    PRIORITY = "priority"


class RequestType(StrEnum):
    SUPPORT = "support"
    BILLING = "billing"
    SALES = "sales"
    SECURITY = "security"


class Route(StrEnum):
    SERVICE_DESK = "service_desk"
    FINANCE = "finance"
    COMMERCIAL = "commercial"
    SECURITY_REVIEW = "security_review"


class EffectName(StrEnum):
    """Effects Gatehouse has an adapter for. A model naming anything else is invalid output."""

    CREATE_FOLLOW_UP = "create_follow_up"
    QUEUE_ACCOUNT_REVIEW = "queue_account_review"
    SEND_INTERNAL_NOTIFICATION = "send_internal_notification"


def normalize_text(value: str) -> str:
    """Collapse runs of whitespace and trim: the only rewrite normalization makes."""
    return re.sub(r"\s+", " ", value).strip()


def _non_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty")
    return value


Text = Annotated[str, Field(min_length=1, max_length=20_000)]
Token = Annotated[str, Field(min_length=1, max_length=200)]


class IntakeEvent(BaseModel):
    """The intake contract: exactly these seven keys, exact types, closed sets."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    event_id: Token
    source: Source
    request_type: RequestType
    subject: Text
    body: Text
    account_tier: AccountTier
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
    subject: Text
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


class ExtractedField(BaseModel):
    """One fact read from the request, with how sure the reader is and where it read it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    value: Annotated[str, Field(min_length=1, max_length=500)]
    confidence: Confidence
    # The exact words of the request the value came from, shown highlighted to approvers.
    source: Annotated[str, Field(min_length=1, max_length=2000)] | None = None


class ClassifierDecision(BaseModel):
    """What a classifier may propose. Untrusted: exact keys, closed enums, nothing else."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    category: RequestType
    recommended_route: Route
    requested_effect: EffectName
    reason_code: Annotated[str, Field(min_length=1, max_length=100, pattern=r"^[a-z0-9_.-]+$")]
    confidence: Confidence | None = None
    fields: dict[Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,49}$")], ExtractedField] = Field(
        default_factory=dict, max_length=50
    )


class FieldProblem(BaseModel):
    field: str
    message: str


def validation_problems(error: ValidationError) -> list[FieldProblem]:
    """The one place that turns pydantic errors into what users read: field and message."""
    problems = []
    for item in error.errors():
        location = ".".join(str(part) for part in item["loc"]) or "body"
        message = item["msg"]
        if item["type"] == "extra_forbidden":
            message = "is not part of the contract"
        elif item["type"] == "missing":
            message = "is required"
        problems.append(FieldProblem(field=location, message=message))
    return problems
