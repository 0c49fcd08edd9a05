"""Run use cases. Each owns its transaction: lock, check, transition, save, record, enqueue.

Every transition commits together with its AuditEvent, its StageRecord and (where meaningful)
its Checkpoint; follow-up work is enqueued only after commit. Tasks, views, admin actions and
commands call these functions; nothing else changes a run.
"""

from __future__ import annotations

from automation.runs.payloads import effect_key
from automation.runs.sending import ADVANCE_RUN_TASK, DELIVER_EFFECT_TASK
from automation.services.actions import queue_action, queue_actions, run_action, run_actions
from automation.services.activation import (
    SIMULATION_FRESH_FOR,
    activation_simulation,
    policy_activate_after_simulation,
)
from automation.services.backoff import backoff_delay
from automation.services.effects import (
    effect_deliver,
    effect_is_authorized,
    effect_pause,
    effect_resume,
)
from automation.services.intake import (
    IntakeResult,
    api_token_create,
    api_token_find,
    api_token_for_intake,
    api_tokens_revoke,
    channel_get_or_create,
    intake_admit,
    intake_submit,
)
from automation.services.operations import (
    run_reconsider,
    sweep_due,
)
from automation.services.pipeline import run_advance
from automation.services.preview import preview_runs, preview_summary
from automation.services.recovery import (
    OPERATIONS,
    CorrectionInvalid,
    batch_create,
    batch_preview,
    batch_process,
    batch_start,
    correction_problems,
    effects_retry_held,
    held_effects_batch,
    held_effects_select,
    preview_staleness,
    queue_assign,
    queue_claim,
    queue_claim_many,
    queue_release,
    run_correct,
    run_operations_for,
    run_replay,
    run_resolve,
    run_resume,
    run_retry,
    run_retry_effect,
)

__all__ = [
    "ADVANCE_RUN_TASK",
    "DELIVER_EFFECT_TASK",
    "OPERATIONS",
    "SIMULATION_FRESH_FOR",
    "CorrectionInvalid",
    "IntakeResult",
    "activation_simulation",
    "api_token_create",
    "api_token_find",
    "api_token_for_intake",
    "api_tokens_revoke",
    "backoff_delay",
    "batch_create",
    "batch_preview",
    "batch_process",
    "batch_start",
    "channel_get_or_create",
    "correction_problems",
    "effect_deliver",
    "effect_is_authorized",
    "effect_key",
    "effect_pause",
    "effect_resume",
    "effects_retry_held",
    "held_effects_batch",
    "held_effects_select",
    "intake_admit",
    "intake_submit",
    "policy_activate_after_simulation",
    "preview_runs",
    "preview_staleness",
    "preview_summary",
    "queue_action",
    "queue_actions",
    "queue_assign",
    "queue_claim",
    "queue_claim_many",
    "queue_release",
    "run_action",
    "run_actions",
    "run_advance",
    "run_correct",
    "run_operations_for",
    "run_reconsider",
    "run_replay",
    "run_resolve",
    "run_resume",
    "run_retry",
    "run_retry_effect",
    "sweep_due",
]
