"""How well a classifier reads a labelled set of messages, measured through the real pipeline.

Every message goes through intake, enrichment, the classifier, the extraction checks and the
policy decision, exactly as in production, inside one transaction that is rolled back at the
end: an evaluation leaves nothing behind and delivers no effect.
"""

from __future__ import annotations

import csv
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from audit.models import AuditAction
from automation.classifiers import LEARNED_VERSION, classifier_exists, classifier_versions
from automation.classifiers.labelled import MANAGE_READING, labelled_set_folder
from automation.classifiers.models import (
    ClassifierResult,
    LabelledSet,
    LabelledSetEvaluation,
    LabelledSetStatus,
)
from automation.classifiers.training import TrainingError, active_model, stored_model
from automation.intake.customers import customers_load_in_transaction
from automation.intake.models import IntakeChannel
from automation.intake.services import MAIL_TYPE, intake_submit_in_transaction
from automation.pipeline.services import run_advance_in_transaction
from automation.runs.journal import record_audit
from automation.runs.models import Run, StageName, State
from core.codes import Refusal
from core.errors import ServiceError
from policy.services import policy_ensure_defaults_in_transaction, policy_get
from worker.dispatch import Priority, enqueue_after_commit

# The pipeline stops here for an evaluation: the decision is made, nothing is delivered.
WORKING = {State.RECEIVED, State.VALIDATED, State.NORMALIZED, State.ENRICHED, State.CLASSIFIED}
LABEL_COLUMNS = {"file", "category", "effect", "expected_intake"}
# Confidence bands of the reliability table; the last includes 1.0.
BANDS = [(0.0, 0.2), (0.2, 0.4), (0.4, 0.6), (0.6, 0.8), (0.8, 1.0)]


class LabelsInvalid(ValueError):
    pass


@dataclass(frozen=True)
class Reading:
    file: str
    label_category: str
    label_effect: str
    label_problem: str
    category: str
    effect: str
    state: str
    outcome: str
    failure_field: str
    confidence: float | None = None

    @property
    def right(self) -> bool:
        """Read right: the category and the effect a careful person would say."""
        return (self.category, self.effect) == (self.label_category, self.label_effect)

    @property
    def straight_through(self) -> bool:
        return self.destination == "straight_through"

    @property
    def to_people(self) -> bool:
        return self.state in {State.APPROVAL_REQUIRED, State.NEEDS_REVIEW}

    @property
    def destination(self) -> str:
        if self.state == State.APPROVAL_REQUIRED:
            return "approval"
        if self.state == State.NEEDS_REVIEW:
            return self.outcome
        if self.state in {State.EXECUTING, State.APPROVED, State.COMPLETED}:
            return "straight_through"
        return self.outcome or self.state


@dataclass
class EvaluationReport:
    classifier: str
    classifier_version: str
    policy_version: str
    readings: list[Reading] = field(default_factory=list)
    left_out: Counter[str] = field(default_factory=Counter)
    # The words of the version's catalogue for its request types (the lines use them).
    labels: dict[str, str] = field(default_factory=dict)
    # For the learned classifier: the types of the catalogue its model did not learn (too
    # few labels), which the heuristic reads instead.
    not_learned: list[str] = field(default_factory=list)
    # Messages that got no reading at all, by why: the classifier timed out, could not be
    # reached, or refused the request. They say nothing of its quality, so they are counted
    # apart from the readings.
    unanswered: Counter[str] = field(default_factory=Counter)

    def said(self, category: str) -> str:
        return self.labels.get(category, category)

    def _share(self, count: int) -> float:
        return count / len(self.readings) if self.readings else 0.0

    @property
    def category_correct(self) -> int:
        return sum(r.category == r.label_category for r in self.readings)

    @property
    def effect_correct(self) -> int:
        return sum(r.effect == r.label_effect for r in self.readings)

    @property
    def to_people(self) -> int:
        return sum(r.to_people for r in self.readings)

    @property
    def destinations(self) -> Counter[str]:
        return Counter(r.destination for r in self.readings)

    @property
    def problems_caught(self) -> tuple[int, int]:
        labelled = [r for r in self.readings if r.label_problem]
        caught = sum(r.failure_field == f"fields.{r.label_problem}" for r in labelled)
        return caught, len(labelled)

    @property
    def confusions(self) -> Counter[tuple[str, str]]:
        return Counter(
            (r.label_category, r.category or "(none)")
            for r in self.readings
            if r.category != r.label_category
        )

    @property
    def per_category(self) -> dict[str, dict[str, float | int]]:
        """Precision and recall of each category, labelled or read."""
        seen = {r.label_category for r in self.readings} | {r.category for r in self.readings}
        names = sorted(seen - {""})
        table: dict[str, dict[str, float | int]] = {}
        for name in names:
            labelled = sum(r.label_category == name for r in self.readings)
            read = sum(r.category == name for r in self.readings)
            both = sum(r.label_category == name == r.category for r in self.readings)
            table[name] = {
                "labelled": labelled,
                "read": read,
                "precision": round(both / read, 4) if read else 0.0,
                "recall": round(both / labelled, 4) if labelled else 0.0,
                "straight_through": self.straight_through(name)[0],
            }
        return table

    def labelled(self, category: str) -> list[Reading]:
        return [r for r in self.readings if r.label_category == category]

    def recall(self, category: str) -> tuple[int, int]:
        """Messages labelled `category` read as it: where a miss costs most (a compromised
        account read as a question), the figure to watch."""
        labelled = self.labelled(category)
        return sum(r.category == category for r in labelled), len(labelled)

    def straight_through(self, category: str) -> tuple[int, int]:
        """Messages labelled `category` that ran straight through, with no person: for a
        type that policy always shows to someone, the promise is that this is 0."""
        labelled = self.labelled(category)
        return sum(r.straight_through for r in labelled), len(labelled)

    @property
    def labelled_categories(self) -> list[str]:
        return sorted({r.label_category for r in self.readings} - {""})

    @property
    def wrong_straight_through(self) -> tuple[int, int, int]:
        """(read wrong and run straight through, run straight through, read wrong): the number
        that matters is the first over the second, what nobody looked at and was wrong."""
        through = [r for r in self.readings if r.straight_through]
        wrong = sum(not r.right for r in self.readings)
        return sum(not r.right for r in through), len(through), wrong

    @property
    def reliability(self) -> list[dict[str, Any]]:
        """How often readings in each confidence band were right: a classifier is honest when
        each band's accuracy is at least its confidence."""
        bands = []
        for low, high in BANDS:
            inside = [
                r
                for r in self.readings
                if r.confidence is not None
                and low <= r.confidence < high + (1e-9 if high == 1.0 else 0)
            ]
            right = sum(r.right for r in inside)
            bands.append(
                {
                    "band": f"{low:.1f}-{high:.1f}",
                    "readings": len(inside),
                    "right": right,
                    "accuracy": round(right / len(inside), 4) if inside else None,
                }
            )
        return bands

    def per_type(self) -> list[dict[str, Any]]:
        """Each labelled request type in the catalogue's words: its messages, how many were
        read as it, what the others were read as, and how many policy sent to people."""
        table = []
        for name in self.labelled_categories:
            rows = self.labelled(name)
            read_as = Counter(self.said(r.category or "(none)") for r in rows if r.category != name)
            table.append(
                {
                    "type": name,
                    "label": self.said(name),
                    "messages": len(rows),
                    "right": sum(r.category == name for r in rows),
                    "read_as": dict(read_as.most_common()),
                    "to_people": sum(r.to_people for r in rows),
                }
            )
        return table

    def as_json(self) -> dict[str, Any]:
        caught, labelled = self.problems_caught
        wrong_through, through, wrong = self.wrong_straight_through
        return {
            "classifier": self.classifier,
            "classifier_version": self.classifier_version,
            "policy_version": self.policy_version,
            "messages": len(self.readings),
            "left_out": dict(self.left_out),
            "unanswered": dict(self.unanswered),
            "category_accuracy": round(self._share(self.category_correct), 4),
            "effect_accuracy": round(self._share(self.effect_correct), 4),
            "routed_to_people": round(self._share(self.to_people), 4),
            "destinations": dict(self.destinations),
            "extraction_problems_caught": [caught, labelled],
            "per_category": self.per_category,
            "wrong_among_straight_through": [wrong_through, through],
            "wrong_readings_straight_through": [wrong_through, wrong],
            "reliability": self.reliability,
            "not_learned": self.not_learned,
            "labels": self.labels,
            "category_correct": self.category_correct,
            "to_people": self.to_people,
            "per_type": self.per_type(),
            "readings": [r.__dict__ for r in self.readings],
        }

    def lines(self) -> list[str]:
        n = len(self.readings)
        caught, labelled = self.problems_caught
        left = ", ".join(f"{count} {why}" for why, count in sorted(self.left_out.items()))
        unanswered = ", ".join(f"{count} {why}" for why, count in sorted(self.unanswered.items()))
        out = [
            f"classifier {self.classifier} ({self.classifier_version}) under policy "
            f"{self.policy_version}: {n} messages" + (f" ({left} left out)" if left else ""),
            *([f"no reading at all: {unanswered}"] if unanswered else []),
            f"category accuracy: {self.category_correct}/{n} = "
            f"{self._share(self.category_correct):.1%}",
            f"effect accuracy: {self.effect_correct}/{n} = {self._share(self.effect_correct):.1%}",
            f"routed to people: {self.to_people}/{n} = {self._share(self.to_people):.1%}",
            f"extraction problems caught: {caught}/{labelled}",
            "where runs went: "
            + ", ".join(f"{name} {count}" for name, count in self.destinations.most_common()),
        ]
        wrong_through, through, wrong = self.wrong_straight_through
        out += [
            "recall by category: "
            + ", ".join(
                "{} {}/{}".format(self.said(name), *self.recall(name))
                for name in self.labelled_categories
            ),
            "run straight through by category: "
            + ", ".join(
                "{} {}/{}".format(self.said(name), *self.straight_through(name))
                for name in self.labelled_categories
            ),
            f"read wrong among those run straight through: {wrong_through}/{through}"
            + (f" = {wrong_through / through:.1%}" if through else ""),
            f"wrong readings that ran straight through: {wrong_through}/{wrong}",
            "per category (precision, recall): "
            + ", ".join(
                f"{self.said(name)} {row['precision']:.0%} {row['recall']:.0%}"
                for name, row in self.per_category.items()
            ),
            "reliability (confidence band: right/readings):",
        ]
        for band in self.reliability:
            if band["readings"]:
                out.append(
                    f"  {band['band']}: {band['right']}/{band['readings']} = {band['accuracy']:.0%}"
                )
        for (label, read), count in self.confusions.most_common():
            out.append(f"  labelled {self.said(label)}, read as {self.said(read)}: {count}")
        if self.not_learned:
            out.append(
                "not learned by the model (too few labels), read by the heuristic: "
                + ", ".join(self.said(name) for name in self.not_learned)
            )
        return out


def _labels(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        missing = LABEL_COLUMNS - set(reader.fieldnames or [])
        if missing:
            raise LabelsInvalid(f"{path}: missing columns {', '.join(sorted(missing))}")
        return list(reader)


def classifier_evaluate(
    *, labels: Path, classifier: str = "heuristic", policy: str | None = None
) -> EvaluationReport:
    """Run every labelled message through the pipeline up to its decision, then undo it all."""
    rows = _labels(labels)
    with transaction.atomic(durable=True):
        report = _evaluate(labels, rows, classifier, policy)
        transaction.set_rollback(True)
    return report


def _evaluate(
    labels: Path, rows: list[dict[str, str]], classifier: str, policy: str | None
) -> EvaluationReport:
    policy_ensure_defaults_in_transaction()
    chosen = policy_get(name=policy)
    customers = labels.parent / "customers.csv"
    if customers.exists():
        customers_load_in_transaction(path=customers)
    version, prompt = classifier_versions(classifier)
    channel = IntakeChannel.objects.create(
        name=f"evaluation:{classifier}",
        classifier=classifier,
        classifier_version=version,
        workflow_version="evaluation",
        prompt_version=prompt,
        policy_version=chosen.name,
        max_classifier_attempts=1,
        # Its own mail identity: messages already taken in for real are read again here, not
        # answered as duplicates of (or made to wait for) the production runs.
        shares_mail_identity=False,
    )
    business = chosen.parsed.business
    report = EvaluationReport(
        classifier,
        version,
        chosen.name,
        labels={name: spec.label for name, spec in business.request_types.items()},
        not_learned=_not_learned(classifier, set(business.request_types)),
    )
    for row in rows:
        if row["expected_intake"] != "new":
            report.left_out[row["expected_intake"] or "unlabelled"] += 1
            continue
        raw = (labels.parent / row["file"]).read_bytes()
        result = intake_submit_in_transaction(
            channel=channel, raw=raw, content_type=MAIL_TYPE, source=f"evaluation:{row['file']}"
        )
        if result.run is None or result.run.state == State.FAILED:
            report.left_out["unreadable"] += 1
            continue
        run = _decided(result.run.pk)
        why = _unanswered(run)
        if why is not None:
            report.unanswered[why] += 1
            continue
        reading = run.classification or _last_reading(run)
        report.readings.append(
            Reading(
                file=row["file"],
                label_category=row["category"],
                label_effect=row["effect"],
                label_problem=row.get("extraction_problem", ""),
                category=str(reading.get("category", "")),
                effect=str(reading.get("requested_effect", "")),
                state=run.state,
                outcome=run.outcome,
                failure_field=run.failure_field,
                confidence=_confidence(reading),
            )
        )
    return report


EVALUATE_TASK = "automation.tasks.evaluate_labelled_set"
# Readers that cannot be measured on a set uploaded in the console: `recorded` replays the
# outcomes stored for a channel's own messages, which an uploaded set has none of.
NOT_MEASURABLE = {"recorded"}


def labelled_set_evaluation_start(
    *, set_id: int, classifier: str, user: User
) -> LabelledSetEvaluation:
    """Ask a worker to measure a reader on a stored set. A set holds up to a couple of
    thousand messages, each read through the whole pipeline (a model server's reader takes
    seconds a message), so the measuring is a task and its report is stored."""
    if not user.has_perm(MANAGE_READING):
        raise PermissionDenied("only whoever may change a channel's readers measures them")
    if classifier in NOT_MEASURABLE or not classifier_exists(classifier):
        raise ServiceError(Refusal.NO_SUCH_READER, f"no reader named {classifier} can be measured")
    with transaction.atomic(durable=True):
        labelled_set = LabelledSet.objects.get(pk=set_id)
        if labelled_set.status != LabelledSetStatus.READ:
            raise ServiceError(
                Refusal.STATE_CONFLICT, f"{labelled_set.name} was refused: there is nothing to read"
            )
        evaluation = LabelledSetEvaluation.objects.create(
            labelled_set=labelled_set, classifier=classifier, requested_by=user
        )
        record_audit(
            None,
            AuditAction.LABELLED_SET_EVALUATED,
            actor=user,
            labelled_set=labelled_set.pk,
            evaluation=evaluation.pk,
            classifier=classifier,
        )
        enqueue_after_commit(EVALUATE_TASK, evaluation.pk, priority=Priority.BULK)
    return evaluation


def labelled_set_evaluation_run(*, evaluation_id: int) -> str:
    """Measure the reader on the set and store the report (or why it could not be)."""
    # Claimed by a conditional update: a message delivered twice measures the set once.
    if not LabelledSetEvaluation.claim(evaluation_id):
        return "already taken"
    evaluation = LabelledSetEvaluation.objects.get(pk=evaluation_id)
    try:
        with labelled_set_folder(set_id=evaluation.labelled_set_id) as labels:
            report = classifier_evaluate(labels=labels, classifier=evaluation.classifier)
    except Exception as exc:
        evaluation.fail(error=f"{type(exc).__name__}: {exc}", now=timezone.now())
    else:
        evaluation.succeed(report=report.as_json(), now=timezone.now())
    evaluation.save(update_fields=["status", "error", "report", "finished_at"])
    return str(evaluation.status)


# Why a classifier gave no reading, by the error its last attempt ended with.
UNANSWERED = {
    "ClassifierTimeout": "timed out",
    "ClassifierRefused": "refused by the server",
    "ClassifierUnavailable": "unreachable or unavailable",
}


def _unanswered(run: Run) -> str | None:
    """Why the run's classifier gave no answer it could be judged on, or None if it did."""
    last = run.classifications.order_by("-attempt").first()
    if last is None or last.outcome not in (ClassifierResult.TIMEOUT, ClassifierResult.UNAVAILABLE):
        return None
    stage = run.stages.filter(stage=StageName.CLASSIFY).exclude(error_class="").order_by("-pk")
    error = stage.values_list("error_class", flat=True).first() or ""
    return UNANSWERED.get(error, "unreachable or unavailable")


def _not_learned(classifier: str, types: set[str]) -> list[str]:
    """The catalogue's types the learned model (the active one, or the one named by its
    version) has no category for."""
    if classifier != "learned" and not LEARNED_VERSION.fullmatch(classifier):
        return []
    try:
        model = active_model() if classifier == "learned" else stored_model(classifier)
    except TrainingError:
        return []
    return sorted(types - set(model.categories)) if model is not None else []


def _confidence(reading: dict[str, Any]) -> float | None:
    value = reading.get("confidence")
    return float(value) if isinstance(value, int | float) and 0 <= value <= 1 else None


def _decided(run_id: int) -> Run:
    for _ in range(20):
        run = Run.objects.get(pk=run_id)
        if run.state not in WORKING:
            return run
        if run_advance_in_transaction(run_id=run_id, now=run.next_attempt_at) is None:
            return run
    return Run.objects.get(pk=run_id)


def _last_reading(run: Run) -> dict[str, Any]:
    attempt = run.classifications.order_by("-attempt").first()
    raw = attempt.raw_output if attempt is not None else None
    return raw if isinstance(raw, dict) else {}
