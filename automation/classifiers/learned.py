"""The `learned` classifier: a model trained on labelled requests (`train_classifier`) reads
the category; the heuristic's extraction supplies the fields and the effect. A request the
heuristic reads as a type the model did not learn (too few labels) is left to the heuristic.

Local like the heuristic (no network, milliseconds a message), so the pipeline reads with it
inside the run's transaction. Below ABSTAIN_BELOW for its best category it says the reading
is unclear, and policy sends it to a person. With no trained model it is unavailable, and the
run waits like any run whose classifier cannot answer.
"""

from __future__ import annotations

from typing import Any

from automation.classifiers.base import (
    ClassifierInput,
    ClassifierRefused,
    ClassifierUnavailable,
    recommended_route,
)
from automation.classifiers.heuristic import UNCLEAR, intent_text, mail_effect, read
from automation.classifiers.training import (
    ABSTAIN_BELOW,
    LoadedModel,
    TrainingError,
    active_model,
    stored_model,
)
from automation.schemas import is_mail


class LearnedClassifier:
    """`learned` reads with the active model; named by a model's version (`learned-<checksum
    prefix>`), it reads with that model whichever is active, which is how a model trained in
    the console reads a channel in shadow, and after its promotion, live."""

    name = "learned"
    local = True

    def __init__(self, pinned: str | None = None) -> None:
        self.pinned = pinned
        if pinned is not None:
            self.name = pinned

    def _model(self) -> LoadedModel | None:
        return stored_model(self.pinned) if self.pinned is not None else active_model()

    @property
    def version(self) -> str:
        try:
            model = self._model()
        except TrainingError:
            return "learned-damaged"
        if model is None:
            return self.pinned or "learned-untrained"
        return model.version

    def classify(self, event: ClassifierInput, attempt: int, *, deadline: float) -> Any:
        try:
            model = self._model()
        except TrainingError as exc:  # a damaged artifact: retrying cannot mend it
            raise ClassifierRefused(str(exc)) from exc
        if model is None and self.pinned is not None:
            raise ClassifierRefused(f"no learned model {self.pinned} is stored")
        if model is None:
            raise ClassifierUnavailable("no learned model is trained: run train_classifier")
        normalized, business = event.normalized, event.business
        # Fields, parts and the effect the words ask for.
        reading = read(normalized, business=business, routes=event.routes)
        if reading["category"] not in model.categories and reading["reason_code"] != UNCLEAR:
            return reading  # words of a type the model could not learn: the heuristic's reading
        category, probability = model.read(intent_text(normalized))
        if category not in business.request_types:
            return reading  # learned from labels of a type the run's catalogue no longer has
        if category != reading["category"] and is_mail(normalized):
            reading["requested_effect"] = mail_effect(business, category)
        reading.update(
            category=category,
            recommended_route=recommended_route(business, event.routes, category),
            confidence=round(probability, 2),
            reason_code=UNCLEAR if probability < ABSTAIN_BELOW else f"{category}_learned",
        )
        return reading
