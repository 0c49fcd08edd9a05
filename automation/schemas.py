"""Contracts at the edges: the intake event and the classifier's decision, both strict."""

from __future__ import annotations

import hashlib
import re
from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from policy.schemas import canonical_json


class Source(StrEnum):
    WEB_FORM = "web_form"
    PARTNER_PORTAL = "partner_portal"


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
