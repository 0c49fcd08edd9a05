"""QA review pages: the samples waiting for a reviewer's groups, one sample's review (confirm
or correct the reading), and the reconcile queue of ops leads."""

from __future__ import annotations

from datetime import timedelta

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from automation.classifiers.quality import qa_confirm, qa_correct, qa_reconcile
from automation.models import ClassifierPromotion, IntakeChannel, QAReview, QAStatus
from automation.pipeline.shadow import (
    CHANGE_CHANNEL,
    classifier_promote,
    classifier_rollback,
    shadow_compare,
)
from console.forms.ops import form_problems
from console.forms.quality import QACorrectionForm, ReconcileForm
from console.refusals import show_refusal
from console.views.staff import VIEW_RUNS
from console.vocabulary import Kind, label
from core.codes import Refusal
from core.errors import ServiceError
from core.http import AuthenticatedHttpRequest
from core.keyset import BadCursor, Page, keyset_page, page_link, parse_cursor
from policy.selectors import stored_businesses

PAGE_SIZE = 50
WORK_QUEUE = "automation.work_queue"


def _groups(request: AuthenticatedHttpRequest) -> list[str]:
    return list(request.user.groups.values_list("name", flat=True))


def _page(
    request: AuthenticatedHttpRequest, rows: QuerySet[QAReview], time_field: str
) -> Page[QAReview]:
    try:
        after = parse_cursor(request.GET["after"]) if "after" in request.GET else None
        before = parse_cursor(request.GET["before"]) if "before" in request.GET else None
    except BadCursor:
        after = before = None
    return keyset_page(rows, time_field=time_field, size=PAGE_SIZE, after=after, before=before)


@require_GET
@login_required
def qa_queue(request: AuthenticatedHttpRequest) -> HttpResponse:
    """The samples waiting for the reviewer's groups, oldest first."""
    rows = QAReview.objects.filter(status=QAStatus.OPEN).select_related("run")
    if not request.user.is_superuser:
        rows = rows.filter(group__in=_groups(request))
    page = _page(request, rows, "created_at")
    context = {
        "reviews": page.items,
        "next_link": page_link(request.GET, "after", page.next),
        "previous_link": page_link(request.GET, "before", page.previous),
        "may_reconcile": request.user.has_perm(WORK_QUEUE),
    }
    return render(request, "quality/queue.html", context)


def _review_for(request: AuthenticatedHttpRequest, review_id: int) -> QAReview:
    review = get_object_or_404(
        QAReview.objects.select_related("run", "reviewer", "reconciled_by"), pk=review_id
    )
    user = request.user
    if not (user.is_superuser or review.group in _groups(request) or user.has_perm(WORK_QUEUE)):
        raise Http404("no such sample")  # another group's sample is none of their business
    return review


@require_http_methods(["GET", "POST"])
@login_required
def qa_review(request: AuthenticatedHttpRequest, review_id: int) -> HttpResponse:
    """One sample: the request, the reading, and the reviewer's verdict on it."""
    review = _review_for(request, review_id)
    form = QACorrectionForm(
        request.POST if request.POST.get("verdict") == "correct" else None,
        initial={"category": review.reading["category"], "effect": review.reading["effect"]},
        # The request types and effects of the version that read it.
        business=stored_businesses().of_version(review.policy_version or None),
    )
    if request.method == "POST":
        try:
            if request.POST.get("verdict") == "confirm":
                qa_confirm(review_id=review.pk, user=request.user)
                messages.success(request, "Confirmed: the reading was right.")
                return redirect("quality:queue")
            if form.is_valid():
                qa_correct(
                    review_id=review.pk,
                    user=request.user,
                    category=form.cleaned_data["category"],
                    effect=form.cleaned_data["effect"],
                    note=form.cleaned_data["note"],
                )
                messages.success(
                    request, "Corrected. The effect is not run again: an ops lead reconciles it."
                )
                return redirect("quality:queue")
        except PermissionDenied:
            raise
        except ServiceError as error:
            _refuse_review(request, error, review.pk)
            return redirect("quality:review", review_id=review.pk)
    context = {
        "review": review,
        "run": review.run,
        "form": form,
        "may_review": review.status == QAStatus.OPEN
        and (request.user.is_superuser or review.group in _groups(request)),
    }
    return render(request, "quality/review.html", context, status=400 if form.errors else 200)


def _refuse_review(request: AuthenticatedHttpRequest, error: ServiceError, review_id: int) -> None:
    """The service says "already <status code>"; a person reads the status in words."""
    if error.code != Refusal.STATE_CONFLICT:
        show_refusal(request, error)
        return
    status = QAReview.objects.values_list("status", flat=True).get(pk=review_id)
    said = label(Kind.QA_STATUS, status).lower()
    messages.error(request, f"Someone already reviewed this sample ({said}): nothing was changed.")


@require_GET
@login_required
@permission_required(WORK_QUEUE, raise_exception=True)
def reconcile_queue(request: AuthenticatedHttpRequest) -> HttpResponse:
    """Samples whose reading was wrong after their effect had happened: what was done?"""
    rows = QAReview.objects.filter(
        status=QAStatus.CORRECTED, reconciled_at__isnull=True
    ).select_related("run", "reviewer")
    page = _page(request, rows, "reviewed_at")
    context = {
        "reviews": page.items,
        "form": ReconcileForm(),
        "next_link": page_link(request.GET, "after", page.next),
        "previous_link": page_link(request.GET, "before", page.previous),
    }
    return render(request, "quality/reconcile.html", context)


@require_POST
@login_required
@permission_required(WORK_QUEUE, raise_exception=True)
def reconcile(request: AuthenticatedHttpRequest, review_id: int) -> HttpResponse:
    form = ReconcileForm(request.POST)
    if not form.is_valid():
        messages.error(
            request,
            form_problems(form)
            if request.POST.get("note", "").strip()
            else "Say what was done: it goes on the run's record.",
        )
        return redirect("quality:reconcile_queue")
    try:
        qa_reconcile(review_id=review_id, user=request.user, note=form.cleaned_data["note"])
    except QAReview.DoesNotExist as exc:
        raise Http404("no such sample") from exc
    except ServiceError as error:
        show_refusal(request, error)
    else:
        messages.success(request, f"Sample #{review_id} reconciled.")
    return redirect("quality:reconcile_queue")


# --- shadow comparison and promotion ------------------------------------------------------

PERIODS = {"7d": 7, "30d": 30, "90d": 90}


@require_GET
@login_required
@permission_required(VIEW_RUNS, raise_exception=True)
def channel_classifiers(request: AuthenticatedHttpRequest, name: str) -> HttpResponse:
    """A channel's live classifier, the ones reading in its shadow, and its promotions."""
    channel = get_object_or_404(IntakeChannel, name=name)
    context = {
        "channel": channel,
        "promotions": ClassifierPromotion.objects.filter(channel=channel)
        .select_related("promoted_by", "rolled_back_by")
        .order_by("-promoted_at")[:20],
    }
    return render(request, "quality/channel.html", context)


@require_GET
@login_required
@permission_required(VIEW_RUNS, raise_exception=True)
def shadow_comparison(
    request: AuthenticatedHttpRequest, name: str, classifier: str
) -> HttpResponse:
    """Live and shadow readings side by side over a period, and the promote button."""
    channel = get_object_or_404(IntakeChannel, name=name)
    period = request.GET.get("period", "30d")
    days = PERIODS.get(period, 30)
    until = timezone.now()
    comparison = shadow_compare(
        channel=channel, classifier=classifier, since=until - timedelta(days=days), until=until
    )
    context = {
        "channel": channel,
        "classifier": classifier,
        "comparison": comparison,
        "period": period if period in PERIODS else "30d",
        "periods": list(PERIODS.items()),
        "is_shadow": classifier in (channel.shadow_classifiers or []),
        "may_promote": request.user.has_perm(CHANGE_CHANNEL),
        "verdicts": sorted(comparison.verdicts.items()),
        # A Counter in a template: `.items` would look up the key "items" (and count 0).
        "failures": sorted(comparison.shadow_failures.items()),
    }
    return render(request, "quality/comparison.html", context)


@require_POST
@login_required
def promote(request: AuthenticatedHttpRequest, name: str, classifier: str) -> HttpResponse:
    channel = get_object_or_404(IntakeChannel, name=name)
    period = request.POST.get("period", "30d")
    until = timezone.now()
    comparison = shadow_compare(
        channel=channel,
        classifier=classifier,
        since=until - timedelta(days=PERIODS.get(period, 30)),
        until=until,
    )
    try:
        classifier_promote(
            channel_id=channel.pk,
            classifier=classifier,
            user=request.user,
            evidence=comparison.evidence(),
        )
    except ServiceError as error:
        if error.code == Refusal.CONFIGURED_CLASSIFIER:  # its message names the setting, a code
            messages.error(
                request,
                f"The server's settings choose {channel.name}'s classifier, so it cannot be "
                "promoted here: an administrator changes it in the settings.",
            )
        else:
            show_refusal(request, error)
        return redirect("quality:comparison", name=name, classifier=classifier)
    messages.success(request, f"{channel.name} now reads with {classifier}.")
    return redirect("quality:channel", name=name)


@require_POST
@login_required
def rollback(request: AuthenticatedHttpRequest, promotion_id: int) -> HttpResponse:
    promotion = get_object_or_404(
        ClassifierPromotion.objects.select_related("channel"), pk=promotion_id
    )
    try:
        classifier_rollback(promotion_id=promotion.pk, user=request.user)
    except ServiceError as error:
        show_refusal(request, error)
    else:
        messages.success(
            request, f"{promotion.channel.name} reads with {promotion.from_classifier} again."
        )
    return redirect("quality:channel", name=promotion.channel.name)
