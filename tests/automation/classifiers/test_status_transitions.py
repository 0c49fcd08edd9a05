"""QA reviews and worker jobs (trainings, evaluations) move their status only through their
transitions; a job is claimed once, by one conditional update."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from django_fsm import TransitionNotAllowed

from automation.classifiers.models import ClassifierTraining, EvaluationStatus, QAReview, QAStatus
from automation.models import IntakeChannel, IntakeRecord, Run

NOW = timezone.now()


@pytest.fixture
def channel(db: None) -> IntakeChannel:
    return IntakeChannel.objects.create(
        name="status-transitions", workflow_version="workflow-1", prompt_version="prompt-1"
    )


@pytest.fixture
def lead(db: None) -> User:
    return User.objects.create_user("lead")


def review_in(channel: IntakeChannel, status: str) -> QAReview:
    intake = IntakeRecord.objects.create(
        channel=channel, raw=b"{}", content_type="application/json", source="test"
    )
    run = Run.objects.create(
        channel=channel,
        intake=intake,
        event_id=f"evt-{status}",
        workflow_version="workflow-1",
        classifier_version="recorded-classifier-1",
        prompt_version="prompt-1",
    )
    review = QAReview.objects.create(
        run=run,
        route="r",
        group="qa",
        policy_version="policy-1",
        classifier_version="c1",
        reading={"category": "a", "effect": "b", "confidence": 0.9},
        status=status,
    )
    return QAReview.objects.get(pk=review.pk)


REVIEWS: list[tuple[str, dict[str, Any], str]] = [
    ("confirm", {}, QAStatus.CONFIRMED),
    ("correct", {"correction": {"category": "c", "effect": "d", "note": ""}}, QAStatus.CORRECTED),
]


@pytest.mark.parametrize(("name", "extra", "target"), REVIEWS)
@pytest.mark.parametrize("status", list(QAStatus))
def test_a_review_moves_only_while_open(
    channel: IntakeChannel,
    lead: User,
    name: str,
    extra: dict[str, Any],
    target: str,
    status: str,
) -> None:
    review = review_in(channel, status)

    if status != QAStatus.OPEN:
        with pytest.raises(TransitionNotAllowed):
            getattr(review, name)(user=lead, now=NOW, **extra)
        assert QAReview.objects.get(pk=review.pk).status == status
        return
    getattr(review, name)(user=lead, now=NOW, **extra)
    review.save()

    stored = QAReview.objects.values("status", "reviewer", "reviewed_at").get(pk=review.pk)
    assert stored == {"status": target, "reviewer": lead.pk, "reviewed_at": NOW}


def test_a_job_is_claimed_once_then_finishes_from_running(
    channel: IntakeChannel, lead: User
) -> None:
    training = ClassifierTraining.objects.create(channel=channel, requested_by=lead)
    queued = ClassifierTraining.objects.get(pk=training.pk)
    with pytest.raises(TransitionNotAllowed):
        queued.fail(error="too early", now=NOW)

    assert ClassifierTraining.claim(training.pk) is True
    assert ClassifierTraining.claim(training.pk) is False

    running = ClassifierTraining.objects.get(pk=training.pk)
    running.succeed(version="learned-2", result={"trained_on": 3}, now=NOW)
    running.save()
    done = ClassifierTraining.objects.get(pk=training.pk)
    assert (done.status, done.version, done.finished_at) == (
        EvaluationStatus.DONE,
        "learned-2",
        NOW,
    )
    with pytest.raises(TransitionNotAllowed):
        done.fail(error="late", now=NOW)
