"""The policy document: what a deterministic decision may use, validated before it is stored."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable
from datetime import date
from decimal import Decimal
from enum import StrEnum
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from core.inputs import RANGE_MESSAGE, in_calendar
from core.limits import NOTE
from policy.catalogue import (
    Catalogue,
    money_field,
    reference_catalogue,
    usable_pattern,
    words_by_language,
)

NonEmpty = Annotated[str, Field(min_length=1, max_length=100)]
SignalName = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,59}$")]
Share = Annotated[float, Field(ge=0.0, le=1.0)]


# A version's name goes into addresses (/policy/<name>/) and onto every run it decides: a
# slug-like word that is one path segment, never `.` or `..`, and fits PolicyVersion.name.
VERSION_NAME_MAX_LENGTH = 100
VERSION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# Validation context of a document about to become a new version (see PolicyDocument).
NEW_VERSION = {"new_version": True}


def version_name_problem(name: str) -> str | None:
    """Why `name` cannot name a new policy version, or None when it can."""
    if not name:
        return "give the version a name"
    if len(name) > VERSION_NAME_MAX_LENGTH:
        return f"a version name is at most {VERSION_NAME_MAX_LENGTH} characters"
    if not VERSION_NAME.fullmatch(name):
        return (
            f"{name!r} is not a usable version name: use letters, digits, dots, dashes and "
            "underscores, starting with a letter or a digit (for example policy-2)"
        )
    return None


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ApprovalRule(Strict):
    """An effect that needs people: which group, how many distinct approvers, how long."""

    group: NonEmpty
    approvers: Annotated[int, Field(ge=1, le=5)] = 1
    expires_after_hours: Annotated[int, Field(ge=1, le=24 * 30)] = 72
    escalate_after_hours: Annotated[int, Field(ge=1, le=24 * 30)] = 24
    escalate_to: NonEmpty | None = None
    # Whether an approver may decide this effect's requests several at once from the inbox
    # (each still checked against its own binding). Never for a request that needs more than
    # one approver or that a risk signal sent to a person.
    bulk: bool = False


class ConfidencePolicy(Strict):
    default: Share = 0.0
    per_category: dict[NonEmpty, Share] = Field(default_factory=dict)

    def threshold_for(self, category: str) -> float:
        return self.per_category.get(category, self.default)


class QASampling(Strict):
    """Runs that went straight through and a person reviews after the fact (QA): a share per
    route, chosen by a hash of the run's fingerprint and the policy version, so simulation
    and re-evaluation choose the same runs. Sampling never delays an effect."""

    default: Share = 0.0
    routes: dict[NonEmpty, Share] = Field(default_factory=dict)
    # The group that reviews a route's samples; else the `qa_review` queue owner.
    owners: dict[NonEmpty, NonEmpty] = Field(default_factory=dict)

    def rate_for(self, route: str) -> float:
        return self.routes.get(route, self.default)


CURRENCY_CODE = re.compile(r"[A-Z]{3}")


def _currency_code(code: str) -> str:
    if not CURRENCY_CODE.fullmatch(code):
        raise PydanticCustomError(
            "currency_code", "must be a currency's three-letter code in capitals, such as EUR"
        )
    return code


# An ISO 4217 code, as policy writes currencies: three capital letters (EUR, SEK).
Currency = Annotated[str, AfterValidator(_currency_code)]


class MoneyPolicy(Strict):
    """The business's base currency and the rates amounts are converted with before a limit
    judges them: `rates` says what one unit of a currency is worth in the base currency
    (SEK: 0.0863 with base EUR), as of `rates_as_of`. Rates are data of the version: a new
    rate is a new version, diffed and simulated like any rule. An amount in a currency
    without a rate (or in none) is not judged: a person decides."""

    base_currency: Currency
    rates_as_of: date
    rates: dict[Currency, Annotated[Decimal, Field(gt=0)]] = Field(default_factory=dict)

    @field_validator("rates_as_of")
    @classmethod
    def _rates_dated_in_calendar(cls, day: date, info: ValidationInfo) -> date:
        # A new version's day lies where every date typed into the console does (core.inputs);
        # one stored before the bound must still be readable, or its runs could not be decided.
        new = isinstance(info.context, dict) and info.context.get("new_version")
        if new and not in_calendar(day):
            raise PydanticCustomError("date_out_of_range", RANGE_MESSAGE)
        return day

    @model_validator(mode="after")
    def _base_is_one(self) -> MoneyPolicy:
        if self.base_currency in self.rates and self.rates[self.base_currency] != 1:
            raise ValueError("the base currency's own rate is 1: leave it out of the rates")
        return self

    def in_base(self, value: Decimal, currency: str) -> Decimal | None:
        """The value in the base currency; None when there is no rate for `currency`."""
        if currency == self.base_currency:
            return value
        rate = self.rates.get(currency)
        return None if rate is None else value * rate


class AmountLimit(Strict):
    """For one account tier: above `approval_above` a person approves, above `block_above` no.
    With `effects`, the limits apply to those effects only, and the amount judged is the
    effect's money (the field its `amount` parameter reads); without, to any reading with an
    `amount` field, as before."""

    approval_above: Annotated[Decimal, Field(ge=0)] | None = None
    block_above: Annotated[Decimal, Field(ge=0)] | None = None
    effects: list[NonEmpty] | None = None

    @model_validator(mode="after")
    def _block_above_approval(self) -> AmountLimit:
        if (
            self.approval_above is not None
            and self.block_above is not None
            and self.block_above < self.approval_above
        ):
            raise ValueError("block_above must not be below approval_above")
        return self


class SignalAction(StrEnum):
    """What a risk signal's hit does to the run, whatever the reading says."""

    APPROVAL = "approval"  # the effect waits for the rule's approvers
    HOLD = "hold"  # a person reads the run in the risk_signal queue before anything happens
    BLOCK = "block"  # nothing happens


# A signal's phrases and patterns are matched against every message: bounded, so that a
# policy cannot make matching slow. Patterns are regular expressions without nested
# quantifiers (`(a+)+` can take exponential time on a crafted message).
MAX_PHRASE_CHARS = 200
PHRASE = Annotated[str, Field(min_length=2, max_length=MAX_PHRASE_CHARS)]
PATTERN = Annotated[str, Field(min_length=2, max_length=200)]
MAX_PHRASES = 400


class SignalRule(Strict):
    """A named risk signal: phrases per language (and patterns), matched deterministically on
    what a message says and carries (not its signature or disclaimer). The classifier and the
    prompt cannot switch it off."""

    version: Annotated[int, Field(ge=1)] = 1
    description: Annotated[str, Field(max_length=NOTE)] = ""
    action: SignalAction
    # Who approves, for action `approval`.
    approval: ApprovalRule | None = None
    phrases: dict[str, list[PHRASE]] = Field(default_factory=dict)
    patterns: list[PATTERN] = Field(default_factory=list)

    @field_validator("phrases")
    @classmethod
    def _languages(cls, phrases: dict[str, list[str]]) -> dict[str, list[str]]:
        return words_by_language(phrases, limit=MAX_PHRASES, what="a signal has", words="phrases")

    @field_validator("patterns")
    @classmethod
    def _usable_patterns(cls, patterns: list[str]) -> list[str]:
        if len(patterns) > MAX_PHRASES:
            raise ValueError(f"a signal has at most {MAX_PHRASES} patterns")
        for pattern in patterns:
            usable_pattern(pattern)
        return patterns

    @model_validator(mode="after")
    def _complete(self) -> SignalRule:
        if not any(self.phrases.values()) and not self.patterns:
            raise ValueError("a signal needs at least one phrase or pattern")
        if (self.action == SignalAction.APPROVAL) != (self.approval is not None):
            raise ValueError(
                "a signal has `approval` (who approves) exactly when its action is approval"
            )
        return self


class PolicyDocument(Strict):
    """One immutable policy version. Rule ids are derived from the keys (see evaluation)."""

    version: NonEmpty
    # For whoever reads the version list later: a sentence or two (core.limits).
    note: Annotated[str, Field(max_length=NOTE)] = ""
    routes: dict[NonEmpty, NonEmpty] = Field(min_length=1)
    allowed_effects: list[NonEmpty] = Field(min_length=1)
    approvals: dict[NonEmpty, ApprovalRule] = Field(default_factory=dict)
    confidence: ConfidencePolicy = Field(default_factory=ConfidencePolicy)
    amount_limits: dict[NonEmpty, AmountLimit] = Field(default_factory=dict)
    # Who approves an amount over its tier's approval limit (when the effect itself needs none).
    amount_approval: ApprovalRule | None = None
    queue_owners: dict[NonEmpty, NonEmpty] = Field(default_factory=dict)
    # Risk signals by name (account_compromise, payment_change, ...): each a rule of its own.
    signals: dict[SignalName, SignalRule] = Field(default_factory=dict)
    qa_sampling: QASampling | None = None
    # The base currency and the rates the amount limits convert with (none: amounts are
    # compared as numbers, whatever their currency, as versions before it did).
    money: MoneyPolicy | None = None
    # The business this version decides for: its request types, routes, effects and customer
    # attributes (policy/catalogue.py). A version without one reads the reference catalogue.
    catalogue: Catalogue | None = None

    @property
    def business(self) -> Catalogue:
        return self.catalogue if self.catalogue is not None else reference_catalogue()

    @field_validator("version")
    @classmethod
    def _usable_version_name(cls, name: str, info: ValidationInfo) -> str:
        # Only a document about to be stored is held to the naming rule: a version stored
        # before the rule existed must still be readable, or the runs it decides would fail.
        if isinstance(info.context, dict) and info.context.get("new_version"):
            problem = version_name_problem(name)
            if problem is not None:
                raise PydanticCustomError("version_name", problem)
        return name

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

    @model_validator(mode="after")
    def _rules_name_the_business(self) -> PolicyDocument:
        """With a catalogue of its own, every name the rules use is one the catalogue lists,
        and every request type goes somewhere. (A version without one was written for the
        reference catalogue and is read as it was stored.)"""
        if self.catalogue is None:
            return self
        business = self.catalogue
        types, routes = set(business.request_types), set(business.routes)
        tiers = set(business.tier_values())
        sampled = self.qa_sampling.routes if self.qa_sampling else {}
        _all_known(types, self.routes, "routes leave out the request type", "so it goes nowhere")
        _all_known(self.routes, types, "routes name", "which is no request type of the catalogue")
        _all_known(
            self.routes.values(), routes, "routes send to", "which is no route of the catalogue"
        )
        _all_known(
            self.allowed_effects,
            business.effects,
            "allowed_effects name",
            "which is no effect of the catalogue",
        )
        _all_known(
            self.confidence.per_category,
            types,
            "confidence names",
            "which is no request type of the catalogue",
        )
        _all_known(
            self.amount_limits,
            tiers or self.amount_limits,
            "amount_limits name",
            "which is no account tier of the catalogue",
        )
        _all_known(sampled, routes, "qa_sampling names", "which is no route of the catalogue")
        return self

    @model_validator(mode="after")
    def _limited_effects_carry_money(self) -> PolicyDocument:
        """An amount limit written for an effect judges the effect's money: an effect without
        an amount parameter reading a field could never be judged, and is refused."""
        business = self.business
        for tier, limit in self.amount_limits.items():
            named = limit.effects or []
            _all_known(
                named,
                business.effects,
                f"amount_limits.{tier}.effects name",
                "which is no effect of the catalogue",
            )
            _all_known(
                named,
                [e for e in named if money_field(business, e) is not None],
                f"amount_limits.{tier}.effects name",
                "which carries no money: give the effect a parameter of type amount that "
                "reads a field ({{ fields.<name> }})",
            )
        return self

    def stored(self) -> dict[str, Any]:
        """The document as a version stores it: without a catalogue section when it has none
        (it reads the reference catalogue), as versions were stored before catalogues, and
        without a money section when it has none."""
        absent = {name for name in ("catalogue", "money") if getattr(self, name) is None}
        data = self.model_dump(mode="json", exclude=absent or None)
        for limit in data["amount_limits"].values():
            if limit["effects"] is None:
                del limit["effects"]  # a limit for any effect, stored as before
        return data

    def canonical_json(self) -> str:
        data = self.model_dump(mode="json")
        # A version without signals, sampling, catalogue or money keeps the checksum it
        # always had; so does an amount limit without effects.
        for optional in ("signals", "qa_sampling", "catalogue", "money"):
            if not data[optional]:
                del data[optional]
        for limit in data["amount_limits"].values():
            if limit["effects"] is None:
                del limit["effects"]
        _without_unsaid_addresses(data)
        return canonical_json(data)

    def checksum(self) -> str:
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()


def _without_unsaid_addresses(data: dict[str, Any]) -> None:
    """A catalogue that says nothing of how customers are matched, nor of a reply's
    addresses, keeps the checksum it had before it could."""
    catalogue = data.get("catalogue")
    if not isinstance(catalogue, dict):
        return
    if catalogue.get("customer_matching") is None:
        catalogue.pop("customer_matching", None)
    for effect in catalogue.get("effects", {}).values():
        reply = effect.get("email_reply")
        for name in ("from_address", "reply_to"):
            if isinstance(reply, dict) and reply.get(name) is None:
                reply.pop(name, None)


def _all_known(names: Iterable[str], known: Iterable[str], subject: str, problem: str) -> None:
    """Refuse the names not among `known`: "<subject> a, b, <problem>"."""
    unknown = sorted(set(names) - set(known))
    if unknown:
        raise ValueError(f"{subject} {', '.join(unknown)}, {problem}")


def canonical_json(value: Any) -> str:
    """Sorted keys, compact separators, UTF-8: the one spelling that fingerprints are taken of."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
