"""The automation app's models, by concern: each concern's module defines them, and this one
gathers them, as Django reads an app's models from its `models` module. Import a model from
here or from its concern's module (`automation.runs.models`, `automation.intake.models`...)."""

from __future__ import annotations

from audit.models import AuditEvent
from automation.classifiers.models import (  # noqa: F401
    ClassificationAttempt,
    ClassifierModel,
    ClassifierPromotion,
    ClassifierResult,
    ClassifierTraining,
    EvaluationStatus,
    Label,
    LabelledExample,
    LabelledSet,
    LabelledSetEvaluation,
    LabelledSetStatus,
    LabelSource,
    ModelServer,
    QAReview,
    QAStatus,
    RecordedOutcome,
    ShadowOutcome,
    ShadowReading,
)
from automation.effects.models import (  # noqa: F401
    DeliveryResult,
    Effect,
    EffectAttempt,
    EffectControl,
    EffectStatus,
    Task,
    TaskComment,
)
from automation.intake.models import (  # noqa: F401
    MAIL_SCOPE,
    ApiToken,
    Customer,
    IntakeChannel,
    IntakeRecord,
    Mailbox,
)
from automation.recovery.models import (  # noqa: F401
    BatchStatus,
    ProgressJob,
    RecoveryAction,
    RecoveryBatch,
    RecoveryKind,
    Simulation,
)
from automation.runs.models import (  # noqa: F401
    ANSWERED_FAILURES,
    CORRECTABLE_HOLDS,
    EFFECT_HOLDS,
    NON_TERMINAL_STATES,
    QUEUE_NAMES,
    RETRYABLE_STAGE_HOLDS,
    TERMINAL_STATE_LIST,
    TERMINAL_STATES,
    WORKING_STATES,
    Checkpoint,
    Run,
    RunComment,
    StageName,
    StageOutcome,
    StageRecord,
    State,
    run_has_stored_reading,
    run_holds_effect,
    run_holds_stage,
    run_reading_correctable,
)
from core.codes import Outcome  # noqa: F401

__all__ = ["AuditEvent"]  # re-exported: every run's history is read from here
