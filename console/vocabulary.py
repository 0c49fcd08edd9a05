"""The words people see: a human label and a one-line explanation for every code.

Each state, outcome, queue, stage, rule kind, recovery action, audit action and status is
named here once (the outcomes and the groups in policy.words, which the notifications read
too). Pages, flash messages, CSV headers and docs/recovery.md's tables read these;
the codes themselves are stable identifiers for the API, the database and the logs, and a
page shows them only as secondary text. A code nobody named yet still reads as words
(`risk_signal` → "Risk signal"), never as a blank.

The words are the console's: the domain apps speak in codes, and the API describes its codes
to integrators in its own words (automation.api_schemas).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum

from approvals.models import ApprovalStatus
from audit.models import AuditAction
from automation.models import (
    BatchStatus,
    Effect,
    EffectStatus,
    QAStatus,
    RecoveryKind,
    ShadowOutcome,
    StageName,
    StageOutcome,
    State,
)
from policy.catalogue import Catalogue
from policy.evaluation import Verdict
from policy.selectors import Businesses, Section, stored_businesses
from policy.words import GROUPS, OUTCOMES, Term, humanize


class Kind(StrEnum):
    STATE = "state"
    OUTCOME = "outcome"
    QUEUE = "queue"
    STAGE = "stage"
    STAGE_OUTCOME = "stage_outcome"
    RULE = "rule"
    RECOVERY = "recovery"
    AUDIT = "audit"
    EFFECT_STATUS = "effect_status"
    APPROVAL_STATUS = "approval_status"
    QA_STATUS = "qa_status"
    BATCH_STATUS = "batch_status"
    CATEGORY = "category"
    ROUTE = "route"
    EFFECT = "effect"
    ROLE = "role"
    GROUP = "group"
    TIER = "tier"
    POLICY_STATUS = "policy_status"
    SLA = "sla"
    PREVIEW = "preview"
    VERDICT = "verdict"
    SHADOW = "shadow"
    MAILBOX_STATUS = "mailbox_status"


STATES: dict[str, Term] = {
    State.RECEIVED: Term("Received", "Stored as it arrived; nothing has been checked yet."),
    State.VALIDATED: Term("Checked", "The request's shape and identity were checked."),
    State.NORMALIZED: Term("Prepared", "Text and fields were put in one form and fingerprinted."),
    State.ENRICHED: Term("Looked up", "The customer and account were looked up; reading next."),
    State.CLASSIFIED: Term("Read", "The request was read; policy decides what happens next."),
    State.APPROVAL_REQUIRED: Term(
        "Waiting for approval", "Policy requires a person to approve the effect first."
    ),
    State.APPROVED: Term("Approved", "A person approved the effect; it is delivered next."),
    State.EXECUTING: Term("Delivering", "The effect is being delivered to its system."),
    State.COMPLETED: Term("Done", "The effect was delivered, or a person finished it by hand."),
    State.BLOCKED: Term("Stopped by policy", "A policy rule refused the effect; nothing was done."),
    State.NEEDS_REVIEW: Term(
        "Needs a person", "Held in an exception queue until someone corrects or recovers it."
    ),
    State.FAILED: Term("Failed", "Ended without its effect: refused, rejected or abandoned."),
}

# Exception queues are named after the outcome that put a run there; a few are not outcomes.
QUEUES: dict[str, Term] = {
    **OUTCOMES,
    "needs_review": Term("Needs a person", "Runs held for a person, whatever the reason."),
    "approval_required": Term("Waiting for approval", "Effects waiting for an approver."),
    "qa_review": Term("Quality review", "Runs sampled after the fact to check their reading."),
}

STAGES: dict[str, Term] = {
    StageName.INTAKE: Term("Intake", "The request was received and stored."),
    StageName.VALIDATE: Term("Check", "Shape and identity were checked."),
    StageName.NORMALIZE: Term("Prepare", "Text and fields were put in one form."),
    StageName.ENRICH: Term("Look up", "Customer and account were looked up."),
    StageName.CLASSIFY: Term("Read", "The classifier read the request."),
    StageName.DECIDE: Term("Decide", "Policy decided what happens."),
    StageName.APPROVE: Term("Approve", "A person decided on the effect."),
    StageName.EXECUTE: Term("Deliver", "The effect was sent to its system."),
    StageName.COMPLETE: Term("Finish", "The run was closed."),
}

STAGE_OUTCOMES: dict[str, Term] = {
    **{code: Term(term.label, term.explanation) for code, term in OUTCOMES.items()},
    StageOutcome.OK: Term("Done", "The stage finished."),
    StageOutcome.ACCEPTED: Term("Accepted", "The reading fitted the expected shape."),
    StageOutcome.RETRY_SCHEDULED: Term("Retry scheduled", "It failed; another attempt was set."),
    StageOutcome.CORRECTED: Term("Corrected by a person", "A person's reading replaced it."),
    StageOutcome.RESUMED: Term("Resumed", "Continued from a stored checkpoint."),
    StageOutcome.APPROVAL_REQUIRED: Term("Sent for approval", "A person approves it first."),
    StageOutcome.AUTHORIZED: Term("Allowed", "Policy, or a valid approval, allowed the effect."),
    StageOutcome.APPROVED: Term("Approved", "An approver approved the effect."),
    StageOutcome.DELIVERED: Term("Delivered", "The effect's system confirmed it."),
    StageOutcome.ALREADY_DELIVERED: Term(
        "Already delivered", "The same effect had been delivered before; not sent again."
    ),
    StageOutcome.REJECTED: Term("Refused", "The effect's system refused it."),
    StageOutcome.UNCERTAIN: Term("Unknown", "No clear answer from the effect's system."),
    StageOutcome.UNAVAILABLE: Term("Unreachable", "The delivery attempts ran out."),
    StageOutcome.UNWRITABLE: Term(
        "Could not be recorded", "The local record could not be written as it was."
    ),
    StageOutcome.NOT_SENT: Term(
        "Not sent",
        "Gatehouse refused to send it: a secret, an address or a header the settings do not "
        "allow. Nothing left.",
    ),
}

# Rule ids are "<kind>.<detail>": the kind names what the rule checks.
RULE_KINDS: dict[str, Term] = {
    "allowlist": Term("Allowed actions", "The requested action must be one the policy allows."),
    "proposal": Term("Allowed effects", "The effect read must be one the policy allows."),
    "route": Term("Route", "The route read must be the policy's route for the category."),
    "match": Term("Matches the request", "The reading must agree with what the request says."),
    "confidence": Term("Confidence", "The reading must be at least this sure."),
    "reading": Term("Clear reading", "The reading must find a clear category."),
    "amount": Term("Amount limit", "Amounts above a tier's limit need approval or are refused."),
    "signal": Term("Risk signal", "Words policy wants a person to read first."),
}

RECOVERY: dict[str, Term] = {
    RecoveryKind.CLAIM: Term("Claim", "Take the run: others see you work on it."),
    RecoveryKind.ASSIGN: Term("Assign", "Give the run to someone to work on."),
    RecoveryKind.RELEASE: Term("Release", "Put the run back for anyone to take."),
    RecoveryKind.CORRECT: Term("Correct the reading", "Fix the fields; policy decides again."),
    RecoveryKind.RETRY: Term("Retry", "Run the failed step again with a fresh budget."),
    RecoveryKind.RESUME: Term("Resume", "Continue from the last stored checkpoint."),
    RecoveryKind.REPLAY: Term(
        "Replay", "Start a new run from the stored input under today's policy."
    ),
    RecoveryKind.RESOLVE: Term("Resolve by hand", "Record that a person did what the run was for."),
    RecoveryKind.ABANDON: Term("Abandon", "Give the run up; nothing more will be done."),
    RecoveryKind.CORRECT_REJECTED: Term(
        "Correct and decide again", "Fix a rejected reading; a new run asks for a fresh approval."
    ),
    RecoveryKind.RETRY_EFFECT: Term(
        "Retry the delivery", "Deliver the held effect again under the same key."
    ),
    "reconsider": Term("Decide again", "Send the run through the active policy again."),
}

AUDIT: dict[str, Term] = {
    AuditAction.RUN_VALIDATE: Term("Checked", "The request's shape and identity passed."),
    AuditAction.RUN_NORMALIZE: Term("Prepared", "Text and fields were put in one form."),
    AuditAction.RUN_ENRICH: Term("Looked up", "Customer and account were looked up."),
    AuditAction.RUN_SCHEDULE_CLASSIFIER_RETRY: Term(
        "Reading retry scheduled", "The classifier failed; another attempt is due."
    ),
    AuditAction.RUN_CLASSIFY: Term("Read", "A reading of the request was accepted."),
    AuditAction.RUN_REQUIRE_APPROVAL: Term("Sent for approval", "Policy asked for an approver."),
    AuditAction.RUN_APPROVE: Term("Approved", "The effect was approved."),
    AuditAction.RUN_RECONSIDER: Term("Decided again", "A person sent the run back to policy."),
    AuditAction.RUN_INVALIDATE_APPROVAL: Term(
        "Approval no longer valid", "The approval did not match the run any more."
    ),
    AuditAction.RUN_REFUSE_APPROVAL: Term("Approval refused", "The approval could not be used."),
    AuditAction.RUN_EXECUTE: Term("Allowed by policy", "Policy let the effect go ahead."),
    AuditAction.RUN_EXECUTE_APPROVED: Term("Delivery started", "The approved effect went ahead."),
    AuditAction.RUN_RETRY_EFFECT: Term("Delivery retried", "A person sent the effect again."),
    AuditAction.RUN_COMPLETE: Term("Done", "The run finished with its effect."),
    AuditAction.RUN_BLOCK: Term("Stopped by policy", "A policy rule refused the effect."),
    AuditAction.RUN_HOLD: Term("Held for a person", "The run went to an exception queue."),
    AuditAction.RUN_FAIL: Term("Failed", "The run ended without its effect."),
    AuditAction.RUN_RETRY_STAGE: Term("Reading retried", "A person asked for another reading."),
    AuditAction.RUN_RESOLVE_BY_HAND: Term("Resolved by hand", "A person finished the run."),
    AuditAction.RUN_ABANDON: Term("Abandoned", "A person gave the run up."),
    AuditAction.RUN_CLOSE_EXCEPTION: Term("Taken out of its queue", "Replayed or acknowledged."),
    AuditAction.RUN_CORRECT_READING: Term("Reading corrected", "A person fixed what was read."),
    AuditAction.RUN_RESUME: Term("Resumed", "Continued with the reading stored earlier."),
    AuditAction.RUN_REPLAY: Term("Replayed", "A new run was started from this one's input."),
    AuditAction.RUN_SEND_BACK: Term("Sent back", "An approver sent it back to be corrected."),
    AuditAction.RUN_CORRECT_REJECTED: Term(
        "Corrected after rejection", "A person corrected the reading; a new run decides again."
    ),
    AuditAction.RUN_CORRECT_REPLAY: Term(
        "Read by a person", "The new run's reading is a person's correction."
    ),
    AuditAction.RUN_RECEIVED: Term("Received", "The request arrived and was stored."),
    AuditAction.RUN_THREAD_LINKED: Term("Linked to its thread", "A reply found its earlier mail."),
    AuditAction.RUN_RESUMED: Term("Resumed", "Continued from a stored checkpoint."),
    AuditAction.RUN_REPLAYED: Term("Replayed", "A new run was started from this one's input."),
    AuditAction.RUN_REPLAY_STARTED: Term("Started as a replay", "Made from an earlier input."),
    AuditAction.RUN_BATCH_PREPARED: Term(
        "Prepared in a batch", "A person chose the run for a batch someone else started."
    ),
    AuditAction.RUN_NUDGED: Term("Nudged", "Its next step was sent again."),
    AuditAction.SWEEP_NUDGED: Term("Nudged by the sweep", "A lost step was sent again."),
    AuditAction.RUN_WAITING: Term(
        "Waiting for the model server",
        "The model server could not take the call yet (its limits, its breaker or its budget).",
    ),
    AuditAction.RUN_COMMENTED: Term(
        "Commented", "A person wrote on the run's thread; a comment changes nothing."
    ),
    AuditAction.TRANSITION_REFUSED: Term("Refused", "An action was asked that its state forbids."),
    AuditAction.CHECKPOINT_IMPORTED: Term("Checkpoint imported", "Brought in from elsewhere."),
    AuditAction.INTAKE_IDEMPOTENT_REPLAY: Term("Sent again", "A repeat of a received request."),
    AuditAction.INTAKE_IDEMPOTENCY_CONFLICT: Term("Id reused", "A different request, same id."),
    AuditAction.QA_SAMPLED: Term("Sampled for review", "Chosen for a quality review."),
    AuditAction.QA_CONFIRMED: Term("Reading confirmed", "A reviewer found the reading right."),
    AuditAction.QA_CORRECTED: Term("Reading corrected", "A reviewer found the reading wrong."),
    AuditAction.QA_RECONCILED: Term("Reconciled", "What was done about a wrong reading."),
    AuditAction.EFFECT_ADOPTED: Term("Delivery adopted", "An earlier delivery was taken over."),
    AuditAction.EFFECT_PAUSED: Term("Deliveries paused", "Deliveries of an effect were paused."),
    AuditAction.EFFECT_RESUMED: Term("Deliveries resumed", "Deliveries of an effect resumed."),
    AuditAction.APPROVAL_APPROVE: Term("Approved", "An approver approved the effect."),
    AuditAction.APPROVAL_REJECT: Term("Rejected", "An approver rejected the effect."),
    AuditAction.APPROVAL_SENT_BACK: Term(
        "Sent back", "An approver sent the request back for its reading to be corrected."
    ),
    AuditAction.APPROVAL_EXPIRED: Term("Approval expired", "Nobody decided in time."),
    AuditAction.APPROVAL_ESCALATED: Term("Escalated", "Handed to the escalation group."),
    AuditAction.APPROVAL_CLAIMED: Term("Taken up", "An approver took the request up."),
    AuditAction.APPROVAL_ASSIGNED: Term("Given to someone", "A lead gave the request to one."),
    AuditAction.APPROVAL_RELEASED: Term("Given back", "The request went back to its group."),
    AuditAction.DELEGATION_GIVEN: Term("Delegated", "Someone decides for a person away."),
    AuditAction.DELEGATION_ENDED: Term("Delegation ended", "It ended before its time."),
    AuditAction.TASK_CLAIMED: Term("Task taken", "A member of the team took the task."),
    AuditAction.TASK_RELEASED: Term("Task given back", "The task went back to its team."),
    AuditAction.TASK_DONE: Term("Task done", "A member of the team marked the task done."),
    AuditAction.TASK_COMMENTED: Term(
        "Commented on a task", "A person wrote on the task's thread; a comment changes nothing."
    ),
    AuditAction.NOTIFICATIONS_READ: Term(
        "Notifications read", "A person marked their notifications read."
    ),
    AuditAction.ACCOUNT_ROLES_FOLLOWED_PROVIDER: Term(
        "Roles from sign-in", "The company's sign-in changed a person's roles."
    ),
    AuditAction.TEAM_CREATED: Term("Team made", "An administrator made a team."),
    AuditAction.TEAM_CHANGED: Term("Team changed", "A team's roles or description changed."),
    AuditAction.TEAM_MEMBER_ADDED: Term("Added to a team", "A person was put in a team."),
    AuditAction.TEAM_MEMBER_REMOVED: Term("Taken out of a team", "A person left a team."),
    AuditAction.TEAM_PROVIDER_GROUPS_CHANGED: Term(
        "Sign-in groups changed", "The company sign-in groups that map to a team changed."
    ),
    AuditAction.PERSON_ADDED: Term("Person added", "An administrator added a person."),
    AuditAction.PERSON_CHANGED: Term("Person changed", "A person's name or address changed."),
    AuditAction.PERSON_DEACTIVATED: Term("Person deactivated", "A person can no longer sign in."),
    AuditAction.POLICY_ACTIVATED: Term("Policy activated", "A policy version became active."),
    AuditAction.API_TOKEN_ISSUED: Term(
        "API token issued", "An integration was given a token for a channel (its key shown once)."
    ),
    AuditAction.API_TOKEN_REVOKED: Term("API token revoked", "An integration lost its token."),
    AuditAction.CHANNEL_CLASSIFIER_CHANGED: Term("Classifier changed", "A channel's reader."),
    AuditAction.CHANNEL_CREATED: Term("Channel added", "A new way in for requests."),
    AuditAction.CHANNEL_CHANGED: Term("Channel changed", "Its reader or its settings."),
    AuditAction.MAILBOX_SET: Term("Mailbox set up", "Where a channel takes its mail from."),
    AuditAction.CLASSIFIER_PROMOTED: Term("Classifier promoted", "A shadow became the reader."),
    AuditAction.CLASSIFIER_ROLLED_BACK: Term("Classifier rolled back", "The old reader is back."),
    AuditAction.CLASSIFIER_TRAINED: Term("Reader trained", "A learned reader was trained."),
    AuditAction.CLASSIFIER_SHADOW_ADDED: Term(
        "Reader put in shadow", "A reader reads a channel beside the live one."
    ),
    AuditAction.LABELLED_SET_UPLOADED: Term("Labelled set uploaded", "Messages with labels."),
    AuditAction.LABELLED_SET_REFUSED: Term(
        "Labelled set refused", "An upload kept with what is wrong in it."
    ),
    AuditAction.LABELLED_SET_REMOVED: Term("Labelled set removed", "Its messages are gone."),
    AuditAction.LABELLED_SET_EVALUATED: Term(
        "Reader measured", "A reader was measured on a labelled set."
    ),
    AuditAction.CUSTOMERS_LOADED: Term("Customers loaded", "The customer list was loaded."),
    AuditAction.CUSTOMER_ADDED: Term("Customer added", "A customer was added to the list."),
    AuditAction.CUSTOMER_CHANGED: Term("Customer changed", "A customer's details changed."),
}

EFFECT_STATUSES: dict[str, Term] = {
    EffectStatus.PENDING: Term("Not sent yet", "Waiting for its delivery."),
    EffectStatus.DELIVERED: Term("Delivered", "Its system confirmed it."),
    EffectStatus.RETRY_WAIT: Term("Will try again", "A delivery failed; another is due."),
    EffectStatus.REJECTED: Term("Refused", "Its system refused it."),
    EffectStatus.UNCERTAIN: Term("Unknown", "Not known whether its system did it."),
}

# A delivery waiting to be tried again only while an attempt is really due: once its budget
# is spent or its run is held, nothing is sent until a person retries it (effect_status_term).
EFFECT_GAVE_UP = Term(
    "Gave up",
    "Its attempts are used up or its deadline passed: nothing is sent unless a person retries it.",
)
EFFECT_ON_HOLD = Term("On hold", "Its run waits for a person: nothing is sent meanwhile.")


def effect_status_term(effect: Effect, *, run_state: str, now: datetime) -> tuple[Term, bool]:
    """The words of an effect's status and whether its deliveries have stopped: a delivery
    that failed "will try again" only while another attempt is due."""
    if effect.status != EffectStatus.RETRY_WAIT:
        return term(Kind.EFFECT_STATUS, effect.status), False
    late = effect.deadline_at is not None and now > effect.deadline_at
    if effect.attempts >= effect.attempt_limit or late or effect.next_attempt_at is None:
        return EFFECT_GAVE_UP, True
    if run_state != State.EXECUTING:
        return EFFECT_ON_HOLD, True
    return term(Kind.EFFECT_STATUS, effect.status), False


APPROVAL_STATUSES: dict[str, Term] = {
    ApprovalStatus.PENDING: Term("Waiting", "Nobody has decided yet."),
    ApprovalStatus.APPROVED: Term("Approved", "Approved by enough approvers."),
    ApprovalStatus.REJECTED: Term("Rejected", "An approver rejected it."),
    ApprovalStatus.STALE: Term("Out of date", "The run or policy changed; it no longer applies."),
    ApprovalStatus.EXPIRED: Term("Expired", "Nobody decided before the deadline."),
    ApprovalStatus.SENT_BACK: Term(
        "Sent back", "An approver sent it back to be corrected; a fresh request follows."
    ),
}

QA_STATUSES: dict[str, Term] = {
    QAStatus.OPEN: Term("To review", "Nobody has reviewed it yet."),
    QAStatus.CONFIRMED: Term("Confirmed", "The reading was right."),
    QAStatus.CORRECTED: Term("Corrected", "The reading was wrong."),
}

BATCH_STATUSES: dict[str, Term] = {
    BatchStatus.PREVIEW: Term("Preview", "Shown to a person; nothing has been done yet."),
    BatchStatus.QUEUED: Term("Waiting to start", "A worker will pick it up."),
    BatchStatus.RUNNING: Term("Running", "A worker is going through its runs."),
    BatchStatus.FINISHED: Term("Finished", "Every run in it was worked."),
}

# The role groups (accounts.roles), as a person reads them: what each may do.
ROLE_NAMES: dict[str, Term] = {
    "security-approvers": Term(
        "Security approver", "Decides the account reviews and security requests sent to you."
    ),
    "finance-approvers": Term(
        "Finance approver", "Decides amounts over a limit and changes of bank details."
    ),
    "ops-leads": Term(
        "Ops lead", "Works the exception queues, recovers runs, changes policy, reads reports."
    ),
    "recovery-staff": Term("Recovery staff", "Works the exception queues and recovers runs."),
    "auditors": Term("Auditor", "Reads runs, approvals, policy and reports; changes nothing."),
}

# Where a policy version stands: deciding runs now, once, or never yet.
POLICY_STATUSES: dict[str, Term] = {
    "active": Term("Active", "Decides every run from now on."),
    "retired": Term(
        "No longer active", "Was active once; the runs it decided keep it as their version."
    ),
    "draft": Term("Draft", "Saved but never active: simulate it, then activate it."),
}

# What a replay, retry or re-decision would come to (automation.recovery.preview.Result).
PREVIEW_RESULTS: dict[str, Term] = {
    "sent": Term("Would be sent", "The effect would be delivered."),
    "deduplicated": Term(
        "Already delivered", "The same effect was delivered under its key; not sent again."
    ),
    "approval": Term("Would wait for approval", "An approver decides before anything is sent."),
    "refused": Term("Would now be refused", "The active policy refuses it; nothing is done."),
    "queued": Term("Would go to a queue", "A person reads it first."),
    "read_again": Term("Read again first", "The classifier reads it again; that decides."),
    "not_possible": Term("Not possible now", "The run's state does not allow this action."),
}

# Where something waiting for a person stands against its deadline (approvals.selectors).
SLA: dict[str, Term] = {
    "due": Term("Due", "Waiting within its time."),
    "overdue": Term("Overdue", "Waiting longer than it should: past its deadline."),
    "escalated": Term("Escalated", "Past its deadline and handed to the escalation group."),
}

# What policy decides for a reading (policy.evaluation.Verdict): the classifier comparison.
VERDICTS: dict[str, Term] = {
    Verdict.EXECUTE: Term("Straight through", "Policy lets the effect go ahead with no person."),
    Verdict.APPROVE: Term("Waits for approval", "An approver decides before the effect."),
    Verdict.BLOCK: Term("Stopped by policy", "A policy rule refuses the effect."),
    Verdict.LOW_CONFIDENCE: Term("Unsure reading", "Held for a person: the reading is not sure."),
    Verdict.UNSUPPORTED: Term("Not allowed", "Refused: this policy does not allow it."),
    Verdict.RISK_SIGNAL: Term("Risk signal", "Held for a person to read first."),
}

# How a classifier reading in shadow answered (automation.models.ShadowOutcome).
SHADOW_OUTCOMES: dict[str, Term] = {
    ShadowOutcome.READ: Term("Read", "It gave a reading of the expected shape."),
    ShadowOutcome.INVALID: Term("Unusable answer", "Its answer did not fit the expected shape."),
    ShadowOutcome.FAILED: Term("Failed", "It raised an error or could not be loaded."),
    ShadowOutcome.TIMEOUT: Term("No answer in time", "It did not answer within its deadline."),
}

# What a mailbox's watcher is doing (Mailbox.status, automation.intake.selectors). A watcher
# that stopped writing is "not heard from" whatever its last status: the page says so itself.
MAILBOX_STATUSES: dict[str, Term] = {
    "never started": Term("Never started", "No watcher has run for this mailbox yet."),
    "starting": Term("Starting", "The watcher has started and is signing in."),
    "connected": Term("Taking mail", "Signed in; taking the mail waiting in the folder."),
    "idle": Term("Waiting for mail (IDLE)", "The server announces new mail as it arrives."),
    "polling": Term("Polling", "The watcher looks in the folder at regular intervals."),
    "reconnecting": Term(
        "Reconnecting", "The server dropped the watcher or refused it; it tries again shortly."
    ),
    "stopped": Term("Stopped", "The watcher was stopped; no mail is taken until it runs again."),
}

# The console's own codes. Request types, routes, effects and tiers are the business's: their
# words are its catalogue's (business_words).
VOCABULARY: Mapping[Kind, Mapping[str, Term]] = {
    Kind.STATE: STATES,
    Kind.OUTCOME: OUTCOMES,
    Kind.QUEUE: QUEUES,
    Kind.STAGE: STAGES,
    Kind.STAGE_OUTCOME: STAGE_OUTCOMES,
    Kind.RULE: RULE_KINDS,
    Kind.RECOVERY: RECOVERY,
    Kind.AUDIT: AUDIT,
    Kind.EFFECT_STATUS: EFFECT_STATUSES,
    Kind.APPROVAL_STATUS: APPROVAL_STATUSES,
    Kind.QA_STATUS: QA_STATUSES,
    Kind.BATCH_STATUS: BATCH_STATUSES,
    Kind.ROLE: ROLE_NAMES,
    Kind.GROUP: GROUPS,
    Kind.POLICY_STATUS: POLICY_STATUSES,
    Kind.SLA: SLA,
    Kind.PREVIEW: PREVIEW_RESULTS,
    Kind.VERDICT: VERDICTS,
    Kind.SHADOW: SHADOW_OUTCOMES,
    Kind.MAILBOX_STATUS: MAILBOX_STATUSES,
}


# The kinds whose codes a business's catalogue names (policy.catalogue), by its section.
BUSINESS_SECTIONS: dict[Kind, Section] = {
    Kind.CATEGORY: "request_types",
    Kind.ROUTE: "routes",
    Kind.EFFECT: "effects",
}
BUSINESS_KINDS = frozenset([*BUSINESS_SECTIONS, Kind.TIER])


def words_of(kind: Kind | str) -> Mapping[str, Term]:
    """Every code of a kind with its words."""
    kind = Kind(kind)
    if kind in BUSINESS_KINDS:
        return business_words()[kind]
    return VOCABULARY[kind]


def knows(kind: Kind | str, code: object) -> bool:
    """Whether the code is one of the kind's named codes (not only humanized)."""
    return str(code) in words_of(kind)


def business_words() -> Mapping[Kind, Mapping[str, Term]]:
    """The words of the business's codes: each one's label and description in the active
    version's catalogue, else in the newest stored version that names it, else in the
    reference catalogue (policy.selectors). Built once for each set of stored versions."""
    businesses = stored_businesses()
    built = _BUSINESS_WORDS.get(businesses.identities)
    if built is None:
        built = _business_words(businesses)
        _BUSINESS_WORDS.clear()  # only the latest set of versions is ever asked for
        _BUSINESS_WORDS[businesses.identities] = built
    return built


_BUSINESS_WORDS: dict[tuple[object, ...], dict[Kind, dict[str, Term]]] = {}


def words_version() -> tuple[object, ...]:
    """What the business's words are read from (the stored versions, by their identities):
    anything drawn in these words may be kept while this stays the same."""
    return stored_businesses().identities


def _business_words(businesses: Businesses) -> dict[Kind, dict[str, Term]]:
    words: dict[Kind, dict[str, Term]] = {kind: {} for kind in BUSINESS_KINDS}
    for catalogue in businesses.in_order:
        for kind, section in BUSINESS_SECTIONS.items():
            for name, spec in getattr(catalogue, section).items():
                words[kind].setdefault(name, Term(spec.label, spec.description))
        for value in catalogue.tier_values():
            words[Kind.TIER].setdefault(value, tier_term(catalogue, value))
    return words


def label_in(catalogue: Catalogue, kind: Kind | str, code: object) -> str:
    """A code's label in one catalogue (a version's own words), else as any page says it."""
    kind = Kind(kind)
    if kind in BUSINESS_SECTIONS:
        spec = getattr(catalogue, BUSINESS_SECTIONS[kind]).get(str(code))
        if spec is not None:
            return str(spec.label)
    if kind == Kind.TIER and str(code) in catalogue.tier_values():
        return tier_term(catalogue, str(code)).label
    return label(kind, code)


def tier_term(catalogue: Catalogue, value: str) -> Term:
    """A tier in the words of its catalogue: the value with what the attribute is
    ("Standard account tier", "Basic plan"), explained by the attribute's description."""
    tier = catalogue.customer_attributes.get(TIER_ATTRIBUTE)
    if tier is None:
        return Term(humanize(value), "")
    return Term(f"{humanize(value)} {tier.label[:1].lower()}{tier.label[1:]}", tier.description)


# The customer attribute whose values are the tiers (policy.catalogue.Catalogue.tier_values).
TIER_ATTRIBUTE = "tier"


def effect_progress(code: object) -> tuple[str, str]:
    """An effect being done and done, in words, from its label: “Create a follow-up” is
    being done, “Create a follow-up” was done."""
    name = label(Kind.EFFECT, code)
    return f"“{name}” is being done", f"“{name}” was done"


def term(kind: Kind | str, code: object) -> Term:
    """The label and explanation of a code; a rule id is looked up by its kind."""
    text = "" if code is None else str(code)
    table = words_of(kind)
    if Kind(kind) == Kind.RULE:
        text = text.split(".", 1)[0]
    found = table.get(text)
    if found is not None:
        return found
    return Term(humanize(text) if text else "—", "")


def label(kind: Kind | str, code: object) -> str:
    return term(kind, code).label


def explain(kind: Kind | str, code: object) -> str:
    return term(kind, code).explanation


def markdown_table(kind: Kind | str, heading: str) -> str:
    """A Markdown table of one kind: label, code, explanation (docs/recovery.md's tables)."""
    rows = [f"| {heading} | code | what it means |", "|---|---|---|"]
    rows += [
        f"| {entry.label} | `{code}` | {entry.explanation} |"
        for code, entry in words_of(kind).items()
    ]
    return "\n".join(rows)
