"""Reading from the console: labelled sets uploaded, a reader measured on one per request
type in the business's words, and the learned reader trained on the stored sets and put in
shadow on a channel (promoted from the channel's page, as any shadow is)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.db.models import Count
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from automation.classifiers.labelled import (
    MANAGE_READING,
    LabelledSetRefused,
    labelled_set_remove,
    labelled_set_upload,
)
from automation.classifiers.readers import readers_available
from automation.classifiers.training import MIN_LABELS
from automation.models import (
    ClassifierModel,
    ClassifierTraining,
    IntakeChannel,
    LabelledExample,
    LabelledSet,
    LabelledSetEvaluation,
)
from automation.pipeline.evaluation import labelled_set_evaluation_start
from automation.pipeline.shadow import classifier_training_start
from console.forms.quality import EvaluateForm, LabelledSetUploadForm, TrainForm
from console.refusals import show_refusal
from console.views.staff import VIEW_RUNS
from core.errors import ServiceError
from core.http import AuthenticatedHttpRequest
from policy.selectors import stored_businesses

# Learned models offered to measure, newest first.
MODELS_OFFERED = 10


def _readers() -> list[tuple[str, str]]:
    """The readers a set can be measured with, in words: those a channel may be given here
    (automation.classifiers.readers, the same words), and each trained model by itself."""
    readers = [(reader.name, reader.words) for reader in readers_available()]
    models = ClassifierModel.objects.order_by("-trained_at", "-id")[:MODELS_OFFERED]
    readers += [
        (
            m.version,
            f"Learned model trained on {m.training_size} messages on "
            f"{m.trained_at:%Y-%m-%d %H:%M} ({m.version})",
        )
        for m in models
    ]
    return readers


def _channels() -> list[tuple[str, str]]:
    return [
        (str(pk), name)
        for pk, name in IntakeChannel.objects.order_by("name").values_list("pk", "name")
    ]


def _sets_page(
    request: AuthenticatedHttpRequest, form: LabelledSetUploadForm, status: int = 200
) -> HttpResponse:
    sets = LabelledSet.objects.select_related("uploaded_by").annotate(rows=Count("examples"))
    context = {
        "sets": sets,
        "form": form,
        "train_form": TrainForm(channels=_channels()),
        "models": ClassifierModel.objects.order_by("-trained_at", "-id")[:MODELS_OFFERED],
        "trainings": ClassifierTraining.objects.select_related("channel")[:5],
        "may_manage": request.user.has_perm(MANAGE_READING),
    }
    return render(request, "quality/reading.html", context, status=status)


@require_GET
@login_required
@permission_required(VIEW_RUNS, raise_exception=True)
def labelled_sets(request: AuthenticatedHttpRequest) -> HttpResponse:
    """The stored sets, the upload form, the trained models and the train button."""
    return _sets_page(request, LabelledSetUploadForm())


@require_POST
@login_required
@permission_required(MANAGE_READING, raise_exception=True)
def upload(request: AuthenticatedHttpRequest) -> HttpResponse:
    form = LabelledSetUploadForm(request.POST, request.FILES)
    if not form.is_valid():
        return _sets_page(request, form, status=400)
    sent = form.cleaned_data["upload"]
    try:
        stored = labelled_set_upload(
            name=form.cleaned_data["name"], filename=sent.name, raw=sent.read(), user=request.user
        )
    except LabelledSetRefused as refused:
        for problem in refused.problems:
            form.add_error(refused.field, problem)
        return _sets_page(request, form, status=400)
    said = stored_businesses().active
    others = ", ".join(
        f"{said.request_types[n].label if n in said.request_types else n} ({count})"
        for n, count in stored.not_a_type.items()
    )
    messages.success(
        request,
        f"{stored.labelled_set.name}: {stored.examples} rows stored."
        + (
            f" Not request types of the active version, left out of training: {others}."
            if others
            else ""
        ),
    )
    return redirect("quality:reading_set", set_id=stored.labelled_set.pk)


@require_GET
@login_required
@permission_required(VIEW_RUNS, raise_exception=True)
def labelled_set(request: AuthenticatedHttpRequest, set_id: int) -> HttpResponse:
    """One set: its rows per request type, in words, and the readers measured on it."""
    stored = get_object_or_404(LabelledSet.objects.select_related("uploaded_by"), pk=set_id)
    business = stored_businesses().active
    counts = Counter(
        LabelledExample.objects.filter(labelled_set=stored, expected_intake="new").values_list(
            "category", flat=True
        )
    )
    types = [
        {
            "name": name,
            "label": business.request_types[name].label if name in business.request_types else name,
            "known": name in business.request_types,
            "count": count,
        }
        for name, count in sorted(counts.items())
    ]
    context = {
        "set": stored,
        "types": types,
        "form": EvaluateForm(readers=_readers()),
        "evaluations": stored.evaluations.select_related("requested_by")[:20],
        "may_manage": request.user.has_perm(MANAGE_READING),
    }
    return render(request, "quality/reading_set.html", context)


@require_POST
@login_required
@permission_required(MANAGE_READING, raise_exception=True)
def remove(request: AuthenticatedHttpRequest, set_id: int) -> HttpResponse:
    try:
        name = labelled_set_remove(set_id=set_id, user=request.user)
    except LabelledSet.DoesNotExist as exc:
        raise Http404("no such set") from exc
    messages.success(request, f"{name} removed, with its messages and measurements.")
    return redirect("quality:reading")


@require_POST
@login_required
@permission_required(MANAGE_READING, raise_exception=True)
def evaluate(request: AuthenticatedHttpRequest, set_id: int) -> HttpResponse:
    form = EvaluateForm(request.POST, readers=_readers())
    if not form.is_valid():
        messages.error(request, "Choose a reader from the list.")
        return redirect("quality:reading_set", set_id=set_id)
    try:
        evaluation = labelled_set_evaluation_start(
            set_id=set_id, classifier=form.cleaned_data["classifier"], user=request.user
        )
    except LabelledSet.DoesNotExist as exc:
        raise Http404("no such set") from exc
    except ServiceError as error:
        show_refusal(request, error)
        return redirect("quality:reading_set", set_id=set_id)
    return redirect("quality:reading_evaluation", evaluation_id=evaluation.pk)


def _percent(part: int, whole: int) -> int:
    return round(100 * part / whole) if whole else 0


@require_GET
@login_required
@permission_required(VIEW_RUNS, raise_exception=True)
def evaluation(request: AuthenticatedHttpRequest, evaluation_id: int) -> HttpResponse:
    """A reader's measurement on a set: waiting, failed, or per request type in words."""
    found = get_object_or_404(
        LabelledSetEvaluation.objects.select_related("labelled_set", "requested_by"),
        pk=evaluation_id,
    )
    report = found.report or {}
    messages_read = int(report.get("messages", 0))
    context = {
        "evaluation": found,
        "report": report,
        "reader": dict(_readers()).get(found.classifier, found.classifier),
        "left_out": sorted((report.get("left_out") or {}).items()),
        "unanswered": sorted((report.get("unanswered") or {}).items()),
        "share_right": _percent(report.get("category_correct", 0), messages_read),
        "share_people": _percent(report.get("to_people", 0), messages_read),
    }
    return render(request, "quality/reading_evaluation.html", context)


def _training_words(result: dict[str, Any]) -> list[str]:
    """What a training learned, in the business's words."""
    said = stored_businesses().active.request_types

    def label(name: str) -> str:
        return said[name].label if name in said else name

    held = sum(f["of"] for f in result.get("held_out", {}).values())
    right = sum(f["right"] for f in result.get("held_out", {}).values())
    lines = [
        f"Trained on {result.get('trained_on', 0)} messages; it reads "
        + ", ".join(label(n) for n in result.get("categories", []))
        + f". Of {held} messages held back to check it, {right} were read right."
    ]
    lines += [
        f"{label(name)}: {count} to train on, too few to learn (it takes {MIN_LABELS}); "
        "the rules reader reads it."
        for name, count in result.get("too_few", {}).items()
    ]
    if result.get("not_a_type"):
        lines.append(
            "Left out, not request types of the active version: "
            + ", ".join(f"{name} ({count})" for name, count in result["not_a_type"].items())
            + "."
        )
    return lines


@require_POST
@login_required
@permission_required(MANAGE_READING, raise_exception=True)
def train(request: AuthenticatedHttpRequest) -> HttpResponse:
    form = TrainForm(request.POST, channels=_channels())
    if not form.is_valid():
        messages.error(request, "Choose the channel the new reader reads in shadow.")
        return redirect("quality:reading")
    try:
        training = classifier_training_start(
            channel_id=int(form.cleaned_data["channel"]),
            people=form.cleaned_data["people"],
            user=request.user,
        )
    except IntakeChannel.DoesNotExist as exc:
        raise Http404("no such channel") from exc
    return redirect("quality:reading_training", training_id=training.pk)


@require_GET
@login_required
@permission_required(VIEW_RUNS, raise_exception=True)
def training(request: AuthenticatedHttpRequest, training_id: int) -> HttpResponse:
    """A training asked for: waiting, failed, or what it learned and where it reads."""
    found = get_object_or_404(
        ClassifierTraining.objects.select_related("channel", "requested_by"), pk=training_id
    )
    context = {"training": found, "lines": _training_words(found.result) if found.result else []}
    return render(request, "quality/reading_training.html", context)
