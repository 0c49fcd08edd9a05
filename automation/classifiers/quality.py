"""After-the-fact review of straight-through runs (QA), and the labels people's judgements
leave for the learning loop.

Policy samples a share of the runs that go straight through (`policy.evaluation.qa_sample`);
each sample gets a QAReview in the transaction that authorized its effect, and the effect
goes ahead as if nothing were sampled. A reviewer of the sample's group confirms the
reading or corrects it. A correction re-runs nothing, since the effect is done: the review
waits in the reconcile queue until an ops lead records what was done about it. Every
confirmation and correction, a correction in the correction queue, and an approval, leave a
Label: who judged which reading, made by which classifier version, and what is right.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from audit.models import AuditAction
from automation.classifiers.models import Label, LabelSource, QAReview, QAStatus
from automation.runs.journal import record_audit, write_row
from automation.runs.models import Run
from automation.runs.payloads import policy_for
from core.codes import Refusal
from core.errors import ServiceError
from core.limits import within


def reading_of(run: Run) -> dict[str, Any]:
    """The reading a person judges: what the classifier proposed, as the run stores it."""
    classification = run.classification or {}
    return {
        "category": classification.get("category", ""),
        "effect": classification.get("requested_effect", run.effect_name),
        "confidence": classification.get("confidence"),
        "fields": classification.get("fields", {}),
    }


def qa_review_open(run: Run, *, group: str, decided: dict[str, Any]) -> QAReview:
    """A QA sample of a run whose effect policy has just authorized: in that transaction,
    written with the run's journal; nothing about the run or its effect waits for it."""
    review = QAReview(
        run=run,
        route=decided.get("route", ""),
        group=group,
        policy_version=decided.get("policy_version", ""),
        classifier_version=run.classifier_version,
        reading=reading_of(run),
    )
    write_row(run, review)
    record_audit(run, AuditAction.QA_SAMPLED, group=group, route=review.route)
    return review


def label_record(
    run: Run, *, source: LabelSource, actor: User, category: str, effect: str
) -> Label:
    """One person's judgement of the run's reading."""
    reading = reading_of(run)
    label = Label(
        run=run,
        source=source,
        actor=actor,
        classifier_version=run.classifier_version,
        reading={k: reading[k] for k in ("category", "effect", "confidence")},
        category=category,
        effect=effect,
        reading_was_right=(category, effect) == (reading["category"], reading["effect"]),
    )
    label.save()
    return label


def _may_review(user: User, review: QAReview) -> None:
    if not (user.is_superuser or user.groups.filter(name=review.group).exists()):
        raise PermissionDenied(f"QA samples of this route are reviewed by {review.group}")


def _open_review(review_id: int, user: User) -> QAReview:
    review = QAReview.objects.select_for_update().select_related("run").get(pk=review_id)
    _may_review(user, review)
    if review.status != QAStatus.OPEN:
        raise ServiceError(Refusal.STATE_CONFLICT, f"this sample was already {review.status}")
    return review


def qa_confirm(*, review_id: int, user: User) -> QAReview:
    """The reading was right."""
    with transaction.atomic(durable=True):
        review = _open_review(review_id, user)
        review.confirm(user=user, now=timezone.now())
        review.save(update_fields=["status", "reviewer", "reviewed_at"])
        reading = review.reading
        label_record(
            review.run,
            source=LabelSource.QA_CONFIRMED,
            actor=user,
            category=reading["category"],
            effect=reading["effect"],
        )
        record_audit(review.run, AuditAction.QA_CONFIRMED, actor=user, review=review.pk)
        return review


def qa_correct(
    *, review_id: int, user: User, category: str, effect: str, note: str = ""
) -> QAReview:
    """The reading was wrong: say what is right. The effect already happened and is not run
    again; the review goes to the reconcile queue for an ops lead."""
    within(note, what="the note")
    with transaction.atomic(durable=True):
        review = _open_review(review_id, user)
        _named_by_the_catalogue(review.run, category=category, effect=effect)
        reading = review.reading
        if (category, effect) == (reading["category"], reading["effect"]):
            raise ServiceError(
                Refusal.INVALID_CORRECTION, "that is what the reading said: confirm it instead"
            )
        review.correct(
            user=user,
            now=timezone.now(),
            correction={"category": category, "effect": effect, "note": note.strip()},
        )
        review.save(update_fields=["status", "reviewer", "reviewed_at", "correction"])
        label_record(
            review.run,
            source=LabelSource.QA_CORRECTED,
            actor=user,
            category=category,
            effect=effect,
        )
        record_audit(
            review.run,
            AuditAction.QA_CORRECTED,
            actor=user,
            review=review.pk,
            was={"category": reading["category"], "effect": reading["effect"]},
            now={"category": category, "effect": effect},
        )
        return review


def _named_by_the_catalogue(run: Run, *, category: str, effect: str) -> None:
    """A correction names a request type and an effect of the run's catalogue version."""
    business = policy_for(run).parsed.business
    if category not in business.request_types:
        raise ServiceError(
            Refusal.INVALID_CORRECTION, f"{category!r} is no request type of the catalogue"
        )
    if effect not in business.effects:
        raise ServiceError(Refusal.INVALID_CORRECTION, f"{effect!r} is no effect of the catalogue")


def qa_reconcile(*, review_id: int, user: User, note: str) -> QAReview:
    """An ops lead records what was done about an effect that followed a wrong reading."""
    if not user.has_perm("automation.work_queue"):
        raise PermissionDenied("you need the work_queue permission")
    if not note.strip():
        raise ServiceError(
            Refusal.REASON_REQUIRED, "say what was done: it goes on the run's record"
        )
    within(note, what="the note")
    with transaction.atomic(durable=True):
        review = QAReview.objects.select_for_update().select_related("run").get(pk=review_id)
        if review.status != QAStatus.CORRECTED or review.reconciled_at is not None:
            raise ServiceError(
                Refusal.STATE_CONFLICT, "only a corrected sample waits to be reconciled"
            )
        review.reconciled_by, review.reconciled_at = user, timezone.now()
        review.reconcile_note = note.strip()
        review.save(update_fields=["reconciled_by", "reconciled_at", "reconcile_note"])
        record_audit(
            review.run, AuditAction.QA_RECONCILED, actor=user, review=review.pk, note=note.strip()
        )
        return review


def samples_for(user: User) -> QuerySet[QAReview]:
    """The QA samples waiting for this person's groups (every one, for a superuser)."""
    rows = QAReview.objects.filter(status=QAStatus.OPEN).select_related("run")
    if user.is_superuser:
        return rows
    return rows.filter(group__in=user.groups.values_list("name", flat=True))
