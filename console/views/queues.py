"""The queues section (`queues:*`, under /ops/): the queues and the effects' pause and
resume switches, one queue's held runs with its filters, and the recovery batches started
from a queue, previewed before they run."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html_join
from django.utils.timesince import timesince
from django.views.decorators.http import require_GET, require_POST

from automation.classifiers.servers import server_views
from automation.conf import setting
from automation.effects.selectors import effect_controls
from automation.effects.services import effect_pause, effect_resume
from automation.intake.selectors import mailbox_views
from automation.models import QUEUE_NAMES, BatchStatus, EffectControl, RecoveryBatch, Run
from automation.recovery.selectors import (
    QUEUE_PAGE_SIZE,
    QueueFilters,
    queue_due_at,
    queue_items,
    queue_summaries,
)
from automation.recovery.services import batch_preview
from automation.recovery.services import batch_start as start_batch
from console.forms.ops import BatchForm, EffectResumeForm, QueueFilterForm, form_problems
from console.previews import doable, preview_sentence, preview_summary
from console.refusals import show_refusal
from console.templatetags.lists import hold_reason, one_line, sla
from console.views.staff import VIEW_RUNS, assignees
from console.vocabulary import Kind, label
from core.errors import ServiceError
from core.http import AuthenticatedHttpRequest
from core.keyset import OLDEST, page_link
from policy.models import PolicyVersion


def _queue_owners() -> dict[str, str]:
    active = PolicyVersion.objects.filter(is_active=True).first()
    return dict(active.parsed.queue_owners) if active else {}


@require_GET
@login_required
@permission_required(VIEW_RUNS, raise_exception=True)
def queues(request: AuthenticatedHttpRequest) -> HttpResponse:
    now = timezone.now()
    context = {
        "queues": queue_summaries(owners=_queue_owners()),
        "effects": effect_controls(),
        "servers": server_views(now=now),
        "mailboxes": mailbox_views(now=now),
        "now": now,
    }
    return render(request, "queues/list.html", context)


def _fits(model: Any, field: str, value: str) -> bool:
    """Whether a name from the address fits the column it is stored in: a longer one names
    nothing that exists, and must not reach the database."""
    return len(value) <= model._meta.get_field(field).max_length


@require_POST
@login_required
@permission_required("automation.change_effectcontrol", raise_exception=True)
def effect_control(request: AuthenticatedHttpRequest, name: str, action: str) -> HttpResponse:
    if action not in {"pause", "resume"} or not _fits(EffectControl, "name", name):
        raise Http404("no such effect control")
    try:
        if action == "pause":
            _pause(request, name)
        else:
            _resume_effect(request, name)
    except ServiceError as exc:  # it would have changed nothing: nothing was written
        show_refusal(request, exc)
    return redirect("queues:list")


def _pause(request: AuthenticatedHttpRequest, name: str) -> None:
    effect_pause(name=name, user=request.user)
    messages.success(request, f"{name} paused: deliveries wait without using attempts.")


def _resume_effect(request: AuthenticatedHttpRequest, name: str) -> None:
    form = EffectResumeForm(request.POST)
    if not form.is_valid():
        messages.error(request, f"{name} not resumed: {form_problems(form)}")
        return
    per_minute = form.cleaned_data["rate"]
    effect_resume(name=name, user=request.user, rate_per_minute=per_minute)
    messages.success(request, f"{name} resumed" + (f" at {per_minute}/min." if per_minute else "."))


def _filters(form: QueueFilterForm) -> QueueFilters:
    """The usable filters; the form's errors say which were left out."""
    form.is_valid()
    return QueueFilters(
        route=form.value("route") or "",
        owner=form.value("owner") or "",
        older_than_hours=form.value("older_than_hours"),
        since=form.value("since"),
        until=form.value("until"),
        search=form.value("q") or "",
        after=form.value("after"),
        before=form.value("before"),
        order=form.value("order") or OLDEST,
    )


@dataclass(frozen=True)
class QueueLine:
    """A held run's row with its cells in words, worked out once here rather than by a
    filter or a tag per cell in the template (fifty rows a page)."""

    run: Run
    number: str  # the run's number as text: an int is localized each time it is written
    url: str
    sender: str
    route: str
    held: str
    queued: str
    overdue: bool
    sla: str
    reason: str
    reason_line: str


def _queue_line(run: Run, now: datetime) -> QueueLine:
    due = queue_due_at(run)
    reason = hold_reason(run)
    names = (run.list_customer, run.list_sender_name, run.list_sender)  # type: ignore[attr-defined]
    return QueueLine(
        run=run,
        number=str(run.pk),
        url=reverse("runs:run", args=[run.pk]),
        sender=next((str(n) for n in names if n), "—"),
        route=label(Kind.ROUTE, run.route) if run.route else "—",
        held=timesince(run.queued_at, now) if run.queued_at else "",
        queued=timezone.localtime(run.queued_at).isoformat() if run.queued_at else "",
        overdue=due is not None and due <= now,
        sla=sla(due, now),
        reason=reason,
        reason_line=one_line(reason),
    )


@require_GET
@login_required
@permission_required(VIEW_RUNS, raise_exception=True)
def queue(request: AuthenticatedHttpRequest, name: str) -> HttpResponse:
    if name not in QUEUE_NAMES:
        raise Http404("no such queue")
    now = timezone.now()
    filter_form = QueueFilterForm(request.GET)
    filters = _filters(filter_form)
    page = queue_items(queue=name, filters=filters, now=now)
    items = page.items
    oldest = items[0].queued_at if items and items[0].queued_at else now
    # The window ends a minute ahead so what was held in the current second is inside it.
    until = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
    batch_form = BatchForm(initial={"since": oldest, "until": until, "action": "retry"})
    context = {
        "name": name,
        "items": [_queue_line(run, now) for run in items],
        "next_link": page_link(request.GET, "after", page.next),
        "previous_link": page_link(request.GET, "before", page.previous),
        "filters": filters,
        "filter_form": filter_form,
        "now": now,
        "batch_form": batch_form,
        # Every row offers the same people: their options are written once.
        "people_options": format_html_join(
            "", '<option value="{}">{}</option>', ((p.username, p.username) for p in assignees())
        ),
        "page_size": QUEUE_PAGE_SIZE,
        # Asked once for the page, not once per row.
        "may_work": request.user.has_perm("automation.work_queue"),
        "here": request.get_full_path(),
    }
    status = 400 if filter_form.errors else 200
    return render(request, "queues/queue.html", context, status=status)


@require_POST
@login_required
@permission_required("automation.recover_run", raise_exception=True)
def batch_new(request: AuthenticatedHttpRequest, queue_name: str) -> HttpResponse:
    if queue_name not in QUEUE_NAMES:
        raise Http404("no such queue")
    form = BatchForm(request.POST)
    if not form.is_valid():
        messages.error(
            request,
            f"A batch needs an action, a time window and a reason. {form_problems(form)}",
        )
        return redirect("queues:queue", name=queue_name)
    data = form.cleaned_data
    batch = batch_preview(
        action=data["action"],
        queue=queue_name,
        since=data["since"],
        until=data["until"],
        user=request.user,
        reason=data["reason"],
    )
    return redirect("queues:batch", batch_id=batch.pk)


BATCH_ROWS_SHOWN = 200


@require_GET
@login_required
@permission_required(VIEW_RUNS, raise_exception=True)
def batch(request: AuthenticatedHttpRequest, batch_id: int) -> HttpResponse:
    item = get_object_or_404(
        RecoveryBatch.objects.select_related("created_by", "started_by"), pk=batch_id
    )
    percent = 100 * item.done // item.total if item.total else 100
    now = timezone.now()
    age = (now - item.previewed_at).total_seconds() if item.previewed_at else None
    context: dict[str, Any] = {
        "batch": item,
        "percent": percent,
        "summary": preview_summary(item.preview),
        "doable": doable(item.preview),
        "left": item.total - doable(item.preview) if item.status == BatchStatus.PREVIEW else 0,
        "rows": item.preview[:BATCH_ROWS_SHOWN],
        "more": max(0, len(item.preview) - BATCH_ROWS_SHOWN),
        "fresh_for": max(0, int(setting("PREVIEW_FRESH_SECONDS") - age)) if age is not None else 0,
    }
    shown = [r["run"] for r in context["rows"]]
    now_in = dict(Run.objects.filter(pk__in=shown).values_list("pk", "state"))
    done = {
        a.run_id: f"{label('recovery', a.action)}; "
        f"the run is now {label('state', now_in.get(a.run_id))}"
        for a in item.recoveryaction_set.filter(run_id__in=shown)
    }
    failed = {f["run"]: _sentence(f["reason"]) for f in item.failures}
    context["rows"] = [
        {
            **row,
            "sentence": preview_sentence(row),
            # An item that could not be done says why, not what it was asked to do.
            "done": "" if row["run"] in failed else done.get(row["run"], ""),
            "failed": failed.get(row["run"], ""),
        }
        for row in context["rows"]
    ]
    return render(request, "queues/batch.html", context)


def _sentence(reason: str) -> str:
    """A batch item's refusal as a sentence: "Not done: …"."""
    return f"Not done: {reason.rstrip('.')}." if reason else ""


@require_POST
@login_required
@permission_required("automation.recover_run", raise_exception=True)
def batch_start(request: AuthenticatedHttpRequest, batch_id: int) -> HttpResponse:
    get_object_or_404(RecoveryBatch, pk=batch_id)
    try:
        start_batch(batch_id=batch_id, user=request.user)
    except ServiceError as exc:
        show_refusal(request, exc, prefix="Not started: ")
    else:
        messages.success(request, "Started: the batch works through its runs in the background.")
    return redirect("queues:batch", batch_id=batch_id)
