"""Shadow mode: a candidate reads every run beside the live classifier and changes nothing;
the comparison; promotion and rollback, audited and refused without permission."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.utils import timezone

from accounts.roles import roles_ensure
from audit.models import AuditEvent
from automation.classifiers import base
from automation.classifiers.base import ClassifierInput
from automation.models import (
    ClassifierPromotion,
    Label,
    LabelSource,
    Run,
    ShadowOutcome,
    ShadowReading,
    State,
    Task,
)
from automation.pipeline.shadow import (
    SHADOW_READ_TASK,
    classifier_promote,
    classifier_rollback,
    shadow_compare,
)
from core.errors import ServiceError
from tests.conftest import Pipeline, _user, decision_for, make_event

pytestmark = pytest.mark.django_db


class Raises:
    def classify(self, event: ClassifierInput, attempt: int, *, deadline: float) -> Any:
        raise RuntimeError("the candidate fell over")


class Hangs:
    def classify(self, event: ClassifierInput, attempt: int, *, deadline: float) -> Any:
        time.sleep(5)


class Garbage:
    def classify(self, event: ClassifierInput, attempt: int, *, deadline: float) -> Any:
        return {"category": "gibberish", "confidence": 7}


class SaysBilling:
    def classify(self, event: ClassifierInput, attempt: int, *, deadline: float) -> Any:
        return {
            "category": "billing",
            "recommended_route": "finance",
            "requested_effect": "send_internal_notification",
            "reason_code": "billing_candidate",
            "confidence": 0.95,
            "fields": {},
        }


@pytest.fixture
def candidates(monkeypatch: pytest.MonkeyPatch, settings: Any) -> None:
    """Shadow classifiers that misbehave (and one that disagrees), installed by name."""
    here = __name__
    for name, cls in {
        "raises": "Raises",
        "hangs": "Hangs",
        "garbage": "Garbage",
        "says-billing": "SaysBilling",
    }.items():
        monkeypatch.setitem(base.CLASSIFIERS, name, f"{here}.{cls}")
        monkeypatch.setitem(base.VERSIONS, name, f"{name}-1")
    monkeypatch.setitem(
        __import__("django.conf").conf.settings.GATEHOUSE, "CLASSIFIER_DEADLINE_SECONDS", 0.3
    )


def run_with_shadows(pipeline: Pipeline, event_id: str, *shadows: str) -> Run:
    pipeline.channel.shadow_classifiers = list(shadows)
    pipeline.channel.save(update_fields=["shadow_classifiers"])
    event = make_event(event_id=event_id)
    return pipeline.run(pipeline.submit(event, [decision_for(event)]))


def test_a_shadow_that_raises_hangs_or_answers_garbage_changes_nothing(
    pipeline: Pipeline, candidates: None
) -> None:
    run = run_with_shadows(pipeline, "evt-shadow", "raises", "hangs", "garbage")

    assert (run.state, Task.objects.filter(run=run).count()) == (State.COMPLETED, 1)
    assert run.classification is not None and run.classification["category"] == "support"
    outcomes = dict(ShadowReading.objects.filter(run=run).values_list("classifier", "outcome"))
    assert outcomes == {
        "raises": ShadowOutcome.FAILED,
        "hangs": ShadowOutcome.TIMEOUT,
        "garbage": ShadowOutcome.INVALID,
    }
    assert "fell over" in ShadowReading.objects.get(run=run, classifier="raises").error
    # The live run is as it would be without shadows: no queue item, no second effect.
    run.refresh_from_db()
    assert (run.state, run.queue) == (State.COMPLETED, "")


def test_shadow_work_is_its_own_low_priority_message(pipeline: Pipeline, candidates: None) -> None:
    pipeline.channel.shadow_classifiers = ["says-billing"]
    pipeline.channel.save(update_fields=["shadow_classifiers"])
    event = make_event(event_id="evt-queued")
    pipeline.submit(event, [decision_for(event)], drain=False)
    with pipeline.capture():
        pipeline.queue.popleft().run()  # the run's own message: it completes
    (message,) = pipeline.queue
    assert (message.func, message.priority) == (SHADOW_READ_TASK, "bulk")
    assert not ShadowReading.objects.exists()  # read after, on its own
    message.run()
    message.run()  # a duplicate message reads nothing twice
    assert ShadowReading.objects.get().outcome == ShadowOutcome.READ


def test_the_comparison_counts_agreement_labels_and_changed_decisions(
    pipeline: Pipeline, candidates: None
) -> None:
    run = run_with_shadows(pipeline, "evt-compare", "says-billing")
    person = _user("lia")
    Label.objects.create(
        run=run,
        source=LabelSource.QA_CONFIRMED,
        actor=person,
        classifier_version=run.classifier_version,
        reading={},
        category="support",
        effect="create_follow_up",
        reading_was_right=True,
    )
    now = timezone.now()
    comparison = shadow_compare(
        channel=pipeline.channel,
        classifier="says-billing",
        since=now - timedelta(days=1),
        until=now + timedelta(minutes=1),
    )

    assert (comparison.compared, comparison.agreed) == (1, 0)
    assert (comparison.labelled, comparison.live_right, comparison.shadow_right) == (1, 1, 0)
    (disagreement,) = comparison.disagreements
    assert disagreement["shadow"] == ("billing", "send_internal_notification")
    assert sum(comparison.verdicts.values()) == 1


def test_promotion_and_rollback_are_audited_and_need_the_right(
    pipeline: Pipeline, candidates: None, ops_lead: User, approver: User
) -> None:
    roles_ensure()
    pipeline.channel.shadow_classifiers = ["says-billing"]
    pipeline.channel.save(update_fields=["shadow_classifiers"])
    evidence = {"compared": 10, "agreed": 8}

    with pytest.raises(PermissionDenied):
        classifier_promote(
            channel_id=pipeline.channel.pk, classifier="says-billing", user=approver, evidence={}
        )
    with pytest.raises(ServiceError):
        classifier_promote(
            channel_id=pipeline.channel.pk, classifier="heuristic", user=ops_lead, evidence={}
        )

    promotion = classifier_promote(
        channel_id=pipeline.channel.pk, classifier="says-billing", user=ops_lead, evidence=evidence
    )
    pipeline.channel.refresh_from_db()
    assert (pipeline.channel.classifier, pipeline.channel.classifier_version) == (
        "says-billing",
        "says-billing-1",
    )
    assert pipeline.channel.shadow_classifiers == ["recorded"]  # the old one keeps reading
    audit = AuditEvent.objects.get(action="classifier.promoted")
    assert (audit.actor, audit.data["evidence"]) == (ops_lead, evidence)

    with pytest.raises(PermissionDenied):
        classifier_rollback(promotion_id=promotion.pk, user=approver)
    classifier_rollback(promotion_id=promotion.pk, user=ops_lead)
    pipeline.channel.refresh_from_db()
    assert pipeline.channel.classifier == "recorded"
    assert ClassifierPromotion.objects.get().rolled_back_by == ops_lead
    assert AuditEvent.objects.filter(action="classifier.rolled_back", actor=ops_lead).exists()
    with pytest.raises(ServiceError):  # once
        classifier_rollback(promotion_id=promotion.pk, user=ops_lead)
