"""The words people read for the codes that leave the console too: why a run is held (its
outcome), the groups work is routed to, and the business's own codes (request types, routes,
effects), whose words are its catalogue's.

The console's vocabulary (console.vocabulary) reads these tables and adds its own; the mail
and chat messages (notifications) read them here, below both, so that a message says
"Delivery failed" and "Change of bank details" where the database says `effect_unavailable`
and `review_bank_change`.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.codes import Outcome
from policy.selectors import Section, stored_businesses


@dataclass(frozen=True)
class Term:
    label: str
    explanation: str


def humanize(code: str) -> str:
    """Words for a code nobody named: `billing_keywords` → "Billing keywords"."""
    words = code.replace("_", " ").replace(".", " ").replace("-", " ").strip()
    return words[:1].upper() + words[1:]


OUTCOMES: dict[str, Term] = {
    Outcome.COMPLETED: Term("Done", "The run finished and its effect happened."),
    Outcome.IDEMPOTENT_REPLAY: Term(
        "Already received", "The same request was sent again; the first answer was repeated."
    ),
    Outcome.IDEMPOTENCY_CONFLICT: Term(
        "Reused request id", "A different request reused an id already taken; it was refused."
    ),
    Outcome.INVALID_EVENT: Term(
        "Unreadable request", "The request was malformed or missing required parts."
    ),
    Outcome.UNSUPPORTED_REQUEST: Term(
        "Not allowed", "The request asked for something this policy does not allow."
    ),
    Outcome.CLASSIFICATION_INVALID: Term(
        "Unusable reading", "The classifier's answer did not fit the expected shape."
    ),
    Outcome.EXTRACTION_INVALID: Term(
        "Fields need checking", "A field read from the request failed its checks."
    ),
    Outcome.LOW_CONFIDENCE: Term(
        "Unsure reading", "The reading was less sure than the policy requires."
    ),
    Outcome.RISK_SIGNAL: Term(
        "Risk signal", "The request mentions something policy wants a person to read first."
    ),
    Outcome.RETRY_EXHAUSTED: Term(
        "Classifier unavailable", "The classifier failed every attempt it was given."
    ),
    Outcome.POLICY_BLOCK: Term("Stopped by policy", "A policy rule refused the effect."),
    Outcome.APPROVAL_STALE: Term(
        "Approval out of date", "The run or policy changed after approval; a fresh one is needed."
    ),
    Outcome.APPROVAL_EXPIRED: Term(
        "Approval expired", "Nobody decided before the approval's deadline."
    ),
    Outcome.APPROVAL_REJECTED: Term("Rejected", "An approver rejected the effect."),
    Outcome.SENT_BACK: Term(
        "Sent back",
        "An approver sent the request back: correct the reading, then it is decided again.",
    ),
    Outcome.EFFECT_UNAVAILABLE: Term(
        "Delivery failed", "The effect's system could not be reached within its attempts."
    ),
    Outcome.EFFECT_REJECTED: Term("Delivery refused", "The effect's system refused the effect."),
    Outcome.EFFECT_UNCERTAIN: Term(
        "Delivery unknown", "It is not known whether the effect's system did it; check first."
    ),
    Outcome.STATE_CONFLICT: Term(
        "Not possible now", "The run is not in a state where that can be done."
    ),
}

# The role groups (accounts.roles) as a request's route or a queue's owner names them: the
# people in it. Any other team is called by its name.
GROUPS: dict[str, Term] = {
    "security-approvers": Term(
        "Security approvers", "Decide the account reviews and security requests."
    ),
    "finance-approvers": Term(
        "Finance approvers", "Decide amounts over a limit and changes of bank details."
    ),
    "ops-leads": Term("Ops leads", "Work the exception queues, recover runs, change policy."),
    "recovery-staff": Term("Recovery staff", "Work the exception queues and recover runs."),
    "auditors": Term("Auditors", "Read runs, approvals, policy and reports; change nothing."),
}


def outcome_term(code: str) -> Term:
    """Why a run is held or how it ended, in words."""
    return OUTCOMES.get(code) or Term(humanize(code) if code else "—", "")


def group_term(name: str) -> Term:
    """A group work is routed to: a role group's words, else the team's own name."""
    return GROUPS.get(name) or Term(name, "")


def business_term(section: Section, code: str) -> Term:
    """A request type's, route's or effect's words: the active version's catalogue's, else
    the newest stored version's that names it, else the reference catalogue's; a code none
    names reads as words."""
    for catalogue in stored_businesses().in_order:
        spec = getattr(catalogue, section).get(code)
        if spec is not None:
            return Term(spec.label, spec.description)
    return Term(humanize(code) if code else "—", "")
