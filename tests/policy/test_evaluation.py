"""policy-1 read as rules: evaluate() checks the model's reading against the request.

Pure unit tests: no database, no clock. The policy is the shipped YAML document.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from policy.evaluation import (
    Decision,
    EventFacts,
    FiredRule,
    Interpretation,
    Verdict,
    check_request_allowed,
    evaluate,
)
from policy.schemas import PolicyDocument
from policy.services import DEFAULTS_DIR, parse_policy_text

POLICY_1_PATH = DEFAULTS_DIR / "policy-1.yaml"

ROUTES = [
    ("support", "service_desk"),
    ("billing", "finance"),
    ("sales", "commercial"),
    ("security", "security_review"),
]
EXECUTED_EFFECTS = ["create_follow_up", "send_internal_notification"]


@pytest.fixture(scope="module")
def policy_1() -> PolicyDocument:
    return parse_policy_text(Path(POLICY_1_PATH).read_text(encoding="utf-8"))


def policy_with(**changes: Any) -> PolicyDocument:
    """policy-1 with some top-level keys replaced, parsed like any policy file."""
    data = yaml.safe_load(Path(POLICY_1_PATH).read_text(encoding="utf-8"))
    data.update(changes)
    return parse_policy_text(yaml.safe_dump(data))


def facts(request_type: str = "support", action: str = "create_follow_up") -> EventFacts:
    return EventFacts(request_type=request_type, requested_action=action, account_tier="standard")


def reading(
    category: str = "support",
    route: str = "service_desk",
    effect: str = "create_follow_up",
    confidence: float | None = None,
) -> Interpretation:
    return Interpretation(category=category, route=route, effect=effect, confidence=confidence)


def rule_flags(decision: Decision) -> list[tuple[str, bool]]:
    return [(r.rule_id, r.passed) for r in decision.rules]


def refusing_ids(decision: Decision) -> list[str]:
    return [r.rule_id for r in decision.refusing_rules]


# --- the shipped document -------------------------------------------------------------------


def test_policy_1_document_states_the_reference_rules(policy_1: PolicyDocument) -> None:
    assert policy_1.version == "policy-1"
    assert policy_1.routes == dict(ROUTES)
    assert policy_1.allowed_effects == [
        "create_follow_up",
        "queue_account_review",
        "send_internal_notification",
    ]
    assert set(policy_1.approvals) == {"queue_account_review"}
    assert policy_1.confidence.default == 0.0


# --- routes: agreement executes -------------------------------------------------------------


@pytest.mark.parametrize("effect", EXECUTED_EFFECTS)
@pytest.mark.parametrize(("request_type", "route"), ROUTES)
def test_each_request_type_executes_on_its_route_when_reading_agrees(
    policy_1: PolicyDocument, request_type: str, route: str, effect: str
) -> None:
    decision = evaluate(policy_1, facts(request_type, effect), reading(request_type, route, effect))

    assert decision.verdict == Verdict.EXECUTE
    assert decision.route == route
    assert decision.effect == effect
    assert decision.approval is None
    assert decision.refusing_rules == []


def test_executed_decision_lists_every_rule_checked_in_order(policy_1: PolicyDocument) -> None:
    decision = evaluate(policy_1, facts("billing"), reading("billing", "finance"))

    assert rule_flags(decision) == [
        ("allowlist.create_follow_up", True),
        ("match.category", True),
        ("route.billing", True),
        ("match.effect", True),
        ("proposal.create_follow_up", True),
    ]
    assert all(isinstance(r, FiredRule) and r.text for r in decision.rules)


def test_evaluation_is_deterministic(policy_1: PolicyDocument) -> None:
    first = evaluate(policy_1, facts("sales"), reading("sales", "commercial"))
    second = evaluate(policy_1, facts("sales"), reading("sales", "commercial"))

    assert first == second


# --- contradictions block -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("request_type", "category"),
    [("support", "billing"), ("billing", "sales"), ("sales", "security"), ("security", "support")],
)
def test_category_contradicting_request_type_blocks(
    policy_1: PolicyDocument, request_type: str, category: str
) -> None:
    route = dict(ROUTES)[request_type]
    decision = evaluate(policy_1, facts(request_type), reading(category, route))

    assert decision.verdict == Verdict.BLOCK
    assert decision.route is None
    assert decision.effect is None
    assert refusing_ids(decision) == ["match.category"]
    refusing = decision.refusing_rules[0]
    assert repr(category) in refusing.text
    assert repr(request_type) in refusing.text


def test_category_and_route_of_another_type_block_on_both_rules(
    policy_1: PolicyDocument,
) -> None:
    # The model read a sales request as billing, routed consistently with its own reading.
    decision = evaluate(policy_1, facts("sales"), reading("billing", "finance"))

    assert decision.verdict == Verdict.BLOCK
    assert refusing_ids(decision) == ["match.category", "route.sales"]


@pytest.mark.parametrize(("request_type", "route"), ROUTES)
def test_wrong_route_blocks_on_the_request_types_route_rule(
    policy_1: PolicyDocument, request_type: str, route: str
) -> None:
    wrong = next(r for t, r in ROUTES if r != route)
    decision = evaluate(policy_1, facts(request_type), reading(request_type, wrong))

    assert decision.verdict == Verdict.BLOCK
    assert refusing_ids(decision) == [f"route.{request_type}"]
    assert repr(route) in decision.refusing_rules[0].text


def test_request_type_without_a_route_in_policy_blocks() -> None:
    policy = policy_with(routes={"support": "service_desk"})

    decision = evaluate(policy, facts("billing"), reading("billing", "finance"))

    assert decision.verdict == Verdict.BLOCK
    assert refusing_ids(decision) == ["route.billing"]


def test_effect_different_from_requested_action_blocks(policy_1: PolicyDocument) -> None:
    decision = evaluate(
        policy_1,
        facts("support", "create_follow_up"),
        reading(effect="send_internal_notification"),
    )

    assert decision.verdict == Verdict.BLOCK
    assert decision.effect is None
    assert refusing_ids(decision) == ["match.effect"]


def test_effect_needing_approval_in_place_of_requested_action_blocks(
    policy_1: PolicyDocument,
) -> None:
    # The model may not escalate a follow-up into an account review (or the other way round).
    decision = evaluate(
        policy_1,
        facts("security", "create_follow_up"),
        reading("security", "security_review", "queue_account_review"),
    )

    assert decision.verdict == Verdict.BLOCK
    assert decision.approval is None
    assert refusing_ids(decision) == ["match.effect"]


def test_effect_outside_allowlist_in_reading_blocks_on_match_and_allowlist(
    policy_1: PolicyDocument,
) -> None:
    decision = evaluate(policy_1, facts(), reading(effect="delete_account"))

    assert decision.verdict == Verdict.BLOCK
    assert refusing_ids(decision) == ["match.effect", "proposal.delete_account"]


def test_blocked_decision_lists_every_rule_checked(policy_1: PolicyDocument) -> None:
    decision = evaluate(policy_1, facts("support"), reading("support", "finance"))

    assert rule_flags(decision) == [
        ("allowlist.create_follow_up", True),
        ("match.category", True),
        ("route.support", False),
        ("match.effect", True),
        ("proposal.create_follow_up", True),
    ]


# --- the allowlist --------------------------------------------------------------------------


@pytest.mark.parametrize("action", ["delete_account", "refund_payment", ""])
def test_requested_action_outside_allowlist_is_unsupported(
    policy_1: PolicyDocument, action: str
) -> None:
    # Whatever the model read: the request itself asks for something this policy never does.
    decision = evaluate(policy_1, facts("billing", action), reading("billing", "finance", action))

    assert decision.verdict == Verdict.UNSUPPORTED
    assert decision.route is None
    assert decision.effect is None
    assert rule_flags(decision) == [(f"allowlist.{action}", False)]
    assert "is not in the allowlist" in decision.rules[0].text


def test_unsupported_is_decided_before_the_reading_is_looked_at(
    policy_1: PolicyDocument,
) -> None:
    decision = evaluate(
        policy_1, facts("support", "delete_account"), reading("sales", "finance", "nonsense")
    )

    assert decision.verdict == Verdict.UNSUPPORTED
    assert [r.rule_id for r in decision.rules] == ["allowlist.delete_account"]


@pytest.mark.parametrize(
    "action", ["create_follow_up", "queue_account_review", "send_internal_notification"]
)
def test_check_request_allowed_passes_allowlisted_actions(
    policy_1: PolicyDocument, action: str
) -> None:
    rule = check_request_allowed(policy_1, facts("support", action))

    assert rule == FiredRule(
        rule_id=f"allowlist.{action}",
        passed=True,
        text=f"requested action {action!r} is in the allowlist",
    )


def test_check_request_allowed_refuses_other_actions(policy_1: PolicyDocument) -> None:
    rule = check_request_allowed(policy_1, facts("support", "wire_money"))

    assert rule.rule_id == "allowlist.wire_money"
    assert rule.passed is False
    assert rule.text == "requested action 'wire_money' is not in the allowlist"
    assert rule.as_dict() == {
        "rule_id": "allowlist.wire_money",
        "passed": False,
        "text": "requested action 'wire_money' is not in the allowlist",
    }


def test_check_request_allowed_follows_the_policys_allowlist() -> None:
    narrow = policy_with(allowed_effects=["create_follow_up"], approvals={})

    assert check_request_allowed(narrow, facts("support", "create_follow_up")).passed
    assert not check_request_allowed(narrow, facts("support", "send_internal_notification")).passed


# --- approvals ------------------------------------------------------------------------------


def test_account_review_needs_one_security_approver(policy_1: PolicyDocument) -> None:
    decision = evaluate(
        policy_1,
        facts("security", "queue_account_review"),
        reading("security", "security_review", "queue_account_review"),
    )

    assert decision.verdict == Verdict.APPROVE
    assert decision.route == "security_review"
    assert decision.effect == "queue_account_review"
    assert decision.approval is not None
    assert decision.approval.group == "security-approvers"
    assert decision.approval.approvers == 1
    assert decision.approval.expires_after_hours == 72
    assert decision.approval.escalate_after_hours == 24
    assert decision.approval.escalate_to == "ops-leads"
    assert rule_flags(decision) == [
        ("allowlist.queue_account_review", True),
        ("match.category", True),
        ("route.security", True),
        ("match.effect", True),
        ("proposal.queue_account_review", True),
        ("approval.queue_account_review", True),
    ]
    assert decision.rules[-1].text == (
        "'queue_account_review' needs 1 approval from 'security-approvers'"
    )


def test_account_review_on_any_request_type_needs_approval(policy_1: PolicyDocument) -> None:
    decision = evaluate(
        policy_1,
        facts("billing", "queue_account_review"),
        reading("billing", "finance", "queue_account_review"),
    )

    assert decision.verdict == Verdict.APPROVE
    assert decision.route == "finance"


def test_account_review_with_contradicting_reading_blocks_without_approval(
    policy_1: PolicyDocument,
) -> None:
    decision = evaluate(
        policy_1,
        facts("security", "queue_account_review"),
        reading("support", "security_review", "queue_account_review"),
    )

    assert decision.verdict == Verdict.BLOCK
    assert decision.approval is None
    assert "approval.queue_account_review" not in [r.rule_id for r in decision.rules]


def test_two_approver_rule_is_carried_into_the_decision() -> None:
    policy = policy_with(
        approvals={"queue_account_review": {"group": "security-approvers", "approvers": 2}}
    )

    decision = evaluate(
        policy,
        facts("security", "queue_account_review"),
        reading("security", "security_review", "queue_account_review"),
    )

    assert decision.verdict == Verdict.APPROVE
    assert decision.approval is not None
    assert decision.approval.approvers == 2
    assert "needs 2 approvals" in decision.rules[-1].text


# --- confidence -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def confident() -> PolicyDocument:
    return policy_with(confidence={"default": 0.8, "per_category": {}})


def test_policy_1_has_no_confidence_threshold(policy_1: PolicyDocument) -> None:
    decision = evaluate(policy_1, facts(), reading(confidence=None))

    assert decision.verdict == Verdict.EXECUTE
    assert not any(r.rule_id.startswith("confidence.") for r in decision.rules)


def test_confidence_below_default_threshold_is_low_confidence(
    confident: PolicyDocument,
) -> None:
    decision = evaluate(confident, facts(), reading(confidence=0.5))

    assert decision.verdict == Verdict.LOW_CONFIDENCE
    assert decision.route == "service_desk"
    assert decision.effect == "create_follow_up"
    assert decision.approval is None
    assert refusing_ids(decision) == ["confidence.support"]
    assert decision.refusing_rules[0].text == ("confidence 0.50 must reach 0.80 for 'support'")


def test_confidence_at_the_threshold_executes(confident: PolicyDocument) -> None:
    decision = evaluate(confident, facts(), reading(confidence=0.8))

    assert decision.verdict == Verdict.EXECUTE
    assert rule_flags(decision) == [
        ("allowlist.create_follow_up", True),
        ("match.category", True),
        ("route.support", True),
        ("match.effect", True),
        ("proposal.create_follow_up", True),
        ("confidence.support", True),
    ]


def test_missing_confidence_under_a_threshold_is_low_confidence(
    confident: PolicyDocument,
) -> None:
    decision = evaluate(confident, facts(), reading(confidence=None))

    assert decision.verdict == Verdict.LOW_CONFIDENCE
    assert refusing_ids(decision) == ["confidence.support"]
    # Said as what it is: no confidence, not a confidence of 0.
    assert decision.refusing_rules[0].text == (
        "the reading gave no confidence; 0.80 is needed for 'support'"
    )


def test_confident_account_review_still_needs_approval(confident: PolicyDocument) -> None:
    decision = evaluate(
        confident,
        facts("security", "queue_account_review"),
        reading("security", "security_review", "queue_account_review", confidence=0.95),
    )

    assert decision.verdict == Verdict.APPROVE
    assert [r.rule_id for r in decision.rules][-2:] == [
        "confidence.security",
        "approval.queue_account_review",
    ]


def test_unconfident_account_review_is_held_before_approval(confident: PolicyDocument) -> None:
    decision = evaluate(
        confident,
        facts("security", "queue_account_review"),
        reading("security", "security_review", "queue_account_review", confidence=0.3),
    )

    assert decision.verdict == Verdict.LOW_CONFIDENCE
    assert decision.approval is None
    assert "approval.queue_account_review" not in [r.rule_id for r in decision.rules]


def test_contradiction_blocks_even_when_confidence_is_low(confident: PolicyDocument) -> None:
    decision = evaluate(confident, facts("support"), reading("billing", confidence=0.1))

    assert decision.verdict == Verdict.BLOCK
    assert refusing_ids(decision) == ["match.category"]
    assert not any(r.rule_id.startswith("confidence.") for r in decision.rules)


@pytest.mark.parametrize(
    ("request_type", "route", "confidence", "verdict"),
    [
        # billing's own threshold (0.95) is stricter than the default
        ("billing", "finance", 0.9, Verdict.LOW_CONFIDENCE),
        ("billing", "finance", 0.95, Verdict.EXECUTE),
        # sales' own threshold (0.5) is looser than the default
        ("sales", "commercial", 0.6, Verdict.EXECUTE),
        ("sales", "commercial", 0.4, Verdict.LOW_CONFIDENCE),
        # support has none of its own: the default (0.8) applies
        ("support", "service_desk", 0.6, Verdict.LOW_CONFIDENCE),
        ("support", "service_desk", 0.85, Verdict.EXECUTE),
    ],
)
def test_per_category_threshold_overrides_the_default(
    request_type: str, route: str, confidence: float, verdict: Verdict
) -> None:
    policy = policy_with(
        confidence={"default": 0.8, "per_category": {"billing": 0.95, "sales": 0.5}}
    )

    decision = evaluate(
        policy, facts(request_type), reading(request_type, route, confidence=confidence)
    )

    assert decision.verdict == verdict
    assert decision.rules[-1].rule_id == f"confidence.{request_type}"
    assert decision.rules[-1].passed is (verdict == Verdict.EXECUTE)


def test_per_category_zero_exempts_the_category_from_the_default() -> None:
    policy = policy_with(confidence={"default": 0.8, "per_category": {"support": 0.0}})

    decision = evaluate(policy, facts(), reading(confidence=None))

    assert decision.verdict == Verdict.EXECUTE
    assert not any(r.rule_id.startswith("confidence.") for r in decision.rules)


def test_threshold_is_taken_for_the_read_category() -> None:
    # The reading agrees with the request, so category and request type are the same here;
    # the per-category key is the category name.
    policy = policy_with(confidence={"default": 0.0, "per_category": {"security": 0.9}})

    low = evaluate(
        policy,
        facts("security", "queue_account_review"),
        reading("security", "security_review", "queue_account_review", confidence=0.89),
    )
    other = evaluate(policy, facts(), reading(confidence=0.1))

    assert low.verdict == Verdict.LOW_CONFIDENCE
    assert other.verdict == Verdict.EXECUTE


# --- requests that state nothing (e-mail): the reading is held to policy alone ------------

UNSTATED = EventFacts(request_type=None, requested_action=None, account_tier="standard")


def test_an_unstated_request_passes_the_allowlist_check_before_reading(
    policy_1: PolicyDocument,
) -> None:
    rule = check_request_allowed(policy_1, UNSTATED)
    assert (rule.rule_id, rule.passed) == ("allowlist.unstated", True)


@pytest.mark.parametrize(("category", "route"), ROUTES)
def test_an_unstated_request_is_routed_by_policy_for_the_category_read(
    policy_1: PolicyDocument, category: str, route: str
) -> None:
    decision = evaluate(
        policy_1, UNSTATED, Interpretation(category, route, "create_follow_up", 0.8)
    )
    assert (decision.verdict, decision.route) == (Verdict.EXECUTE, route)
    assert [r.rule_id for r in decision.rules] == [
        "allowlist.unstated",
        f"route.{category}",
        "proposal.create_follow_up",
    ]


def test_an_unstated_request_read_with_the_wrong_route_is_blocked(
    policy_1: PolicyDocument,
) -> None:
    decision = evaluate(
        policy_1, UNSTATED, Interpretation("billing", "commercial", "create_follow_up", 0.8)
    )
    assert decision.verdict == Verdict.BLOCK
    assert [r.rule_id for r in decision.refusing_rules] == ["route.billing"]


def test_an_unstated_request_cannot_propose_an_effect_outside_the_allowlist(
    policy_1: PolicyDocument,
) -> None:
    decision = evaluate(
        policy_1, UNSTATED, Interpretation("billing", "finance", "issue_refund", 0.8)
    )
    assert decision.verdict == Verdict.BLOCK
    assert [r.rule_id for r in decision.refusing_rules] == ["proposal.issue_refund"]


def test_an_unstated_request_still_needs_the_approvals_policy_names(
    policy_1: PolicyDocument,
) -> None:
    decision = evaluate(
        policy_1,
        UNSTATED,
        Interpretation("security", "security_review", "queue_account_review", 0.8),
    )
    assert decision.verdict == Verdict.APPROVE
    assert decision.approval is not None and decision.approval.group == "security-approvers"


def test_an_amount_rule_says_what_happened_not_the_condition() -> None:
    policy = policy_with(
        amount_limits={"priority": {"approval_above": "5000", "block_above": "10000"}},
        amount_approval={"group": "finance-approvers"},
    )
    priority = EventFacts(
        request_type="billing",
        requested_action="send_internal_notification",
        account_tier="priority",
    )

    def amount_rule(amount: str) -> tuple[bool, str]:
        read = Interpretation(
            "billing", "finance", "send_internal_notification", amount=Decimal(amount)
        )
        decision = evaluate(policy, priority, read)
        rule = next(r for r in decision.rules if r.rule_id == "amount.priority.approval")
        return rule.passed, rule.text

    assert amount_rule("1250.00") == (
        True,
        "amount 1250.00 needs no approval: priority accounts need one above 5000",
    )
    assert amount_rule("7500") == (
        False,
        "amount 7500 is over 5000: a person approves it for priority accounts",
    )
