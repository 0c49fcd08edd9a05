"""Pure policy evaluation: (policy, event facts, interpretation, enrichment) -> decision.

No database, no clock, no model: the same inputs give the same decision and the same rules,
which is what lets a decision be explained months later and re-evaluated under another version.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from enum import StrEnum
from typing import Any

from policy.catalogue import money_field
from policy.risk_signals import SignalHit, match_signals
from policy.schemas import AmountLimit, ApprovalRule, MoneyPolicy, PolicyDocument, SignalAction

# The queue of sampled runs a person reviews after the fact, and who owns it by default.
QA_QUEUE = "qa_review"
DEFAULT_QA_OWNER = "ops-leads"


class Verdict(StrEnum):
    EXECUTE = "execute"
    APPROVE = "approve"
    BLOCK = "block"
    LOW_CONFIDENCE = "low_confidence"
    UNSUPPORTED = "unsupported"
    RISK_SIGNAL = "risk_signal"  # a signal rule holds the run for a person


@dataclass(frozen=True)
class EventFacts:
    """What the request itself states. An e-mail states no type or action (None): the
    reading is then held to policy's own routes and allowlist instead of to the request."""

    request_type: str | None
    requested_action: str | None
    account_tier: str


@dataclass(frozen=True)
class Money:
    """An amount in its own currency (None: the reading names none)."""

    value: Decimal
    currency: str | None = None

    def said(self) -> str:
        return f"{self.value:,.2f} {self.currency}" if self.currency else f"{self.value:,.2f}"


@dataclass(frozen=True)
class Interpretation:
    category: str
    route: str
    effect: str
    confidence: float | None = None
    # The reading's `amount` field: what an amount limit without `effects` judges.
    amount: Decimal | None = None
    currency: str | None = None
    # The reader found no clear signal for any category: its category is a fallback, which
    # no threshold may let through.
    unclear: bool = False
    # Every field of the reading that has a value: as an amount when it reads as one, None
    # when it does not. A limit written for an effect judges the field that is its money.
    amounts: Mapping[str, Money | None] = field(default_factory=dict)


@dataclass(frozen=True)
class FiredRule:
    rule_id: str
    passed: bool
    text: str

    def as_dict(self) -> dict[str, Any]:
        return {"rule_id": self.rule_id, "passed": self.passed, "text": self.text}


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    route: str | None
    effect: str | None
    approval: ApprovalRule | None = None
    rules: list[FiredRule] = field(default_factory=list)

    @property
    def refusing_rules(self) -> list[FiredRule]:
        return [r for r in self.rules if not r.passed]


def check_request_allowed(policy: PolicyDocument, facts: EventFacts) -> FiredRule:
    """Before any interpretation: is the requested action one this policy allows at all?"""
    if facts.requested_action is None:
        return FiredRule(
            "allowlist.unstated",
            True,
            "the request states no action: the proposed effect is checked against the allowlist",
        )
    allowed = facts.requested_action in policy.allowed_effects
    return FiredRule(
        rule_id=f"allowlist.{facts.requested_action}",
        passed=allowed,
        text=f"requested action {facts.requested_action!r} "
        + ("is in the allowlist" if allowed else "is not in the allowlist"),
    )


def _match_rules(
    policy: PolicyDocument, facts: EventFacts, reading: Interpretation
) -> list[FiredRule]:
    proposal = FiredRule(
        f"proposal.{reading.effect}",
        reading.effect in policy.allowed_effects,
        f"proposed effect {reading.effect!r} must be an allowed effect",
    )
    if facts.request_type is None or facts.requested_action is None:
        # Nothing stated to compare with: the route is policy's for the category read.
        expected = policy.routes.get(reading.category)
        return [
            FiredRule(
                f"route.{reading.category}",
                expected is not None and reading.route == expected,
                f"route {reading.route!r} must be {expected!r} for {reading.category!r}",
            ),
            proposal,
        ]
    expected_route = policy.routes.get(facts.request_type)
    return [
        FiredRule(
            "match.category",
            reading.category == facts.request_type,
            f"category {reading.category!r} must equal request type {facts.request_type!r}",
        ),
        FiredRule(
            f"route.{facts.request_type}",
            expected_route is not None and reading.route == expected_route,
            f"route {reading.route!r} must be {expected_route!r} for {facts.request_type!r}",
        ),
        FiredRule(
            "match.effect",
            reading.effect == facts.requested_action,
            f"effect {reading.effect!r} must equal requested action {facts.requested_action!r}",
        ),
        proposal,
    ]


def _confidence_rule(policy: PolicyDocument, reading: Interpretation) -> FiredRule | None:
    if reading.unclear:
        return FiredRule(
            "reading.unclear",
            False,
            f"the reading found no clear signal ({reading.category!r} is a fallback): "
            "a person reads it",
        )
    threshold = policy.confidence.threshold_for(reading.category)
    if threshold <= 0.0:
        return None
    if reading.confidence is None:
        # No confidence is not a confidence of 0: say what is missing. It cannot pass.
        return FiredRule(
            f"confidence.{reading.category}",
            False,
            f"the reading gave no confidence; {threshold:.2f} is needed for {reading.category!r}",
        )
    return FiredRule(
        f"confidence.{reading.category}",
        reading.confidence >= threshold,
        f"confidence {reading.confidence:.2f} must reach {threshold:.2f} for {reading.category!r}",
    )


def _amount_rules(
    policy: PolicyDocument, facts: EventFacts, reading: Interpretation
) -> list[FiredRule]:
    """Amount limits of the account's tier. A failed rule means: over that limit, or (rule
    `amount.<tier>.unjudged`) an amount the policy cannot judge, which a person decides."""
    limit = policy.amount_limits.get(facts.account_tier)
    found = None if limit is None else _money_judged(policy, limit, reading)
    if limit is None or found is None:
        return []
    tier = facts.account_tier
    if isinstance(found, str):
        return [_unjudged(tier, found)]
    money, shown = found
    if policy.money is None:
        return _limit_rules(limit, tier, money.value, f"{shown} {money.value}", "")
    return _converted_rules(policy.money, limit, tier, money, shown)


def _money_judged(
    policy: PolicyDocument, limit: AmountLimit, reading: Interpretation
) -> tuple[Money, str] | str | None:
    """The money a limit judges and what to call it; None when the limit does not apply,
    or why the money cannot be judged (a person then decides)."""
    if limit.effects is None:
        # As before limits were written per effect: the reading's `amount`, if any.
        if reading.amount is None:
            return None
        return Money(reading.amount, reading.currency), "amount"
    if reading.effect not in limit.effects:
        return None
    name = money_field(policy.business, reading.effect)
    if name is None:  # the catalogue of a simulation may differ: never guess
        return f"{reading.effect!r} carries no amount"
    money, shown = reading.amounts.get(name), name.replace("_", " ")
    if money is None:
        return f"the {shown} " + ("is not an amount" if name in reading.amounts else "is missing")
    return money, shown


def _unjudged(tier: str, why: str) -> FiredRule:
    return FiredRule(f"amount.{tier}.unjudged", False, f"{why}, a person decides")


def _converted_rules(
    money: MoneyPolicy, limit: AmountLimit, tier: str, amount: Money, shown: str
) -> list[FiredRule]:
    """The limits judged in the base currency, each rule naming the amount in its own
    currency and its converted value."""
    if amount.currency is None:
        why = f"{amount.said()}: no currency, so no limit in {money.base_currency} can judge it"
        return [_unjudged(tier, why)]
    value = money.in_base(amount.value, amount.currency)
    if value is None:
        return [_unjudged(tier, f"{amount.said()}: no rate for {amount.currency}")]
    said = f"{shown} {amount.said()}"
    if amount.currency != money.base_currency:
        said += (
            f" ({value:,.2f} {money.base_currency} at the rate of {money.rates_as_of.isoformat()})"
        )
    return _limit_rules(limit, tier, value, said, f" {money.base_currency}")


def _limit_rules(
    limit: AmountLimit, tier: str, amount: Decimal, said: str, unit: str
) -> list[FiredRule]:
    """Each rule says what happened: within the limit, or over it and what that does."""
    rules = []
    if limit.block_above is not None:
        within = amount <= limit.block_above
        rules.append(
            FiredRule(
                f"amount.{tier}.block",
                within,
                f"{said} is within the limit of {limit.block_above}{unit} for {tier} accounts"
                if within
                else f"{said} is over the limit of {limit.block_above}{unit} for {tier} "
                "accounts: nothing is done",
            )
        )
    if limit.approval_above is not None:
        within = amount <= limit.approval_above
        rules.append(
            FiredRule(
                f"amount.{tier}.approval",
                within,
                f"{said} needs no approval: {tier} accounts need one above "
                f"{limit.approval_above}{unit}"
                if within
                else f"{said} is over {limit.approval_above}{unit}: a person approves it "
                f"for {tier} accounts",
            )
        )
    return rules


def signal_rules(hits: list[SignalHit], reviewed: frozenset[str]) -> list[FiredRule]:
    """A rule per hit; a hold a person already read the run for has passed."""
    return [
        FiredRule(
            hit.rule_id,
            _read_by_a_person(hit, reviewed),
            f"signal {hit.name} (v{hit.version}, {hit.action}): {hit.matched!r} "
            f"in \u201c{hit.sentence}\u201d"
            + (" (a person read it)" if _read_by_a_person(hit, reviewed) else ""),
        )
        for hit in hits
    ]


def _read_by_a_person(hit: SignalHit, reviewed: frozenset[str]) -> bool:
    return hit.action == SignalAction.HOLD and hit.rule_id in reviewed


def _signal_decision(
    policy: PolicyDocument, reading: Interpretation, hits: list[SignalHit], rules: list[FiredRule]
) -> Decision | None:
    """A block or a hold by a signal decides at once, whatever the reading."""
    route = policy.routes.get(reading.category)
    if any(hit.action == SignalAction.BLOCK for hit in hits):
        return Decision(Verdict.BLOCK, None, None, rules=rules)
    passed = {rule.rule_id for rule in rules if rule.passed}
    if any(hit.action == SignalAction.HOLD and hit.rule_id not in passed for hit in hits):
        return Decision(Verdict.RISK_SIGNAL, route, reading.effect, rules=rules)
    return None


def _with_signal_approval(
    policy: PolicyDocument, decision: Decision, hits: list[SignalHit]
) -> Decision:
    """An effect about to run without a person waits for the approvers a signal names (the
    first signal by name); one that needs approval anyway keeps its own approvers."""
    wanted = [policy.signals[hit.name].approval for hit in hits]
    approval = next((a for a in wanted if a is not None), None)
    if approval is None or decision.verdict != Verdict.EXECUTE:
        return decision
    return Decision(Verdict.APPROVE, decision.route, decision.effect, approval, decision.rules)


def evaluate(
    policy: PolicyDocument,
    facts: EventFacts,
    reading: Interpretation,
    enrichment: dict[str, Any] | None = None,
    *,
    text: str = "",
    reviewed: frozenset[str] = frozenset(),
) -> Decision:
    """Decide what may happen. The model's reading is a proposal checked against the request;
    the signals are matched on `text`, the sender's own words, whatever the reading says.
    `reviewed`: the signal rules whose hold a person has already read this run for."""
    allow = check_request_allowed(policy, facts)
    if not allow.passed:
        return Decision(Verdict.UNSUPPORTED, None, None, rules=[allow])
    hits = match_signals(policy, text) if text else []
    signals = signal_rules(hits, reviewed)
    stop = _signal_decision(policy, reading, hits, [allow, *signals])
    if stop is not None:
        return stop
    decision = _evaluate_reading(policy, facts, reading, [allow, *signals])
    return _with_signal_approval(policy, decision, hits)


def _evaluate_reading(
    policy: PolicyDocument, facts: EventFacts, reading: Interpretation, checked: list[FiredRule]
) -> Decision:
    rules = _match_rules(policy, facts, reading)
    if not all(r.passed for r in rules):
        return Decision(Verdict.BLOCK, None, None, rules=[*checked, *rules])
    route = policy.routes[facts.request_type or reading.category]
    confidence = _confidence_rule(policy, reading)
    if confidence is not None:
        rules.append(confidence)
        if not confidence.passed:
            return Decision(Verdict.LOW_CONFIDENCE, route, reading.effect, rules=[*checked, *rules])
    amount = _amount_rules(policy, facts, reading)
    rules.extend(amount)
    if any(r.rule_id.endswith(".block") and not r.passed for r in amount):
        return Decision(Verdict.BLOCK, None, None, rules=[*checked, *rules])
    approval = policy.approvals.get(reading.effect)
    over_limit = any(r.rule_id.endswith(".approval") and not r.passed for r in amount)
    unjudged = any(r.rule_id.endswith(".unjudged") for r in amount)
    if approval is None and (over_limit or unjudged) and policy.amount_approval is not None:
        return Decision(
            Verdict.APPROVE, route, reading.effect, policy.amount_approval, [*checked, *rules]
        )
    if approval is None and unjudged:
        # Nobody approves amounts: the run waits for a person, with the rule saying why.
        return Decision(Verdict.LOW_CONFIDENCE, route, reading.effect, rules=[*checked, *rules])
    if approval is None:
        return Decision(Verdict.EXECUTE, route, reading.effect, rules=[*checked, *rules])
    needs = FiredRule(
        f"approval.{reading.effect}",
        True,
        f"{reading.effect!r} needs {approval.approvers} "
        f"approval{'' if approval.approvers == 1 else 's'} from {approval.group!r}",
    )
    return Decision(Verdict.APPROVE, route, reading.effect, approval, [*checked, *rules, needs])


def approval_for(policy: PolicyDocument, effect: str, rules: list[dict[str, Any]]) -> ApprovalRule:
    """Who approves a decision to APPROVE, from its stored rules, in evaluate()'s order: the
    effect's own approvers, then the amount approvers (over the tier's limit), then those of
    the first signal asking for approval."""
    refused = [r["rule_id"] for r in rules if not r["passed"]]
    found = policy.approvals.get(effect)
    if found is None and any(
        r.startswith("amount.") and r.endswith((".approval", ".unjudged")) for r in refused
    ):
        found = policy.amount_approval
    for rule_id in refused if found is None else []:
        signal = policy.signals.get(rule_id.removeprefix("signal."))
        if rule_id.startswith("signal.") and signal is not None and signal.approval is not None:
            found = signal.approval
            break
    if found is None:
        raise ValueError(f"policy {policy.version} names no approver for {effect!r}")
    return found


def qa_sample(policy: PolicyDocument, route: str, fingerprint: str) -> str | None:
    """The group that reviews this straight-through run after the fact, when policy samples it
    (None otherwise). Deterministic: a hash of the policy version and the run's fingerprint
    against the route's rate, so a simulation or a re-evaluation picks the same runs."""
    sampling = policy.qa_sampling
    if sampling is None:
        return None
    rate = sampling.rate_for(route)
    digest = hashlib.sha256(f"{policy.version}:{fingerprint}".encode()).digest()
    if int.from_bytes(digest[:8], "big") / 2**64 >= rate:
        return None
    return sampling.owners.get(route) or policy.queue_owners.get(QA_QUEUE) or DEFAULT_QA_OWNER
