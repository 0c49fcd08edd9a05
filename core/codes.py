"""The codes Gatehouse answers with, one enum each, at the bottom of the house so that no app
re-declares one.

`Outcome` is how a run ended or why it is held: the stable public codes of the design
(section 6), stored on the run and shown to integrators. `Refusal` is every code a service
may refuse a use case with (`core.errors.ServiceError`): stable, for programs and tests,
while people read the service's words beside it. Both are strings, so a code compares equal
to its text and is written to JSON and the database as it reads.
"""

from __future__ import annotations

from enum import StrEnum

from django.db import models


class Outcome(models.TextChoices):
    """How a run ended, or why it is held: stable public codes (DESIGN section 6)."""

    COMPLETED = "completed"
    IDEMPOTENT_REPLAY = "idempotent_replay"
    IDEMPOTENCY_CONFLICT = "idempotency_conflict"
    INVALID_EVENT = "invalid_event"
    UNSUPPORTED_REQUEST = "unsupported_request"
    CLASSIFICATION_INVALID = "classification_invalid"
    EXTRACTION_INVALID = "extraction_invalid"
    LOW_CONFIDENCE = "low_confidence"
    RISK_SIGNAL = "risk_signal"  # a policy signal rule holds the run for a person
    RETRY_EXHAUSTED = "retry_exhausted"
    POLICY_BLOCK = "policy_block"
    APPROVAL_STALE = "approval_stale"
    APPROVAL_EXPIRED = "approval_expired"
    APPROVAL_REJECTED = "approval_rejected"
    SENT_BACK = "sent_back"  # an approver sent the request back: its reading is to be corrected
    EFFECT_UNAVAILABLE = "effect_unavailable"
    EFFECT_REJECTED = "effect_rejected"
    EFFECT_UNCERTAIN = "effect_uncertain"
    STATE_CONFLICT = "state_conflict"


class Refusal(StrEnum):
    """Why a service refused: the `code` of a ServiceError."""

    # Who may do it
    FORBIDDEN = "forbidden"  # not in the group the request is routed to
    SEPARATION_OF_DUTIES = "separation_of_duties"  # this person took part in the run
    CLAIMED = "claimed"  # somebody else works on this run
    OWN_ACCESS = "own_access"  # a change to the person's own teams, or their team's roles
    LAST_ADMINISTRATOR = "last_administrator"  # nobody would be left to manage teams
    # What state it is in
    STATE_CONFLICT = "state_conflict"  # the run's (or sample's, batch's) state does not allow it
    APPROVAL_STALE = Outcome.APPROVAL_STALE.value  # the request no longer matches its run
    APPROVAL_EXPIRED = Outcome.APPROVAL_EXPIRED.value  # the request's time ran out
    ALREADY_DECIDED = "already_decided"
    NOT_QUEUED = "not_queued"  # the run is in no exception queue
    ALREADY_PAUSED = "already_paused"  # a pause or resume that would change nothing
    NOT_PAUSED = "not_paused"
    # Policy versions
    NO_SUCH_VERSION = "no_such_version"
    ALREADY_ACTIVE = "already_active"
    NOT_SIMULATED = "not_simulated"  # activation needs a simulation of this version
    SIMULATION_STALE = "simulation_stale"  # the simulation no longer reads today's history
    PREVIEW_STALE = "preview_stale"  # a batch's preview no longer matches its runs
    # Classifiers
    CONFIGURED_CLASSIFIER = "configured_classifier"  # set in the settings, not the console
    NOT_A_SHADOW = "not_a_shadow"  # only a shadow classifier can be promoted
    # Setting up: channels and mailboxes in the console
    NAME_TAKEN = "name_taken"  # another one has this name
    CONFIGURED_IN_SETTINGS = "configured_in_settings"  # defined by a setting, changed there
    INVALID_SETTING = "invalid_setting"  # a value the setting it is for cannot take
    INVALID_LABELLED_SET = "invalid_labelled_set"  # an upload that cannot be stored as a set
    NO_SUCH_READER = "no_such_reader"  # no classifier of that name exists here
    # What the person gave
    REASON_REQUIRED = "reason_required"
    COMMENT_REQUIRED = "comment_required"
    EVIDENCE_REQUIRED = "evidence_required"
    INVALID_CORRECTION = "invalid_correction"
    INVALID_POLICY = "invalid_policy"  # a policy document that cannot be stored
    BAD_ACTION = "bad_action"
    TOO_MANY = "too_many"
    TOO_LONG = "too_long"
    INVALID_INPUT = "invalid_input"  # a name (or one taken), an address, a password


class MailRefusal(StrEnum):
    """Why a request was kept as a refused record, unread: stored on its run's checkpoint."""

    TOO_LARGE = "too_large"  # over GATEHOUSE_MAX_MESSAGE_BYTES (or _EVENT_BYTES)
    HEADERS_TOO_LONG = "headers_too_long"  # over GATEHOUSE_MAX_HEADER_BLOCK_BYTES
    HEADER_TOO_LONG = "header_too_long"  # one header over GATEHOUSE_MAX_HEADER_BYTES
    TOO_MANY_ENCODED_WORDS = "too_many_encoded_words"  # over GATEHOUSE_MAX_ENCODED_WORDS
