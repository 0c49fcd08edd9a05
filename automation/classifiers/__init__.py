"""The one seam where a model plugs in: classify(event, attempt) with a deadline.

A classifier returns its raw output (JSON-like) or raises ClassifierTimeout or
ClassifierUnavailable. It never decides anything: the pipeline validates the output against
ClassifierDecision and policy decides what happens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from automation.conf import setting


class ClassifierTimeout(Exception):
    """The classifier did not answer within its deadline. Retryable."""


class ClassifierUnavailable(Exception):
    """The classifier could not be reached or has nothing to say. Retryable."""


class ClassifierRefused(ClassifierUnavailable):
    """The classifier's server refused the request itself (malformed for it): the same
    request cannot succeed later, so it is not retried; a person fixes the configuration."""


@dataclass(frozen=True)
class ClassifierInput:
    channel: str
    event_id: str
    normalized: dict[str, Any]


class Classifier(Protocol):
    name: str

    def classify(self, event: ClassifierInput, attempt: int, *, deadline: float) -> Any: ...


# Versions of the classifiers that have no configuration; see classifier_versions().
VERSIONS = {"recorded": "recorded-classifier-1", "heuristic": "heuristic-3"}


def _registry() -> dict[str, type[Classifier]]:
    from automation.classifiers.heuristic import HeuristicClassifier
    from automation.classifiers.openai_compatible import OpenAICompatibleClassifier
    from automation.classifiers.recorded import RecordedClassifier

    return {
        "recorded": RecordedClassifier,
        "heuristic": HeuristicClassifier,
        OpenAICompatibleClassifier.name: OpenAICompatibleClassifier,
    }


def get_classifier(name: str) -> Classifier:
    try:
        return _registry()[name]()
    except KeyError:
        raise ClassifierUnavailable(f"no classifier named {name!r} is installed") from None


def classifier_versions(name: str) -> tuple[str, str]:
    """(classifier version, prompt version) to stamp on a channel that uses this classifier.

    A model-backed classifier knows both (its model, its prompt file); the others keep their
    fixed version and the deployment's configured prompt version.
    """
    if name in VERSIONS:
        return VERSIONS[name], str(setting("PROMPT_VERSION"))
    classifier = get_classifier(name)
    return str(getattr(classifier, "version", name)), str(
        getattr(classifier, "prompt_version", setting("PROMPT_VERSION"))
    )
