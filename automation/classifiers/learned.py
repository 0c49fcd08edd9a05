"""The `learned` classifier: a model trained on labelled requests (`train_classifier`) reads
the category; the heuristic's extraction supplies the fields and the effect.

Local like the heuristic (no network, milliseconds a message), so the pipeline reads with it
inside the run's transaction. Below ABSTAIN_BELOW for its best category it says the reading
is unclear, and policy sends it to a person. With no trained model it is unavailable, and the
run waits like any run whose classifier cannot answer.
"""

from __future__ import annotations

from typing import Any

from automation.classifiers.base import ClassifierInput, ClassifierRefused, ClassifierUnavailable
from automation.classifiers.heuristic import MAIL_EFFECTS, ROUTES, UNCLEAR, intent_text, read
from automation.classifiers.training import ABSTAIN_BELOW, TrainingError, active_model
from automation.schemas import RequestType, is_mail


class LearnedClassifier:
    name = "learned"
    local = True

    @property
    def version(self) -> str:
        try:
            model = active_model()
        except TrainingError:
            return "learned-damaged"
        return model.version if model is not None else "learned-untrained"

    def classify(self, event: ClassifierInput, attempt: int, *, deadline: float) -> Any:
        try:
            model = active_model()
        except TrainingError as exc:  # a damaged artifact: retrying cannot mend it
            raise ClassifierRefused(str(exc)) from exc
        if model is None:
            raise ClassifierUnavailable("no learned model is trained: run train_classifier")
        normalized = event.normalized
        reading = read(normalized)  # fields, parts and the effect the words ask for
        category, probability = model.read(intent_text(normalized))
        if category != reading["category"] and is_mail(normalized):
            reading["requested_effect"] = str(MAIL_EFFECTS[RequestType(category)])
        reading.update(
            category=category,
            recommended_route=str(ROUTES[RequestType(category)]),
            confidence=round(probability, 2),
            reason_code=UNCLEAR if probability < ABSTAIN_BELOW else f"{category}_learned",
        )
        return reading
