"""The policy document: what a deterministic decision may use, validated before it is stored."""

from __future__ import annotations

import hashlib
import json
from decimal import Decimal
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

NonEmpty = Annotated[str, Field(min_length=1, max_length=100)]
Share = Annotated[float, Field(ge=0.0, le=1.0)]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ApprovalRule(Strict):
    """An effect that needs people: which group, how many distinct approvers, how long."""

    group: NonEmpty
    approvers: Annotated[int, Field(ge=1, le=5)] = 1
    expires_after_hours: Annotated[int, Field(ge=1, le=24 * 30)] = 72
    escalate_after_hours: Annotated[int, Field(ge=1, le=24 * 30)] = 24
    escalate_to: NonEmpty | None = None


class ConfidencePolicy(Strict):
    default: Share = 0.0
    per_category: dict[NonEmpty, Share] = Field(default_factory=dict)

    def threshold_for(self, category: str) -> float:
        return self.per_category.get(category, self.default)


class AmountLimit(Strict):
    """For one account tier: above `approval_above` a person approves, above `block_above` no."""

    approval_above: Annotated[Decimal, Field(ge=0)] | None = None
    block_above: Annotated[Decimal, Field(ge=0)] | None = None

    @model_validator(mode="after")
    def _block_above_approval(self) -> AmountLimit:
        if (
            self.approval_above is not None
            and self.block_above is not None
            and self.block_above < self.approval_above
        ):
            raise ValueError("block_above must not be below approval_above")
        return self


class PolicyDocument(Strict):
    """One immutable policy version. Rule ids are derived from the keys (see evaluation)."""

    version: NonEmpty
    note: str = ""
    routes: dict[NonEmpty, NonEmpty] = Field(min_length=1)
    allowed_effects: list[NonEmpty] = Field(min_length=1)
    approvals: dict[NonEmpty, ApprovalRule] = Field(default_factory=dict)
    confidence: ConfidencePolicy = Field(default_factory=ConfidencePolicy)
    amount_limits: dict[NonEmpty, AmountLimit] = Field(default_factory=dict)
    # Who approves an amount over its tier's approval limit (when the effect itself needs none).
    amount_approval: ApprovalRule | None = None
    queue_owners: dict[NonEmpty, NonEmpty] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _approvals_name_allowed_effects(self) -> PolicyDocument:
        unknown = sorted(set(self.approvals) - set(self.allowed_effects))
        if unknown:
            raise ValueError(f"approvals name effects that are not allowed: {', '.join(unknown)}")
        if len(set(self.allowed_effects)) != len(self.allowed_effects):
            raise ValueError("allowed_effects lists an effect twice")
        needs_approver = any(
            limit.approval_above is not None for limit in self.amount_limits.values()
        )
        if needs_approver and self.amount_approval is None:
            raise ValueError(
                "amount_limits with approval_above need amount_approval (who approves)"
            )
        return self

    def canonical_json(self) -> str:
        return canonical_json(self.model_dump(mode="json"))

    def checksum(self) -> str:
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()


def canonical_json(value: Any) -> str:
    """Sorted keys, compact separators, UTF-8: the one spelling that fingerprints are taken of."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
