"""Approver pages: the inbox, the evidence for one request, and the decision."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.timesince import timesince
from django.views.decorators.http import require_GET, require_POST

from approvals import selectors
from approvals.binding import Binding
from approvals.models import ApprovalRequest, ApprovalStatus
from approvals.services import (
    RECORDED,
    BulkResult,
    approval_assign,
    approval_claim,
    approval_decide,
    approval_release,
    approval_send_back,
    approvals_decide_bulk,
)
from console import vocabulary
from console.evidence import evidence_page, not_yours_words
from console.forms.approvals import DecisionForm
from console.raw_input import raw_download as download_raw
from console.raw_input import raw_page
from console.refusals import show_refusal
from console.templatetags.lists import approval_reason, one_line, sla_badge
from console.templatetags.words import term
from core.codes import Outcome
from core.errors import ServiceError
from core.http import AuthenticatedHttpRequest
from core.inputs import parse_number
from core.keyset import NEWEST, BadCursor, Cursor, order_of, page_link, parse_cursor

RESULT_MESSAGES = {
    ApprovalStatus.APPROVED: "Approved. The run continues with exactly the effect you saw.",
    ApprovalStatus.REJECTED: "Rejected. The run stops and your reason is on the record.",
    ApprovalStatus.SENT_BACK: (
        "Sent back. The ops team corrects the reading; the corrected run comes back for approval."
    ),
    RECORDED: "Your approval is recorded; this request needs another approver before it runs.",
    Outcome.APPROVAL_STALE: (
        "Not used: the request changed since you opened it (input, versions or effect). "
        "Nothing was approved; review the current evidence."
    ),
    Outcome.APPROVAL_EXPIRED: (
        "Not used: this request expired before you decided. A fresh request will be opened."
    ),
}


def _user_request(request: AuthenticatedHttpRequest, request_id: int) -> ApprovalRequest:
    approval = selectors.request_for(request.user, request_id)
    if approval is None:
        raise Http404("No such approval request for you")
    return approval


@require_GET
@login_required
@permission_required("approvals.view_approvalrequest", raise_exception=True)
def inbox(request: AuthenticatedHttpRequest) -> HttpResponse:
    default = selectors.default_scope(request.user)
    scope = request.GET.get("scope", default)
    scope = scope if scope in selectors.SCOPES else default
    overdue = request.GET.get("overdue") == "1"
    try:
        after, before = _cursor(request, "after"), _cursor(request, "before")
        bad_cursor = False
    except BadCursor:  # a hand-made or damaged link: the first page, and a 400 that says so
        after, before, bad_cursor = None, None, True
    order = order_of(request.GET)
    now = timezone.now()
    page = selectors.inbox_page(
        user=request.user,
        scope=scope,
        overdue_only=overdue,
        now=now,
        after=after,
        before=before,
        newest_first=order == NEWEST,
    )
    context = {
        "rows": [_inbox_line(row, now) for row in page.rows],
        "bulk_rows": any(row.bulk for row in page.rows),
        "scope": scope,
        "overdue": overdue,
        "order": order,
        "now": now,
        "scopes": selectors.SCOPES,
        "next_link": page_link(request.GET, "after", page.next),
        "previous_link": page_link(request.GET, "before", page.previous),
        "bad_cursor": bad_cursor,
    }
    return render(request, "approvals/inbox.html", context, status=400 if bad_cursor else 200)


@dataclass(frozen=True)
class InboxLine:
    """An inbox row with its cells in words, worked out once here rather than by a filter or
    a tag per cell in the template (a hundredth of a millisecond each, fifty rows a page)."""

    row: selectors.InboxRow
    number: str  # the request's number as text: an int is localized each time it is written
    evidence_url: str
    effect: str
    route: str
    waited: str
    created: str
    sla: str
    routed_to: str
    reason: str
    reason_line: str


def _inbox_line(row: selectors.InboxRow, now: datetime) -> InboxLine:
    request = row.request
    reason = approval_reason(row)
    return InboxLine(
        row=row,
        number=str(request.pk),
        evidence_url=reverse("approvals:evidence", args=[request.pk]),
        effect=vocabulary.label(vocabulary.Kind.EFFECT, request.effect),
        route=vocabulary.label(vocabulary.Kind.ROUTE, request.run.route),
        waited=timesince(request.created_at, now),
        created=timezone.localtime(request.created_at).isoformat(),
        sla=sla_badge(row.sla, row.sla_when),
        routed_to=term(vocabulary.Kind.GROUP, row.routed_to, False),
        reason=reason,
        reason_line=one_line(reason),
    )


def _cursor(request: HttpRequest, key: str) -> Cursor | None:
    text = request.GET.get(key, "")
    return parse_cursor(text) if text else None


@require_GET
@login_required
@permission_required("approvals.view_approvalrequest", raise_exception=True)
def evidence(request: AuthenticatedHttpRequest, request_id: int) -> HttpResponse:
    approval = _user_request(request, request_id)
    form = DecisionForm(
        initial={
            "decision": "approve",
            "seen_fingerprint": approval.fingerprint,
            "seen_workflow_version": approval.workflow_version,
            "seen_policy_version": approval.policy_version,
            "seen_effect": approval.effect,
        }
    )
    return _render_evidence(request, approval, form)


def _render_evidence(
    request: AuthenticatedHttpRequest,
    approval: ApprovalRequest,
    form: DecisionForm,
    status: int = 200,
) -> HttpResponse:
    page = evidence_page(approval=approval, user=request.user)
    context = {"form": form, **page.context()}
    return render(request, "approvals/evidence.html", context, status=status)


@require_POST
@login_required
@permission_required("approvals.decide_approvalrequest", raise_exception=True)
def decide(request: AuthenticatedHttpRequest, request_id: int) -> HttpResponse:
    approval = _user_request(request, request_id)
    form = DecisionForm(request.POST)
    if not form.is_valid():
        return _render_evidence(request, approval, form, status=400)
    try:
        if form.cleaned_data["decision"] == "send_back":
            approval_send_back(
                request_id=approval.pk, user=request.user, reason=form.cleaned_data["comment"]
            )
            messages.success(request, RESULT_MESSAGES[ApprovalStatus.SENT_BACK])
            return redirect("approvals:evidence", request_id=approval.pk)
        result = approval_decide(
            request_id=approval.pk,
            user=request.user,
            approve=form.cleaned_data["decision"] == "approve",
            comment=form.cleaned_data["comment"],
            seen=form.seen,
        )
    except ServiceError as exc:
        if exc.code == "forbidden":
            raise PermissionDenied(exc.message) from exc
        if exc.code in ("separation_of_duties", "already_decided") and (
            why := not_yours_words(request.user, approval)
        ):
            messages.error(request, why)  # what applies to this person, not every case
        else:
            show_refusal(request, exc)
        return redirect("approvals:evidence", request_id=approval.pk)
    level = (
        messages.SUCCESS
        if result.code in (ApprovalStatus.APPROVED, ApprovalStatus.REJECTED, RECORDED)
        else messages.ERROR
    )
    messages.add_message(request, level, RESULT_MESSAGES[result.code])
    return redirect("approvals:evidence", request_id=approval.pk)


# Requests decided at once from the inbox: no more than a page of it.
BULK_LIMIT = 50


@require_POST
@login_required
@permission_required("approvals.decide_approvalrequest", raise_exception=True)
def bulk(request: AuthenticatedHttpRequest) -> HttpResponse:
    """Approve or reject the selected requests, each on the binding its row showed; then a
    page that says what happened to each."""
    decision = request.POST.get("decision")
    comment = request.POST.get("comment", "").strip()
    chosen = [
        i for i in (parse_number(v) for v in request.POST.getlist("request")) if i is not None
    ]
    seen = {i: b for i in dict.fromkeys(chosen) if (b := _seen(request.POST.get(f"seen-{i}")))}
    if decision not in ("approve", "reject") or not seen:
        messages.error(request, "Select the requests to decide, then approve or reject them.")
        return redirect("approvals:inbox")
    if len(seen) > BULK_LIMIT:
        messages.error(request, f"Decide at most {BULK_LIMIT} requests at once.")
        return redirect("approvals:inbox")
    if decision == "reject" and not comment:
        messages.error(request, "A rejection needs a comment: it goes with each request.")
        return redirect("approvals:inbox")
    visible = set(
        selectors.visible_requests(request.user).filter(pk__in=seen).values_list("pk", flat=True)
    )
    results = approvals_decide_bulk(
        seen={i: b for i, b in seen.items() if i in visible},
        user=request.user,
        approve=decision == "approve",
        comment=comment,
    )
    shown = {
        r.pk: r
        for r in ApprovalRequest.objects.filter(
            pk__in=[x.request_id for x in results]
        ).select_related("run")
    }
    rows: list[tuple[BulkResult | None, ApprovalRequest | int | None]] = [
        (r, shown.get(r.request_id)) for r in results
    ]
    rows += [(None, i) for i in seen if i not in visible]
    decided = sum(1 for r in results if not r.message.startswith("skipped"))
    context = {
        "rows": rows,
        "decided": decided,
        "skipped": len(seen) - decided,
        "decision": decision,
    }
    return render(request, "approvals/bulk_result.html", context)


def _seen(value: str | None) -> Binding | None:
    """The binding a row showed: fingerprint|workflow|policy|effect."""
    parts = (value or "").split("|")
    if len(parts) != 4 or not all(parts) or len(value or "") > 500:
        return None
    return Binding(
        fingerprint=parts[0], workflow_version=parts[1], policy_version=parts[2], effect=parts[3]
    )


HANDED = {
    "claim": "It is yours now: the others see you have it.",
    "assign": "Given to {name}, who is told.",
    "release": "Given back to its group.",
}


@require_POST
@login_required
@permission_required("approvals.view_approvalrequest", raise_exception=True)
def hand(request: AuthenticatedHttpRequest, request_id: int, action: str) -> HttpResponse:
    """Claim a request, give it to someone (a lead), or give it back."""
    approval = _user_request(request, request_id)
    now = timezone.now()
    try:
        if action == "claim":
            approval_claim(request_id=approval.pk, user=request.user, now=now)
            name = request.user.get_username()
        elif action == "assign":
            if not request.user.has_perm("approvals.assign_approvalrequest"):
                raise PermissionDenied("you may not give requests to people")
            chosen = parse_number(request.POST.get("person"))
            person = User.objects.filter(pk=chosen).first() if chosen is not None else None
            if person is None:
                messages.error(request, "Choose the person to give it to.")
                return redirect("approvals:evidence", request_id=approval.pk)
            approval_assign(request_id=approval.pk, assignee=person, by=request.user, now=now)
            name = person.get_username()
        elif action == "release":
            approval_release(request_id=approval.pk, user=request.user, now=now)
            name = ""
        else:
            raise Http404("no such action")
    except ServiceError as exc:
        if exc.code == "forbidden" and action != "assign":
            raise PermissionDenied(exc.message) from exc
        show_refusal(request, exc)
        return redirect("approvals:evidence", request_id=approval.pk)
    messages.success(request, HANDED[action].format(name=name))
    return redirect("approvals:evidence", request_id=approval.pk)


@require_GET
@login_required
@permission_required("approvals.view_approvalrequest", raise_exception=True)
def raw_input(request: AuthenticatedHttpRequest, request_id: int) -> HttpResponse:
    """The request's input as received: a bounded preview as text, and a link to all of it."""
    approval = _user_request(request, request_id)
    return raw_page(
        request,
        intake_id=approval.run.intake_id,
        download_url=reverse("approvals:raw_download", args=[approval.pk]),
        back_url=reverse("approvals:evidence", args=[approval.pk]),
        back_label="The request's evidence",
    )


@require_GET
@login_required
@permission_required("approvals.view_approvalrequest", raise_exception=True)
def raw_download(request: AuthenticatedHttpRequest, request_id: int) -> HttpResponse:
    approval = _user_request(request, request_id)
    return download_raw(intake_id=approval.run.intake_id)
