"""The policy's money section, read as rules: amounts judged in the base currency after
conversion, what policy cannot judge left to a person, rates that are data of the version.

Pure unit tests: no database. The policy is policy-1 (the reference catalogue) with a money
section, an amount limit and its approver; the stored versions without either setting keep
their checksums and their decisions.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from policy.evaluation import EventFacts, Interpretation, Money, Verdict, approval_for, evaluate
from policy.schemas import PolicyDocument
from policy.services import DEFAULTS_DIR, parse_policy_text

REPO = Path(__file__).resolve().parents[2]
RATES = {"base_currency": "EUR", "rates_as_of": "2026-12-01", "rates": {"SEK": "0.0863"}}
FACTS = EventFacts("billing", "send_internal_notification", "standard")


def policy_with(**changes: Any) -> PolicyDocument:
    data = yaml.safe_load((DEFAULTS_DIR / "policy-1.yaml").read_text(encoding="utf-8"))
    data.update(
        {
            "amount_limits": {"standard": {"approval_above": "10000"}},
            "amount_approval": {"group": "finance-approvers", "approvers": 2},
            **changes,
        }
    )
    return parse_policy_text(yaml.safe_dump(data))


def about(amount: str, currency: str | None) -> Interpretation:
    return Interpretation(
        "billing",
        "finance",
        "send_internal_notification",
        amount=Decimal(amount),
        currency=currency,
    )


def amount_rules(policy: PolicyDocument, read: Interpretation) -> list[tuple[str, bool, str]]:
    decision = evaluate(policy, FACTS, read)
    return [(r.rule_id, r.passed, r.text) for r in decision.rules if r.rule_id.startswith("amount")]


def test_the_same_number_in_two_currencies_is_judged_by_its_value_in_the_base() -> None:
    policy = policy_with(money=RATES)

    kronor, euros = about("12400.00", "SEK"), about("12400.00", "EUR")

    assert evaluate(policy, FACTS, kronor).verdict == Verdict.EXECUTE
    assert amount_rules(policy, kronor) == [
        (
            "amount.standard.approval",
            True,
            "amount 12,400.00 SEK (1,070.12 EUR at the rate of 2026-12-01) needs no approval: "
            "standard accounts need one above 10000 EUR",
        )
    ]
    decided = evaluate(policy, FACTS, euros)
    assert (decided.verdict, decided.approval and decided.approval.approvers) == (
        Verdict.APPROVE,
        2,
    )


@pytest.mark.parametrize(
    ("currency", "why"),
    [
        ("CHF", "12,400.00 CHF: no rate for CHF, a person decides"),
        (None, "12,400.00: no currency, so no limit in EUR can judge it, a person decides"),
    ],
)
def test_an_amount_policy_cannot_judge_goes_to_its_approvers(
    currency: str | None, why: str
) -> None:
    policy = policy_with(money=RATES)

    decision = evaluate(policy, FACTS, about("12400.00", currency))

    assert decision.verdict == Verdict.APPROVE
    assert amount_rules(policy, about("12400.00", currency)) == [
        ("amount.standard.unjudged", False, why)
    ]
    # The approver is found again from the stored rules (what approval requests do).
    stored = [rule.as_dict() for rule in decision.rules]
    assert approval_for(policy, "send_internal_notification", stored).approvers == 2


def test_without_anyone_to_approve_amounts_an_unjudged_one_is_held() -> None:
    policy = policy_with(
        money=RATES, amount_limits={"standard": {"block_above": "50000"}}, amount_approval=None
    )

    decision = evaluate(policy, FACTS, about("10.00", "CHF"))

    assert decision.verdict == Verdict.LOW_CONFIDENCE
    assert [r.text for r in decision.refusing_rules] == [
        "10.00 CHF: no rate for CHF, a person decides"
    ]


def test_a_limit_per_effect_judges_the_effect_s_money_only() -> None:
    shop = yaml.safe_load((REPO / "policy" / "examples" / "shop-1.yaml").read_text("utf-8"))
    for limit in shop["amount_limits"].values():
        limit["effects"] = ["issue_refund"]
    shop["money"] = RATES
    policy = parse_policy_text(yaml.safe_dump(shop))
    standard = EventFacts(None, None, "standard")
    refund = Interpretation(
        "refund",
        "refunds",
        "issue_refund",
        confidence=0.9,
        amounts={"amount": Money(Decimal("800"), "SEK")},
    )
    ticket = Interpretation(
        "refund",
        "refunds",
        "open_ticket",
        confidence=0.9,
        amount=Decimal("900"),
        currency="EUR",
        amounts={"amount": Money(Decimal("900"), "EUR")},
    )
    missing = Interpretation("refund", "refunds", "issue_refund", confidence=0.9)

    assert evaluate(policy, standard, refund).verdict == Verdict.EXECUTE  # 69.04 EUR, under 75
    assert evaluate(policy, standard, ticket).verdict == Verdict.EXECUTE
    assert [r.text for r in evaluate(policy, standard, missing).refusing_rules] == [
        "the amount is missing, a person decides"
    ]


@pytest.mark.parametrize(
    ("rates", "problem"),
    [
        ({"SEK": "0"}, "greater than 0"),
        ({"SEK": "-0.08"}, "greater than 0"),
        ({"EUR": "1.1"}, "the base currency's own rate is 1"),
        ({"sek": "0.08"}, "three-letter code in capitals"),
    ],
)
def test_a_rate_policy_cannot_convert_with_is_refused(rates: dict[str, str], problem: str) -> None:
    with pytest.raises(ValidationError, match=problem):
        PolicyDocument.model_validate(
            {**policy_with().model_dump(mode="json"), "money": {**RATES, "rates": rates}}
        )


def test_a_rate_change_changes_the_checksum_and_a_version_without_money_keeps_its_own() -> None:
    """The checksums the shipped documents had before money and per-effect limits existed."""
    shipped = {
        DEFAULTS_DIR / "policy-1.yaml": "9bfc0f6c09c03e90839e8215032a73fd",
        DEFAULTS_DIR / "default-1.yaml": "3d95a3950b9c01e1850d99b681225ff0",
        REPO / "policy" / "examples" / "shop-1.yaml": "6dc4e10cc91a0040af4def1eb9208b79",
    }
    for path, checksum in shipped.items():
        document = parse_policy_text(path.read_text(encoding="utf-8"))
        assert document.checksum().startswith(checksum), path
        assert "money" not in document.stored()
        assert all("effects" not in limit for limit in document.stored()["amount_limits"].values())
    dearer = {**RATES, "rates": {"SEK": "0.0900"}}
    assert policy_with(money=RATES).checksum() != policy_with(money=dearer).checksum()
