"""Risk signals: policy's own phrases, matched on the sender's words, decide whatever the
reading says. Pure unit tests: no database, no clock."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from policy.evaluation import EventFacts, Interpretation, Verdict, evaluate
from policy.risk_signals import fold, match_signals
from policy.schemas import PolicyDocument, SignalRule
from policy.services import DEFAULT_VERSION, DEFAULTS_DIR, PolicyError, parse_policy_text
from tests.policy.test_evaluation import policy_with

APPROVERS = {"group": "finance-approvers"}
SIGNALS: dict[str, Any] = {
    "account_compromise": {
        "version": 3,
        "action": "hold",
        "phrases": {"en": ["did not request", "password was changed"], "de": ["passwort geändert"]},
    },
    "payment_change": {
        "action": "approval",
        "approval": APPROVERS,
        "phrases": {"en": ["new bank details"], "fr": ["nouvelles coordonnées bancaires"]},
        "patterns": [r"\biban\b.{0,40}\bchanged?\b"],
    },
    "legal_threat": {"action": "block", "phrases": {"en": ["see you in court"]}},
}
MAIL = EventFacts(request_type=None, requested_action=None, account_tier="standard")
BILLING = Interpretation("billing", "finance", "send_internal_notification", confidence=0.9)


@pytest.fixture(scope="module")
def policy() -> PolicyDocument:
    return policy_with(signals=SIGNALS)


def decide(policy: PolicyDocument, text: str, reading: Interpretation = BILLING) -> Any:
    return evaluate(policy, MAIL, reading, text=text)


def test_phrases_match_whole_words_ignoring_case_accents_and_line_breaks(
    policy: PolicyDocument,
) -> None:
    text = "Hallo,\nunser PASSWORT\ngeandert wurde heute. Bitte prüfen."
    (hit,) = match_signals(policy, text)
    assert (hit.name, hit.version, hit.matched) == ("account_compromise", 3, "passwort geändert")
    assert hit.sentence == "Hallo, unser PASSWORT geandert wurde heute."
    assert match_signals(policy, "we did not requested anything") == []  # a whole phrase only
    assert fold("  Coordonnées\tBANCAIRES ") == "coordonnees bancaires"


def test_a_hold_sends_the_run_to_a_person_whatever_the_reading(policy: PolicyDocument) -> None:
    sure = Interpretation("support", "service_desk", "create_follow_up", confidence=0.99)
    decision = decide(policy, "I got a code I did not request. Is that normal?", sure)
    assert decision.verdict == Verdict.RISK_SIGNAL
    (signal,) = [r for r in decision.rules if r.rule_id == "signal.account_compromise"]
    assert not signal.passed
    assert "did not request" in signal.text and "I got a code I did not request." in signal.text


def test_an_approval_signal_makes_a_straight_through_effect_wait(policy: PolicyDocument) -> None:
    decision = decide(policy, "Please use our new bank details from March.")
    assert decision.verdict == Verdict.APPROVE
    assert decision.approval is not None and decision.approval.group == "finance-approvers"
    assert decide(policy, "Our IBAN has changed, pay there.").verdict == Verdict.APPROVE
    assert decide(policy, "Please pay invoice 4411.").verdict == Verdict.EXECUTE


def test_block_wins_over_hold_and_hold_over_approval(policy: PolicyDocument) -> None:
    text = "New bank details attached. I did not request this change. See you in court."
    decision = decide(policy, text)
    assert decision.verdict == Verdict.BLOCK
    fired = [r.rule_id for r in decision.rules if r.rule_id.startswith("signal.")]
    assert fired == ["signal.account_compromise", "signal.legal_threat", "signal.payment_change"]
    assert decide(policy, "New bank details. I did not request it.").verdict == Verdict.RISK_SIGNAL


def test_only_the_text_given_is_read(policy: PolicyDocument) -> None:
    # The pipeline passes the sender's own words: a forwarded phishing mail's "new bank
    # details" is not in them, so it cannot turn a report into a payment change.
    assert decide(policy, "FYI, this looks fake to me.").verdict == Verdict.EXECUTE


def test_an_unclear_reading_goes_to_a_person_even_without_thresholds(
    policy: PolicyDocument,
) -> None:
    unclear = Interpretation("support", "service_desk", "create_follow_up", 0.27, unclear=True)
    decision = decide(policy, "ok?", unclear)
    assert decision.verdict == Verdict.LOW_CONFIDENCE
    assert [r.rule_id for r in decision.refusing_rules] == ["reading.unclear"]


@pytest.mark.parametrize(
    ("rule", "problem"),
    [
        ({"action": "hold"}, "at least one phrase or pattern"),
        ({"action": "approval", "phrases": {"en": ["x y"]}}, "approval"),
        ({"action": "hold", "approval": APPROVERS, "phrases": {"en": ["x y"]}}, "approval"),
        ({"action": "hold", "phrases": {"english": ["x y"]}}, "two-letter language code"),
        ({"action": "hold", "patterns": ["(a+)+$"]}, "repeated group"),
        ({"action": "hold", "patterns": ["(unclosed"]}, "not a regular expression"),
        ({"action": "maybe", "phrases": {"en": ["x y"]}}, "action"),
    ],
)
def test_a_signal_rule_that_cannot_work_is_refused(rule: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValidationError, match=problem):
        SignalRule.model_validate(rule)


def test_signal_names_are_rule_ids() -> None:
    with pytest.raises(PolicyError, match=r"signals\.Account Compromise!"):
        policy_with(signals={"Account Compromise!": SIGNALS["legal_threat"]})


def test_a_version_without_signals_keeps_its_checksum() -> None:
    plain = policy_with()
    assert '"signals"' not in plain.canonical_json()
    assert '"signals"' in policy_with(signals=SIGNALS).canonical_json()


@pytest.fixture(scope="module")
def default_policy() -> PolicyDocument:
    return parse_policy_text((DEFAULTS_DIR / f"{DEFAULT_VERSION}.yaml").read_text())


@pytest.mark.parametrize(
    ("text", "signal"),
    [
        ("A code came that I didn\u2019t request.", "account_compromise"),  # typographic '
        ("Ich habe den Bestätigungscode nie angefordert.", "sign_in_factor_change"),
        ("Mon ordinateur a été volé hier soir.", "account_compromise"),
        (
            "Vorrei cambiare il numero per la verifica: nuovo numero in allegato.",
            "sign_in_factor_change",
        ),
        ("Hemos recibido nuevos datos bancarios del proveedor.", "payment_change"),
        ("We zien aanmeldingen vanuit een land waar niemand van ons is.", "account_compromise"),
        ("Could you reset the MFA and change the email on my account?", "account_access_change"),
        ("Può reimpostare la password e aggiungere un utente?", "account_access_change"),
        ("Ich kann mich seit heute nicht mehr anmelden.", "account_access"),
        ("Sinds vanochtend kan ik niet inloggen.", "account_access"),
    ],
)
def test_the_default_policy_hears_risk_in_six_languages(
    default_policy: PolicyDocument, text: str, signal: str
) -> None:
    assert signal in [hit.name for hit in match_signals(default_policy, text)]


def test_the_default_policy_lets_an_ordinary_request_through(
    default_policy: PolicyDocument,
) -> None:
    assert match_signals(default_policy, "Please send us a quote for 40 more seats.") == []
