"""Money in its currency, through the real pipeline, for an insurer's claims desk (a business
of the test's own): amount limits judged in the policy's base currency after conversion with
the version's rates, an amount in a currency without a rate decided by a person, and limits
written per effect, so that a claim whose repair estimate moves no money is not held by
them. A new rate is a new version: the diff shows it and a simulation counts what it moves."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from accounts.roles import roles_ensure
from approvals.models import ApprovalRequest
from automation.models import Effect, Run, State
from automation.recovery.simulation import simulation_process, simulation_start
from policy.schemas import NEW_VERSION, PolicyDocument
from policy.services import policy_version_activate, policy_version_create
from tests.conftest import Pipeline

CATALOGUE: dict[str, Any] = {
    "request_types": {
        "motor_claim": {
            "label": "Motor claim",
            "description": "A policyholder reports damage to a vehicle.",
            "fields": {
                "claim_number": {"type": "reference", "label": "Claim number"},
                # The garage's estimate: a number the claim mentions, not money paid out.
                "amount": {"type": "amount", "label": "Repair estimate"},
            },
        },
        "payout_request": {
            "label": "Payout",
            "description": "A settled claim is to be paid to the policyholder.",
            "fields": {
                "claim_number": {"type": "reference", "label": "Claim number"},
                "amount": {"type": "amount", "label": "Amount to pay"},
            },
        },
    },
    "routes": {
        "claims_desk": {"label": "Claims desk", "group": "ops-leads"},
        "payments": {"label": "Payments", "group": "finance-approvers"},
    },
    "effects": {
        "open_claim": {
            "label": "Open a claim",
            "description": "A claim file for the claims desk.",
            "adapter": "record",
            "record": {"group": "ops-leads"},
            "parameters": {"claim": {"value": "{{ fields.claim_number }}", "type": "reference"}},
        },
        "issue_payout": {
            "label": "Pay the policyholder",
            "description": "A payment to the policyholder's account.",
            "adapter": "record",
            "record": {"group": "finance-approvers"},
            "parameters": {
                "claim": {"value": "{{ fields.claim_number }}", "type": "reference"},
                "amount": {"value": "{{ fields.amount }}", "type": "amount"},
            },
        },
    },
    "customer_attributes": {
        "tier": {"label": "Policyholder", "values": ["private", "fleet"]},
    },
}
RATES = {"base_currency": "EUR", "rates_as_of": "2026-12-01", "rates": {"SEK": "0.0863"}}
ROUTES = {"motor_claim": "claims_desk", "payout_request": "payments"}
EFFECTS = {"motor_claim": "open_claim", "payout_request": "issue_payout"}


def insurer(version: str, *, money: dict[str, Any] | None, **limit: Any) -> dict[str, Any]:
    """The insurer's policy: above 10,000 (in the base currency, with `money`) two finance
    approvers decide a payout."""
    return {
        "version": version,
        "routes": ROUTES,
        "allowed_effects": ["open_claim", "issue_payout"],
        "amount_limits": {tier: {"approval_above": "10000", **limit} for tier in ("private",)},
        "amount_approval": {"group": "finance-approvers", "approvers": 2},
        "money": money,
        "catalogue": CATALOGUE,
    }


def store(document: dict[str, Any], *, activate: bool = False) -> None:
    roles_ensure()
    version, _ = policy_version_create(
        document=PolicyDocument.model_validate(document, context=NEW_VERSION)
    )
    if activate:
        policy_version_activate(name=version.name)


@pytest.fixture
def desk(pipeline: Pipeline) -> Pipeline:
    """The test channel (a recorded reader), decided by insurer-1."""
    store(insurer("insurer-1", money=RATES, effects=["issue_payout"]), activate=True)
    return pipeline


def request(pipeline: Pipeline, event_id: str, kind: str, amount: str) -> Run:
    """A request of `kind` about `amount`, read as it says."""
    event = {
        "event_id": event_id,
        "source": "web_form",
        "request_type": kind,
        "subject": f"Claim CL-{event_id}",
        "body": f"Claim CL-{event_id}: {amount}.",
        "account_tier": "private",
        "requested_action": EFFECTS[kind],
    }
    reading = {
        "category": kind,
        "recommended_route": ROUTES[kind],
        "requested_effect": EFFECTS[kind],
        "reason_code": f"{kind}_request",
        "fields": {
            "claim_number": {"value": f"CL-{event_id}", "confidence": 1.0},
            "amount": {"value": amount, "confidence": 1.0},
        },
    }
    return pipeline.run(pipeline.submit(event, [{"type": "decision", "value": reading}]))


def rules(run: Run) -> dict[str, tuple[bool, str]]:
    return {r["rule_id"]: (r["passed"], r["text"]) for r in run.rules}


def approvers_wanted(run: Run) -> int:
    return ApprovalRequest.objects.get(run=run).required_approvals


def test_12400_sek_goes_straight_through_where_12400_eur_waits_for_two_approvers(
    desk: Pipeline,
) -> None:
    kronor = request(desk, "sek", "payout_request", "12 400,00 SEK")
    euros = request(desk, "eur", "payout_request", "12,400.00 EUR")

    assert kronor.state == State.COMPLETED
    assert Effect.objects.filter(run=kronor).exists()
    assert rules(kronor)["amount.private.approval"] == (
        True,
        "amount 12,400.00 SEK (1,070.12 EUR at the rate of 2026-12-01) needs no approval: "
        "private accounts need one above 10000 EUR",
    )
    assert euros.state == State.APPROVAL_REQUIRED
    assert approvers_wanted(euros) == 2
    assert rules(euros)["amount.private.approval"] == (
        False,
        "amount 12,400.00 EUR is over 10000 EUR: a person approves it for private accounts",
    )
    assert not Effect.objects.filter(run=euros).exists()


def test_an_amount_in_a_currency_without_a_rate_goes_to_a_person(desk: Pipeline) -> None:
    francs = request(desk, "chf", "payout_request", "12,400.00 CHF")

    assert francs.state == State.APPROVAL_REQUIRED
    assert approvers_wanted(francs) == 2
    assert rules(francs)["amount.private.unjudged"] == (
        False,
        "12,400.00 CHF: no rate for CHF, a person decides",
    )
    assert not Effect.objects.filter(run=francs).exists()


def test_without_an_approver_for_amounts_an_unjudged_amount_is_held(pipeline: Pipeline) -> None:
    document = insurer("insurer-block", money=RATES, effects=["issue_payout"])
    document["amount_limits"] = {"private": {"block_above": "50000", "effects": ["issue_payout"]}}
    del document["amount_approval"]
    store(document, activate=True)

    francs = request(pipeline, "chf-2", "payout_request", "400.00 CHF")

    assert francs.state == State.NEEDS_REVIEW
    assert "400.00 CHF: no rate for CHF, a person decides" in francs.failure_detail
    assert not Effect.objects.filter(run=francs).exists()


def test_a_claim_whose_effect_moves_no_money_is_not_held_by_an_amount_limit(
    desk: Pipeline,
) -> None:
    claim = request(desk, "claim", "motor_claim", "14,800.00 EUR")

    assert claim.state == State.COMPLETED
    assert not any(rule.startswith("amount.") for rule in rules(claim))


def test_a_limit_written_for_an_effect_that_carries_no_money_is_refused(policy: None) -> None:
    with pytest.raises(ValueError, match="open_claim, which carries no money"):
        insurer_document = insurer("insurer-x", money=RATES, effects=["open_claim"])
        PolicyDocument.model_validate(insurer_document, context=NEW_VERSION)


def test_a_rate_change_is_a_new_version_the_diff_shows_and_simulation_counts(
    desk: Pipeline, ops_lead: User
) -> None:
    # 9,924.50 EUR at 0.0863; 10,350.00 EUR at 0.0900, over the limit of 10,000.
    kronor = request(desk, "sek-3", "payout_request", "115,000.00 SEK")
    assert kronor.state == State.COMPLETED
    dearer = {**RATES, "rates_as_of": "2026-12-15", "rates": {"SEK": "0.0900"}}
    store(insurer("insurer-2", money=dearer, effects=["issue_payout"]))

    started = simulation_start(
        version="insurer-2",
        since=kronor.created_at,
        until=kronor.created_at,
        user=None,
        in_worker=False,
    )
    simulation = simulation_process(simulation_id=started.pk)
    [change] = simulation.changes
    assert (change["run"], change["old"], change["new"]) == (kronor.pk, "execute", "approve")

    client = Client()
    client.force_login(ops_lead)
    page = client.get(reverse("policy:detail", args=["insurer-2"])).content.decode()
    assert "-    SEK: &#x27;0.0863&#x27;" in page or "-    SEK: '0.0863'" in page
    assert "+    SEK: &#x27;0.0900&#x27;" in page or "+    SEK: '0.0900'" in page


def test_a_version_without_money_compares_numbers_as_before(pipeline: Pipeline) -> None:
    store(insurer("insurer-old", money=None), activate=True)

    kronor = request(pipeline, "sek-old", "payout_request", "12,400.00 SEK")
    claim = request(pipeline, "claim-old", "motor_claim", "14,800.00 EUR")

    assert (kronor.state, claim.state) == (State.APPROVAL_REQUIRED,) * 2
    assert rules(kronor)["amount.private.approval"] == (
        False,
        "amount 12400.00 is over 10000: a person approves it for private accounts",
    )
