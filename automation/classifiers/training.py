"""The `learned` classifier's model: trained on labelled requests, stored as a versioned
artifact, loaded once per process.

The model reads what the heuristic reads, a request's subject and the sender's own words
(`heuristic.intent_text`), as TF-IDF word (1-2) and character (3-5, within words) n-grams;
a linear support-vector model, its scores calibrated into probabilities (sigmoid, on
held-out folds), picks the category among the types with at least MIN_LABELS labels to
train on (the report names the others; the heuristic reads them). It learns the
category only: the fields, amounts, dates and the effect stay the heuristic's extraction,
and policy decides as for any reading.

Training holds back a fixed part of every labelled set (the files whose name hashes into
the held-back quarter, so the split is the same on every machine) and reports accuracy on
that part, next to a cross-validated accuracy on the rest. The artifact is a pickle written
by this module into the product's own database; it is loaded only after its checksum matches
the one stored with it.
"""

from __future__ import annotations

import csv
import hashlib
import pickle
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.db import transaction
from django.utils import timezone

from automation.classifiers.heuristic import intent_text
from automation.classifiers.models import (
    ClassifierModel,
    Label,
    LabelledExample,
    LabelledSetStatus,
)
from automation.mail import parse_message
from automation.schemas import MailEvent
from policy.services import policy_business

# One labelled file in this many is held back from training, by a hash of its name.
HOLD_BACK_ONE_IN = 4
# Below this probability for its best category the model says it is unclear.
ABSTAIN_BELOW = 0.5
# The fewest labelled requests of a type, in the training part, the model learns it from:
# with three or fewer, each of the three folds its probabilities are calibrated on sees the
# type once at most. A type with fewer is left out of the model, and the learned reader
# leaves a request the heuristic reads as that type to the heuristic.
MIN_LABELS = 4


class TrainingError(ValueError):
    pass


@dataclass(frozen=True)
class Example:
    source: str  # the labelled set's folder name
    file: str
    text: str
    category: str

    @property
    def held_back(self) -> bool:
        digest = hashlib.sha256(f"{self.source}/{self.file}".encode()).digest()
        return digest[0] % HOLD_BACK_ONE_IN == 0


@dataclass
class TrainingReport:
    model: ClassifierModel
    trained_on: int
    held_out: dict[str, dict[str, int]] = field(default_factory=dict)
    # The types with too few labels to learn, and how many they have in the training part.
    too_few: dict[str, int] = field(default_factory=dict)
    # Examples labelled with a category the active version has no request type for: left
    # out of training and of the figures, by that category.
    not_a_type: dict[str, int] = field(default_factory=dict)

    def lines(self) -> list[str]:
        model = self.model
        out = [
            f"{model.version}: trained on {self.trained_on} labelled requests "
            f"({', '.join(model.categories)}), checksum {model.checksum[:12]}",
            "cross-validated accuracy on the training part: "
            + (f"{model.cv_accuracy:.1%}" if model.cv_accuracy is not None else "n/a"),
        ]
        out += [
            f"{too_few_to_learn(name, count)}; read by the heuristic"
            for name, count in self.too_few.items()
        ]
        out += [
            f"{name}: {count} labelled, not a request type of the active version; left out"
            for name, count in self.not_a_type.items()
        ]
        for name, figures in self.held_out.items():
            right, of = figures["right"], figures["of"]
            share = f" = {right / of:.1%}" if of else ""
            out.append(f"held back from {name}: {right}/{of} right{share}")
        return out


def examples_from(labels: Path) -> list[Example]:
    """The labelled e-mails of one set (labels.csv beside its .eml files), read as the
    classifier reads them; unusable and replayed files are left out."""
    source = labels.parent.name
    found = []
    with labels.open(newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            if row.get("expected_intake") != "new" or not row.get("category"):
                continue
            raw = (labels.parent / row["file"]).read_bytes()
            found.append(Example(source, row["file"], _read(raw), row["category"]))
    return found


def _read(raw: bytes) -> str:
    event = MailEvent.model_validate(parse_message(raw).event())
    return intent_text(event.normalized())


def examples_stored() -> tuple[list[Example], list[str]]:
    """The labelled e-mails of every set uploaded in the console, read as the classifier
    reads them, and the names of those sets."""
    rows = (
        LabelledExample.objects.filter(labelled_set__status=LabelledSetStatus.READ)
        .filter(expected_intake="new")
        .exclude(category="")
        .order_by("labelled_set__name", "line")
        .values_list("labelled_set__name", "file", "category", "message")
    )
    found = [Example(name, file, _read(bytes(raw)), category) for name, file, category, raw in rows]
    return found, list(dict.fromkeys(e.source for e in found))


# The name people's labels are reported under, beside the labelled sets' folder names.
PEOPLE = "labels"


def examples_from_people() -> list[Example]:
    """People's judgements (Label rows): for each run the latest one, on the run's stored
    input, read as the classifier reads it."""
    latest: dict[int, Label] = {}
    for label in Label.objects.select_related("run").order_by("created_at", "id"):
        latest[label.run_id] = label
    return [
        Example(PEOPLE, f"run-{run_id}", intent_text(label.run.normalized or {}), label.category)
        for run_id, label in sorted(latest.items())
    ]


def _pipeline(smallest_class: int) -> Any:
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.pipeline import FeatureUnion, Pipeline
    from sklearn.svm import LinearSVC

    features = FeatureUnion(
        [
            ("words", TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, lowercase=True)),
            (
                "chars",
                TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 5), sublinear_tf=True),
            ),
        ]
    )
    linear = LinearSVC(C=1.0, class_weight="balanced")
    folds = min(3, smallest_class)
    model = CalibratedClassifierCV(linear, method="sigmoid", cv=folds) if folds >= 2 else linear
    return Pipeline([("features", features), ("model", model)])


def _cross_validated(texts: list[str], labels: list[str], smallest: int) -> float | None:
    from sklearn.model_selection import StratifiedKFold, cross_val_score

    folds = min(5, smallest)
    if folds < 2:
        return None
    splitter = StratifiedKFold(n_splits=folds, shuffle=True, random_state=0)
    scores = cross_val_score(_pipeline(smallest - smallest // folds), texts, labels, cv=splitter)
    return float(scores.mean())


def classifier_train(
    *, labels: list[Path] | None = None, people: bool = False, activate: bool = True
) -> TrainingReport:
    """Train on every labelled set's training part (and, with `people`, on the labels people
    gave), report on each held-back part, store the artifact as a new version (the active
    one unless told otherwise). With no `labels`, the sets stored in the console are the
    labelled sets. Only the request types of the active version are learned: an example of
    another category is left out and counted."""
    if labels is None:
        examples, sources = examples_stored()
        if not examples and not people:
            raise TrainingError(
                "no labelled set is stored: upload one in the console (Reading) "
                "or name labels.csv files"
            )
    else:
        examples = [example for path in labels for example in examples_from(path)]
        sources = [str(path) for path in labels]
    if people:
        examples += examples_from_people()
    types = set(policy_business(name=None).request_types)
    not_a_type = dict(
        sorted(Counter(e.category for e in examples if e.category not in types).items())
    )
    examples = [e for e in examples if e.category in types]
    too_few = _too_few_to_learn(examples)
    # A type the model does not learn is neither trained on nor measured on.
    examples = [e for e in examples if e.category not in too_few]
    training = [e for e in examples if not e.held_back]
    categories = sorted({e.category for e in training})
    if len(categories) < 2:
        raise TrainingError(
            f"training needs at least {MIN_LABELS} labelled requests of each of two categories"
            + "".join(f"; {too_few_to_learn(name, count)}" for name, count in too_few.items())
        )
    texts, targets = [e.text for e in training], [e.category for e in training]
    smallest = min(targets.count(name) for name in categories)
    pipeline = _pipeline(smallest)
    pipeline.fit(texts, targets)
    held_out: dict[str, dict[str, int]] = {}
    for source in dict.fromkeys(e.source for e in examples):
        kept = [e for e in examples if e.held_back and e.source == source]
        guesses = pipeline.predict([e.text for e in kept]) if kept else []
        right = sum(str(g) == e.category for g, e in zip(guesses, kept, strict=True))
        held_out[source] = {"right": right, "of": len(kept)}
    artifact = pickle.dumps(pipeline, protocol=pickle.HIGHEST_PROTOCOL)
    checksum = hashlib.sha256(artifact).hexdigest()
    with transaction.atomic(durable=True):
        model, _ = ClassifierModel.objects.get_or_create(
            version=f"learned-{checksum[:12]}",
            defaults={
                "checksum": checksum,
                "artifact": artifact,
                "trained_at": timezone.now(),
                "training_size": len(training),
                "categories": categories,
                "cv_accuracy": _cross_validated(texts, targets, smallest),
                "held_out": held_out,
                "sources": sources + ([PEOPLE] if people else []),
            },
        )
        if activate:
            ClassifierModel.objects.filter(is_active=True).exclude(pk=model.pk).update(
                is_active=False
            )
            ClassifierModel.objects.filter(pk=model.pk).update(is_active=True)
            model.is_active = True
    return TrainingReport(model, len(training), held_out, too_few, not_a_type)


def _too_few_to_learn(examples: list[Example]) -> dict[str, int]:
    """The types labelled fewer than MIN_LABELS times in the training part, with that count."""
    counts = Counter(e.category for e in examples if not e.held_back)
    labelled = sorted({e.category for e in examples})
    return {name: counts[name] for name in labelled if counts[name] < MIN_LABELS}


def too_few_to_learn(name: str, count: int) -> str:
    labels = "label" if count == 1 else "labels"
    return f"{name}: {count} {labels} to train on, too few to learn (it takes {MIN_LABELS})"


@dataclass(frozen=True)
class LoadedModel:
    version: str
    pipeline: Any

    @property
    def categories(self) -> frozenset[str]:
        """The types the model learned: the only ones it ever reads."""
        return frozenset(str(name) for name in self.pipeline.classes_)

    def read(self, text: str) -> tuple[str, float]:
        """(category, its probability)."""
        probabilities = self.pipeline.predict_proba([text])[0]
        best = int(probabilities.argmax())
        return str(self.pipeline.classes_[best]), float(probabilities[best])


_LOADED: dict[str, LoadedModel] = {}
# Models kept unpickled in a process: the active one and those reading channels by version
# (live or in shadow) are a handful.
KEPT_LOADED = 8


def active_model() -> LoadedModel | None:
    """The active model, unpickled once per process (by checksum); None when none is."""
    row = ClassifierModel.objects.filter(is_active=True).values("version", "checksum").first()
    return _loaded(row) if row is not None else None


def stored_model(version: str) -> LoadedModel | None:
    """The stored model of that version (active or not), unpickled once per process; None
    when there is none."""
    row = ClassifierModel.objects.filter(version=version).values("version", "checksum").first()
    return _loaded(row) if row is not None else None


def _loaded(row: Mapping[str, Any]) -> LoadedModel:
    loaded = _LOADED.get(row["checksum"])
    if loaded is None:
        artifact = bytes(
            ClassifierModel.objects.values_list("artifact", flat=True).get(version=row["version"])
        )
        if hashlib.sha256(artifact).hexdigest() != row["checksum"]:
            raise TrainingError(
                f"{row['version']}: the stored artifact does not match its checksum"
            )
        loaded = LoadedModel(row["version"], pickle.loads(artifact))  # noqa: S301 - our own artifact, checksummed
        if len(_LOADED) >= KEPT_LOADED:
            _LOADED.clear()
        _LOADED[row["checksum"]] = loaded
    return loaded
