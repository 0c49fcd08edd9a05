"""Shadow mode and promotion: a candidate classifier reads every run of a channel beside the
live one without acting, and is promoted on the evidence.

A channel names its shadow classifiers (`IntakeChannel.shadow_classifiers`). When a run's
live reading is accepted, one low-priority (`bulk`) message per shadow is written in that
transaction; the task reads the run with the shadow outside any transaction, under a
deadline, and stores a ShadowReading. Nothing a shadow does (raise, hang, return garbage)
reaches the run: its reading is never validated into the run's decision, never makes an
effect or a queue item.

`shadow_compare` puts live and shadow side by side over a period: agreement, accuracy
against people's labels where there are some, and what the shadow would have changed under
the active policy (the simulation's judgement, `payloads.decision_of`). `classifier_promote`
switches the channel's live classifier to the candidate, naming that evidence;
`classifier_rollback` switches it back. Both need the right to change channels, and both are
audited.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, transaction
from django.utils import timezone
from pydantic import ValidationError

from audit.models import AuditAction
from automation.classifiers import classifier_versions, get_classifier
from automation.classifiers.base import ClassifierInput, answer_of
from automation.classifiers.models import (
    ClassifierPromotion,
    ClassifierTraining,
    EvaluationStatus,
    Label,
    ShadowOutcome,
    ShadowReading,
)
from automation.classifiers.training import TrainingError, TrainingReport, classifier_train
from automation.conf import setting
from automation.intake.models import IntakeChannel
from automation.runs.journal import record_audit
from automation.runs.models import Run
from automation.runs.payloads import (
    decision_of,
    default_tier,
    facts_of,
    interpretation_of,
    policy_for,
    sender_text,
)
from automation.schemas import decision_contract
from core.codes import Refusal
from core.errors import ServiceError
from policy.evaluation import evaluate
from policy.services import policy_get
from worker.dispatch import Priority, enqueue_after_commit

SHADOW_READ_TASK = "automation.tasks.shadow_read"
CHANGE_CHANNEL = "automation.change_intakechannel"
# Disagreements listed on the comparison page, newest first.
DISAGREEMENTS_SHOWN = 50
# At most this many runs are compared at once (the newest of the period).
COMPARED_AT_MOST = 5000


def shadows_send(run: Run) -> None:
    """One low-priority message per shadow classifier of the run's channel, with the
    transaction that accepted its live reading."""
    for name in run.channel.shadow_classifiers or []:
        enqueue_after_commit(SHADOW_READ_TASK, run.pk, str(name), priority=Priority.BULK)


def _call(classifier: Any, event: ClassifierInput, deadline: float) -> tuple[str, Any, str]:
    """(outcome, raw output, error) of one call, given at most `deadline` seconds: a call
    that has not answered by then is left behind on a daemon thread."""
    answer: dict[str, Any] = {}

    def call() -> None:
        try:
            answer["raw"] = answer_of(classifier.classify(event, 1, deadline=deadline)).output
        except Exception as exc:  # a shadow's failure of any kind is a reading of it
            answer["error"] = f"{type(exc).__name__}: {exc}"

    worker = threading.Thread(target=call, daemon=True, name="shadow-classifier")
    worker.start()
    worker.join(deadline)
    if worker.is_alive():
        return ShadowOutcome.TIMEOUT, None, f"no answer within {deadline:g} s"
    if "error" in answer:
        return ShadowOutcome.FAILED, None, answer["error"][:2000]
    return ShadowOutcome.READ, answer.get("raw"), ""


def _jsonable(raw: Any) -> Any:
    if raw is None or isinstance(raw, (dict, list, str, int, float, bool)):
        return raw
    return repr(raw)[:2000]


def shadow_read(*, run_id: int, classifier: str) -> str:
    """The shadow's reading of the run, stored once; the run is only read."""
    if ShadowReading.objects.filter(run_id=run_id, classifier=classifier).exists():
        return "already read"
    run = Run.objects.select_related("channel").get(pk=run_id)
    started = time.monotonic()
    outcome: str
    document = policy_for(run).parsed
    business = document.business
    try:
        version, _ = classifier_versions(classifier)
        reader = get_classifier(classifier)
    except Exception as exc:  # not installed, or its configuration is broken
        outcome, raw, error, version = ShadowOutcome.FAILED, None, str(exc)[:2000], classifier
    else:
        event = ClassifierInput(
            run.channel.name, run.event_id, run.normalized or {}, business, document.routes
        )
        deadline = float(setting("CLASSIFIER_DEADLINE_SECONDS"))
        outcome, raw, error = _call(reader, event, deadline)
    reading: dict[str, Any] = {}
    if outcome == ShadowOutcome.READ:
        try:
            reading = decision_contract(business).model_validate(raw).model_dump(mode="json")
        except ValidationError as exc:
            outcome, error = ShadowOutcome.INVALID, str(exc)[:2000]
    try:
        ShadowReading.objects.create(
            run=run,
            classifier=classifier,
            classifier_version=version,
            outcome=outcome,
            reading=reading,
            raw_output=_jsonable(raw),
            error=error,
            latency_ms=int((time.monotonic() - started) * 1000),
        )
    except IntegrityError:
        return "already read"  # a duplicate message read it first
    return str(outcome)


# --- comparison ------------------------------------------------------------------------------


@dataclass
class Comparison:
    channel: str
    live: str
    shadow: str
    since: datetime
    until: datetime
    compared: int = 0
    agreed: int = 0
    shadow_failures: Counter[str] = field(default_factory=Counter)
    labelled: int = 0
    live_right: int = 0
    shadow_right: int = 0
    # (live verdict, shadow verdict) -> runs, under the active policy
    verdicts: Counter[tuple[str, str]] = field(default_factory=Counter)
    disagreements: list[dict[str, Any]] = field(default_factory=list)

    @property
    def changed(self) -> int:
        return sum(n for (live, shadow), n in self.verdicts.items() if live != shadow)

    def evidence(self) -> dict[str, Any]:
        """The figures a promotion names as its grounds."""
        return {
            "channel": self.channel,
            "live": self.live,
            "shadow": self.shadow,
            "since": self.since.isoformat(),
            "until": self.until.isoformat(),
            "compared": self.compared,
            "agreed": self.agreed,
            "labelled": self.labelled,
            "live_right": self.live_right,
            "shadow_right": self.shadow_right,
            "verdicts_changed": self.changed,
            "shadow_failures": dict(self.shadow_failures),
        }


def shadow_compare(
    *, channel: IntakeChannel, classifier: str, since: datetime, until: datetime
) -> Comparison:
    """Live and shadow readings of the channel's runs read in the period, side by side."""
    comparison = Comparison(channel.name, channel.classifier, classifier, since, until)
    policy = policy_get(name=channel.policy_version or None, document=False).parsed
    readings = (
        ShadowReading.objects.filter(
            run__channel=channel,
            classifier=classifier,
            created_at__gte=since,
            created_at__lt=until,
        )
        .select_related("run")
        .order_by("-created_at", "-id")[:COMPARED_AT_MOST]
    )
    latest_labels: dict[int, Label] = {}
    shadow_rows = list(readings)
    for judged in Label.objects.filter(run_id__in=[r.run_id for r in shadow_rows]).order_by(
        "created_at", "id"
    ):
        latest_labels[judged.run_id] = judged
    for row in shadow_rows:
        run = row.run
        if row.outcome != ShadowOutcome.READ:
            comparison.shadow_failures[row.outcome] += 1
            continue
        live = run.classification or {}
        if not live:
            continue
        comparison.compared += 1
        live_pair = (live.get("category"), live.get("requested_effect"))
        shadow_pair = (row.reading.get("category"), row.reading.get("requested_effect"))
        comparison.agreed += live_pair == shadow_pair
        label = latest_labels.get(run.pk)
        if label is not None:
            comparison.labelled += 1
            comparison.live_right += live_pair == (label.category, label.effect)
            comparison.shadow_right += shadow_pair == (label.category, label.effect)
        live_verdict = decision_of(run, policy).verdict.value
        shadow_verdict = evaluate(
            policy,
            facts_of(run, tier=default_tier(policy.business)),
            interpretation_of(row.reading),
            run.enrichment,
            text=sender_text(run),
            reviewed=frozenset(run.signals_reviewed),
        ).verdict.value
        comparison.verdicts[(live_verdict, shadow_verdict)] += 1
        if live_pair != shadow_pair and len(comparison.disagreements) < DISAGREEMENTS_SHOWN:
            comparison.disagreements.append(
                {
                    "run": run,
                    "live": live_pair,
                    "shadow": shadow_pair,
                    "label": (label.category, label.effect) if label else None,
                    "live_verdict": live_verdict,
                    "shadow_verdict": shadow_verdict,
                }
            )
    return comparison


# --- promotion ---------------------------------------------------------------------------------


def _configured(channel: IntakeChannel) -> None:
    if setting("CHANNEL_CLASSIFIERS").get(channel.name):
        raise ServiceError(
            Refusal.CONFIGURED_CLASSIFIER,
            f"GATEHOUSE_CHANNEL_CLASSIFIERS names {channel.name}'s classifier: change it there",
        )


def _switch(channel: IntakeChannel, to: str) -> None:
    version, prompt = classifier_versions(to)
    shadows = [name for name in channel.shadow_classifiers or [] if name != to]
    if channel.classifier not in shadows:
        shadows.append(channel.classifier)  # the one replaced goes on being compared
    channel.classifier, channel.classifier_version, channel.prompt_version = to, version, prompt
    channel.shadow_classifiers = shadows
    channel.save(
        update_fields=["classifier", "classifier_version", "prompt_version", "shadow_classifiers"]
    )


def classifier_promote(
    *, channel_id: int, classifier: str, user: User, evidence: dict[str, Any]
) -> ClassifierPromotion:
    """Make the shadow the channel's live classifier, on the named evidence."""
    if not user.has_perm(CHANGE_CHANNEL):
        raise PermissionDenied("you need the change_intakechannel permission")
    with transaction.atomic(durable=True):
        channel = IntakeChannel.objects.select_for_update().get(pk=channel_id)
        _configured(channel)
        if classifier not in (channel.shadow_classifiers or []):
            raise ServiceError(
                Refusal.NOT_A_SHADOW, f"{classifier} does not read {channel.name} in shadow"
            )
        before, before_version = channel.classifier, channel.classifier_version
        _switch(channel, classifier)
        promotion = ClassifierPromotion.objects.create(
            channel=channel,
            from_classifier=before,
            from_version=before_version,
            to_classifier=classifier,
            to_version=channel.classifier_version,
            evidence=evidence,
            promoted_by=user,
        )
        record_audit(
            None,
            AuditAction.CLASSIFIER_PROMOTED,
            actor=user,
            channel=channel.name,
            before=before_version,
            after=channel.classifier_version,
            promotion=promotion.pk,
            evidence=evidence,
        )
        return promotion


TRAIN_TASK = "automation.tasks.train_into_shadow"


def classifier_training_start(*, channel_id: int, people: bool, user: User) -> ClassifierTraining:
    """Ask a worker to train the learned reader on the labelled sets stored for the business
    (and, with `people`, the labels people gave), as `train_classifier` does with no files,
    and to put the new version in shadow on the channel. A worker, since the stored sets may
    hold thousands of messages (a couple of thousand take half a minute)."""
    if not user.has_perm(CHANGE_CHANNEL):
        raise PermissionDenied("changing a channel's readers needs the right to change channels")
    with transaction.atomic(durable=True):
        channel = IntakeChannel.objects.get(pk=channel_id)
        training = ClassifierTraining.objects.create(
            channel=channel, people=people, requested_by=user
        )
        enqueue_after_commit(TRAIN_TASK, training.pk, priority=Priority.BULK)
    return training


def classifier_training_run(*, training_id: int) -> str:
    """Train, then put the new version in shadow on the channel: it reads beside the live
    reader and decides nothing until it is promoted. The active learned model stays."""
    # Claimed by a conditional update: a message delivered twice trains once.
    if not ClassifierTraining.claim(training_id):
        return "already taken"
    training = ClassifierTraining.objects.select_related("requested_by").get(pk=training_id)
    try:
        report = classifier_train(labels=None, people=training.people, activate=False)
    except TrainingError as exc:
        return _training_failed(training, str(exc))
    except Exception as exc:
        return _training_failed(training, f"{type(exc).__name__}: {exc}")
    with transaction.atomic(durable=True):
        _into_shadow(training, report)
    return EvaluationStatus.DONE


def _training_failed(training: ClassifierTraining, error: str) -> str:
    training.fail(error=error, now=timezone.now())
    training.save(update_fields=["status", "error", "finished_at"])
    return EvaluationStatus.FAILED


def _into_shadow(training: ClassifierTraining, report: TrainingReport) -> None:
    version, user = report.model.version, training.requested_by
    channel = IntakeChannel.objects.select_for_update().get(pk=training.channel_id)
    training.succeed(
        version=version,
        result={
            "trained_on": report.trained_on,
            "categories": list(report.model.categories),
            "held_out": report.held_out,
            "too_few": report.too_few,
            "not_a_type": report.not_a_type,
        },
        now=timezone.now(),
    )
    training.save(update_fields=["status", "version", "finished_at", "result"])
    record_audit(
        None,
        AuditAction.CLASSIFIER_TRAINED,
        actor=user,
        version=version,
        trained_on=report.trained_on,
        sources=report.model.sources,
        not_a_type=report.not_a_type,
    )
    shadows = list(channel.shadow_classifiers or [])
    if version != channel.classifier and version not in shadows:
        channel.shadow_classifiers = [*shadows, version]
        channel.save(update_fields=["shadow_classifiers"])
        record_audit(
            None,
            AuditAction.CLASSIFIER_SHADOW_ADDED,
            actor=user,
            channel=channel.name,
            classifier=version,
        )


def classifier_rollback(*, promotion_id: int, user: User) -> ClassifierPromotion:
    """Switch the channel back to the classifier a promotion replaced."""
    if not user.has_perm(CHANGE_CHANNEL):
        raise PermissionDenied("you need the change_intakechannel permission")
    with transaction.atomic(durable=True):
        promotion = ClassifierPromotion.objects.select_for_update().get(pk=promotion_id)
        channel = IntakeChannel.objects.select_for_update().get(pk=promotion.channel_id)
        _configured(channel)
        if promotion.rolled_back_at is not None or channel.classifier != promotion.to_classifier:
            raise ServiceError(
                Refusal.STATE_CONFLICT, "the channel no longer reads with this promotion"
            )
        _switch(channel, promotion.from_classifier)
        promotion.rolled_back_by, promotion.rolled_back_at = user, timezone.now()
        promotion.save(update_fields=["rolled_back_by", "rolled_back_at"])
        record_audit(
            None,
            AuditAction.CLASSIFIER_ROLLED_BACK,
            actor=user,
            channel=channel.name,
            promotion=promotion.pk,
            after=channel.classifier_version,
        )
        return promotion
