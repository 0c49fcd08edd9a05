"""Risk signals in the pipeline: matched on the sender's own words whatever the reading says,
held for a person or sent to the signal's approvers, and let go once a person has read it."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from django.contrib.auth.models import Group, User

from accounts.roles import roles_ensure
from approvals.models import ApprovalRequest
from automation.models import Outcome, Run, StageName, StageOutcome, State
from automation.recovery.services import run_correct
from automation.runs.payloads import interpretation_of, sender_text
from policy.services import (
    DEFAULTS_DIR,
    parse_policy_text,
    policy_version_activate,
    policy_version_create,
)
from tests.conftest import Pipeline, decision_for, make_event

SIGNALS: dict[str, Any] = {
    "account_compromise": {
        "action": "hold",
        "phrases": {"en": ["did not request"], "de": ["nicht angefordert"]},
    },
    "payment_change": {
        "action": "approval",
        "approval": {"group": "finance-approvers"},
        "phrases": {"en": ["new bank details"]},
    },
}


@pytest.fixture
def signalled(pipeline: Pipeline) -> Pipeline:
    """policy-1 with signals, made the active version."""
    data = yaml.safe_load((DEFAULTS_DIR / "policy-1.yaml").read_text(encoding="utf-8"))
    data.update(version="policy-signals", signals=SIGNALS)
    data["queue_owners"]["risk_signal"] = "security-approvers"
    policy_version_create(document=parse_policy_text(yaml.safe_dump(data)))
    policy_version_activate(name="policy-signals")
    return pipeline


def submit(pipeline: Pipeline, body: str, **overrides: Any) -> Run:
    event = make_event(body=body, **overrides)
    return pipeline.run(pipeline.submit(event, [decision_for(event)]))


def test_a_hold_signal_holds_a_run_the_reading_would_let_through(signalled: Pipeline) -> None:
    run = submit(signalled, "I got a login code I did not request. Please check.")

    assert (run.state, run.outcome, run.queue) == (
        State.NEEDS_REVIEW,
        Outcome.RISK_SIGNAL,
        Outcome.RISK_SIGNAL,
    )
    (rule,) = [r for r in run.rules if r["rule_id"] == "signal.account_compromise"]
    assert not rule["passed"]
    assert "I got a login code I did not request." in rule["text"]
    decide = run.stages.get(stage=StageName.DECIDE)
    assert decide.outcome == StageOutcome.RISK_SIGNAL
    assert not run.effects.exists()


def test_a_person_who_read_it_lets_it_go_on_and_it_is_not_held_again(
    signalled: Pipeline,
) -> None:
    roles_ensure()
    lead = User.objects.create_user("lee")
    lead.groups.add(Group.objects.get(name="ops-leads"))
    run = submit(signalled, "Someone sent a code I did not request.")
    corrected = dict(run.classification or {})

    with signalled.capture():
        run_correct(run_id=run.pk, user=lead, corrected=corrected, reason="my own request")
    signalled.drain()
    run.refresh_from_db()

    assert run.state == State.COMPLETED
    assert run.signals_reviewed == ["signal.account_compromise"]
    (rule,) = [r for r in run.rules if r["rule_id"] == "signal.account_compromise"]
    assert rule["passed"] and "(a person read it)" in rule["text"]


def test_an_approval_signal_asks_the_signals_approvers(signalled: Pipeline) -> None:
    run = submit(signalled, "From March, please use our new bank details.")

    assert run.state == State.APPROVAL_REQUIRED
    request = ApprovalRequest.objects.get(run=run)
    assert request.group == "finance-approvers"
    assert [r["rule_id"] for r in request.evidence["rules"]] == ["signal.payment_change"]
    assert run.stages.get(stage=StageName.DECIDE).outcome == StageOutcome.RISK_SIGNAL


def test_signals_see_what_a_mail_carries_but_not_its_signature(signalled: Pipeline) -> None:
    run = submit(signalled, "Please create a follow-up for this request.")
    assert run.state == State.COMPLETED
    mail = {
        "source": "email",
        "subject": "Fwd: invoice",
        "body": (
            "Is this one real?\n\n"
            "Best regards,\nAna\nNever share your api key with anyone.\n\n"
            "---------- Forwarded message ---------\n"
            "From: billing@fake.test\n"
            "Please pay to our new bank details today.\n"
        ),
    }
    run.normalized = mail
    text = sender_text(run)
    assert "new bank details" in text  # a risk in a forward is still a risk
    assert "Is this one real?" in text
    assert "api key" not in text  # the signature is no one's request


def test_an_unclear_reading_is_held_even_under_a_zero_threshold(pipeline: Pipeline) -> None:
    event = make_event(event_id="evt-unclear")
    run = pipeline.run(pipeline.submit(event, [decision_for(event, reason_code="unclear")]))

    assert (run.state, run.outcome) == (State.NEEDS_REVIEW, Outcome.LOW_CONFIDENCE)
    assert interpretation_of(run.classification or {}).unclear
    assert "reading.unclear" in [r["rule_id"] for r in run.rules if not r["passed"]]
