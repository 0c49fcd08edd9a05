"""The signed-in person's own pages (`me:*`, under /me/): their work, what they decided, and
how they hear of work."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.db.models import Q
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from approvals import selectors as approval_selectors
from approvals.models import Delegation
from approvals.services import delegation_end, delegation_give
from automation.classifiers.quality import samples_for
from automation.recovery.selectors import claimed_runs, team_queue_items
from automation.runs.comments import user_routes
from console.context_processors import unread_changed
from console.forms.approvals import DelegationForm
from console.refusals import refusal_text, show_refusal
from core.errors import ServiceError
from core.http import AuthenticatedHttpRequest
from core.inputs import parse_number
from core.keyset import (
    NEWEST,
    BadCursor,
    Cursor,
    keyset_page,
    order_link,
    order_of,
    page_link,
    parse_cursor,
)
from notifications.models import Kind, Mode, Notification
from notifications.preferences import preferences_of, preferences_set
from notifications.services import my_notifications, notifications_mark_read


@require_http_methods(["GET", "POST"])
@login_required
def notification_settings(request: AuthenticatedHttpRequest) -> HttpResponse:
    if request.method == "POST":
        chosen = {kind: request.POST.get(kind, "") for kind in Kind.values}
        problems = [kind for kind, mode in chosen.items() if mode not in Mode.values]
        if problems:
            messages.error(request, "Choose at once, in the daily digest, or never for each.")
        else:
            preferences_set(user=request.user, modes={k: Mode(m) for k, m in chosen.items()})
            messages.success(request, "Saved: you will hear of work as chosen.")
            return redirect("me:notifications")
    context = {
        "rows": [(kind, label, mode) for kind, label, mode in preferences_of(request.user)],
        "modes": Mode.choices,
        "email": request.user.email,
    }
    return render(request, "me/notifications.html", context)


NOTIFICATION_PAGE = 50


@require_GET
@login_required
def notification_list(request: AuthenticatedHttpRequest) -> HttpResponse:
    """What the person was told of, newest first (or only the unread), fifty a page, each
    with a link to what it is about."""
    query = request.GET
    unread_only = query.get("show") == "unread"
    page = keyset_page(
        my_notifications(request.user, unread_only=unread_only),
        time_field="created_at",
        size=NOTIFICATION_PAGE,
        after=_cursor(query.get("after")),
        before=_cursor(query.get("before")),
        descending=True,
    )
    context = {
        "rows": [(n, _about(n)) for n in page.items],
        "unread_only": unread_only,
        "next_link": page_link(query, "after", page.next),
        "previous_link": page_link(query, "before", page.previous),
    }
    return render(request, "me/notification_list.html", context)


def _about(notification: Notification) -> tuple[str, str]:
    """What a notification is about, as a link: (address, words)."""
    if notification.task_id is not None:
        return reverse("tasks:task", args=[notification.task_id]), f"Task {notification.task_id}"
    if notification.approval_id is not None:
        return (
            reverse("approvals:evidence", args=[notification.approval_id]),
            f"Request {notification.approval_id} of run {notification.run_id}",
        )
    if notification.run_id is not None:
        return reverse("runs:run", args=[notification.run_id]), f"Run {notification.run_id}"
    if notification.kind == Kind.DELEGATED:
        return reverse("me:delegation"), "While someone is away"
    return "", ""


@require_POST
@login_required
def notification_read(request: AuthenticatedHttpRequest) -> HttpResponse:
    """Mark one notification read (`notification`) or all of them (`all`); back to the list."""
    one = parse_number(request.POST.get("notification"))
    if one is None and request.POST.get("all") != "1":
        messages.error(request, "Nothing marked: choose a notification, or mark them all read.")
        return redirect("me:notification_list")
    marked = notifications_mark_read(user=request.user, notification_id=one, now=timezone.now())
    unread_changed(request.user.pk)
    if one is not None and not marked:
        messages.info(request, "That notification was read already.")
    else:
        messages.success(
            request, f"Marked read: {marked} notification{'' if marked == 1 else 's'}."
        )
    target = reverse("me:notification_list")
    return redirect(target + ("?show=unread" if request.POST.get("show") == "unread" else ""))


@require_GET
@login_required
def team_queue(request: AuthenticatedHttpRequest) -> HttpResponse:
    """The held runs of the routes the person's teams own in the active business, whatever
    their queue: read-only here; the run page offers what their role may do."""
    query = request.GET
    routes = user_routes(request.user)
    order = order_of(query)
    page = team_queue_items(
        routes=routes,
        after=_cursor(query.get("after")),
        before=_cursor(query.get("before")),
        order=order,
    )
    now = timezone.now()
    context = {
        "routes": routes,
        "runs": [(r, now - (r.queued_at or now)) for r in page.items] if routes else [],
        "order": order,
        "other_order": order_link(query, "oldest" if order == NEWEST else NEWEST),
        "next_link": page_link(query, "after", page.next) if routes else "",
        "previous_link": page_link(query, "before", page.previous) if routes else "",
    }
    return render(request, "me/team_queue.html", context)


WORK_PAGE = 25


@require_GET
@login_required
def my_work(request: AuthenticatedHttpRequest) -> HttpResponse:
    """Everything waiting for this person, oldest first in each list: the approvals given to
    them or waiting for their groups, the held runs they claimed, the QA samples for them."""
    user, now, query = request.user, timezone.now(), request.GET
    approvals = keyset_page(
        approval_selectors.my_approvals(user).select_related("run", "assignee"),
        time_field="created_at",
        size=WORK_PAGE,
        after=_cursor(query.get("approvals")),
    )
    runs = keyset_page(
        claimed_runs(user),
        time_field="queued_at",
        size=WORK_PAGE,
        after=_cursor(query.get("runs")),
    )
    samples = keyset_page(
        samples_for(user),
        time_field="created_at",
        size=WORK_PAGE,
        after=_cursor(query.get("samples")),
    )
    context = {
        "approvals": [
            (
                a,
                now - a.created_at,
                approval_selectors.sla_of(a.escalate_at, now, escalated=a.escalated_at is not None),
                approval_selectors.sla_when(a.escalate_at, now),
            )
            for a in approvals.items
        ],
        "approvals_next": page_link(query, "approvals", approvals.next),
        "runs": [(r, now - (r.queued_at or now)) for r in runs.items],
        "runs_next": page_link(query, "runs", runs.next),
        "samples": [(s, now - s.created_at) for s in samples.items],
        "samples_next": page_link(query, "samples", samples.next),
    }
    return render(request, "me/work.html", context)


@require_GET
@login_required
def decided_by_me(request: AuthenticatedHttpRequest) -> HttpResponse:
    """This person's decisions, newest first: what they saw (the binding) and what came of it."""
    page = keyset_page(
        approval_selectors.my_decisions(request.user),
        time_field="created_at",
        size=WORK_PAGE,
        after=_cursor(request.GET.get("after")),
        descending=True,
    )
    context = {"decisions": page.items, "next": page_link(request.GET, "after", page.next)}
    return render(request, "me/decided.html", context)


def _cursor(text: str | None) -> Cursor | None:
    """A page position from the address; a bad one shows the first page."""
    if not text:
        return None
    try:
        return parse_cursor(text)
    except BadCursor:
        return None


@require_http_methods(["GET", "POST"])
@login_required
def delegation(request: AuthenticatedHttpRequest) -> HttpResponse:
    """Out of office: let someone decide my approvals for a window; see and end delegations."""
    user, form = request.user, DelegationForm()
    if request.method == "POST" and "end" in request.POST:
        return _end_delegation(request, parse_number(request.POST.get("end")))
    if request.method == "POST":
        form = DelegationForm(request.POST)
        if form.is_valid() and _give_delegation(request, form):
            return redirect("me:delegation")
    now = timezone.now()
    mine = approval_selectors.delegations().filter(Q(delegator=user) | Q(delegate=user))
    mine = mine.select_related("delegator", "delegate")
    context = {
        "form": form,
        "given": [d for d in mine[:100] if d.delegator_id == user.pk],
        "received": [d for d in mine[:100] if d.delegate_id == user.pk],
        "people": approval_selectors.delegates_for(user),
        "now": now,
        "start": timezone.localtime(now).strftime("%Y-%m-%dT%H:%M"),
    }
    return render(request, "me/delegation.html", context)


def _end_delegation(request: AuthenticatedHttpRequest, delegation_id: int | None) -> HttpResponse:
    if delegation_id is None:
        raise Http404("no such delegation")
    try:
        delegation_end(delegation_id=delegation_id, by=request.user, now=timezone.now())
    except Delegation.DoesNotExist as exc:
        raise Http404("no such delegation") from exc
    except ServiceError as exc:
        show_refusal(request, exc)
    else:
        messages.success(request, "Ended: it no longer lets anyone decide for you.")
    return redirect("me:delegation")


def _give_delegation(request: AuthenticatedHttpRequest, form: DelegationForm) -> bool:
    """Give the delegation the valid form describes; False (the form says why) when the
    person chosen does not exist or the service refuses."""
    data = form.cleaned_data
    delegate = User.objects.filter(pk=data["delegate"]).first()
    if delegate is None:
        form.add_error("delegate", "Choose a person.")
        return False
    try:
        delegation_give(
            delegator=request.user,
            delegate=delegate,
            starts_at=data["starts_at"],
            ends_at=data["ends_at"],
            reason=data["reason"],
            by=request.user,
        )
    except ServiceError as exc:
        form.add_error(None, refusal_text(exc))
        return False
    messages.success(request, f"{delegate.get_username()} decides your approvals in that window.")
    return True
