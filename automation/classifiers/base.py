"""The one seam where a model plugs in: classify(event, attempt) with a deadline.

A classifier returns its raw output (JSON-like) or raises ClassifierTimeout or
ClassifierUnavailable. It never decides anything: the pipeline validates the output against
ClassifierDecision and policy decides what happens. Implementations import this module,
never the package that loads them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Protocol

from policy.catalogue import Catalogue, reference_catalogue


class ClassifierTimeout(Exception):
    """The classifier did not answer within its deadline. Retryable."""


class ClassifierUnavailable(Exception):
    """The classifier could not be reached or has nothing to say. Retryable."""


class ClassifierRateLimited(ClassifierUnavailable):
    """The server turned the request away for its rate limit (429), asking for a pause of
    `retry_after` seconds (None: it did not say). Not the reader's failure: the whole pool
    slows down, and the run waits without spending an attempt."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ClassifierRefused(ClassifierUnavailable):
    """The classifier's server refused the request itself (malformed for it): the same
    request cannot succeed later, so it is not retried; a person fixes the configuration."""


@dataclass(frozen=True)
class ClassifierInput:
    channel: str
    event_id: str
    normalized: dict[str, Any]
    # The business the run's version decides for: what a reading may name.
    business: Catalogue = field(default_factory=reference_catalogue)
    # The version's route for each request type: what a reader recommends for a type it
    # reads (policy checks the recommendation against the same table).
    routes: Mapping[str, str] = field(default_factory=dict)


def recommended_route(business: Catalogue, routes: Mapping[str, str], category: str) -> str:
    """The route a reader recommends for a type it reads: the version's route for it. Given
    no routes (a reader called on its own, as in a unit test), the catalogue's first route,
    so the reading still names a route the catalogue lists; policy compares the
    recommendation with its own table either way."""
    return routes.get(category) or next(iter(business.routes))


@dataclass(frozen=True)
class Usage:
    """What a model server reported a call cost, in tokens (None: it did not say)."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cost: Decimal | None = None  # from the price table of the settings, when it has the model


@dataclass(frozen=True)
class Answer:
    """A remote classifier's answer with what it cost. `cut_at` is the token limit the
    generation was stopped at, when it was: such an answer is unfinished, an invalid reading."""

    output: Any
    usage: Usage = field(default_factory=Usage)
    cut_at: int | None = None


def answer_of(result: Any) -> Answer:
    """Any classifier's result as an Answer (local readers return their output bare)."""
    return result if isinstance(result, Answer) else Answer(result)


class Classifier(Protocol):
    """`local = True` on an implementation says it is pure and in-process (no network, no
    model, answers in milliseconds): the pipeline then calls it inside the run's transaction
    instead of leasing the attempt and calling it outside any transaction.

    A remote one names its model server in `server` (its base URL): the calls a worker keeps
    in flight, the provider's limits, the circuit breaker and the daily budget are counted
    per server (automation.classifiers.servers)."""

    name: str

    def classify(self, event: ClassifierInput, attempt: int, *, deadline: float) -> Any: ...


# The installed classifiers by name, as dotted paths (as Django names its backends): a
# classifier's module, and the SDK it brings (openai takes 0.3 s to import), is loaded only
# by a process that uses it.
CLASSIFIERS = {
    "recorded": "automation.classifiers.recorded.RecordedClassifier",
    "heuristic": "automation.classifiers.heuristic.HeuristicClassifier",
    "learned": "automation.classifiers.learned.LearnedClassifier",
    "openai-compatible": "automation.classifiers.openai_compatible.OpenAICompatibleClassifier",
}

# Versions of the classifiers that have no configuration; see classifier_versions().
VERSIONS = {"recorded": "recorded-classifier-1", "heuristic": "heuristic-3"}
