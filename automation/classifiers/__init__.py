"""The one seam where a model plugs in: classify(event, attempt) with a deadline.

A classifier returns its raw output (JSON-like) or raises ClassifierTimeout or
ClassifierUnavailable. It never decides anything: the pipeline validates the output against
ClassifierDecision and policy decides what happens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


class ClassifierTimeout(Exception):
    """The classifier did not answer within its deadline. Retryable."""


class ClassifierUnavailable(Exception):
    """The classifier could not be reached or has nothing to say. Retryable."""


@dataclass(frozen=True)
class ClassifierInput:
    channel: str
    event_id: str
    normalized: dict[str, Any]


class Classifier(Protocol):
    name: str

    def classify(self, event: ClassifierInput, attempt: int, *, deadline: float) -> Any: ...


VERSIONS = {"recorded": "recorded-classifier-1", "heuristic": "heuristic-1"}


def get_classifier(name: str) -> Classifier:
    from automation.classifiers.heuristic import HeuristicClassifier
    from automation.classifiers.recorded import RecordedClassifier

    registry: dict[str, type[Classifier]] = {
        "recorded": RecordedClassifier,
        "heuristic": HeuristicClassifier,
    }
    try:
        return registry[name]()
    except KeyError:
        raise ClassifierUnavailable(f"no classifier named {name!r} is installed") from None
