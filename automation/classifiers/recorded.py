"""Replays stored outcomes: fixtures, tests and replays of old runs. No network, no model."""

from __future__ import annotations

from typing import Any

from automation.classifiers.base import ClassifierInput, ClassifierTimeout, ClassifierUnavailable
from automation.classifiers.models import RecordedOutcome


class RecordedClassifier:
    name = "recorded"

    def classify(self, event: ClassifierInput, attempt: int, *, deadline: float) -> Any:
        row = RecordedOutcome.objects.filter(
            channel__name=event.channel, event_id=event.event_id, attempt=attempt
        ).first()
        if row is None:
            raise ClassifierUnavailable(f"no recorded outcome for attempt {attempt}")
        outcome = row.outcome
        if outcome.get("type") == "timeout":
            raise ClassifierTimeout(f"recorded timeout after {deadline:g}s")
        if outcome.get("type") == "decision":
            return outcome.get("value")
        raise ClassifierUnavailable(f"recorded outcome of unknown type {outcome.get('type')!r}")
