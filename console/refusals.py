"""How a page tells a person that a service refused: the one place that renders it.

A refusal names what applies to this person and this request ("you corrected the reading of
this run on ..."), not a list of everything that might.
"""

from __future__ import annotations

from datetime import UTC, datetime

from django.contrib import messages
from django.http import HttpRequest

from approvals.models import ApprovalRequest
from approvals.selectors import NotYours
from console.vocabulary import label
from core.errors import ServiceError


def refusal_text(error: ServiceError) -> str:
    """The service's plain words as a sentence: capitalised, with a full stop."""
    text = error.message
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


def show_refusal(request: HttpRequest, error: ServiceError, prefix: str = "") -> None:
    messages.error(request, prefix + refusal_text(error))


def _when(moment: datetime | None) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC") if moment else ""


def _groups(approval: ApprovalRequest) -> str:
    return label("group", approval.group)


def not_yours_text(reason: NotYours, approval: ApprovalRequest) -> str:
    """Why this person cannot decide this request, in one sentence about them."""
    if reason.why == NotYours.NO_PERMISSION:
        return "You cannot decide this request: your role reads approvals but decides none."
    if reason.why == NotYours.OTHER_GROUP:
        later = ""
        if approval.escalate_to:
            later = (
                f"; it goes to {label('group', approval.escalate_to)} if nobody decides it "
                f"by {_when(approval.escalate_at)}"
            )
        return (
            f"You cannot decide this request: it is routed to {_groups(approval)}, "
            f"and you are not one of them{later}."
        )
    if reason.why == NotYours.ACTED:
        return _acted_text(reason, approval)
    given = approval.decisions.filter(counted=True, approve=True).count()
    return (
        f"You cannot decide this request again: you approved it on {_when(reason.at)}. "
        f"It needs {approval.required_approvals} distinct approvers ({given} so far), "
        "so the next approval is someone else's."
    )


def _acted_text(reason: NotYours, approval: ApprovalRequest) -> str:
    end = ". Whoever acted on a run by hand may not approve it: someone else must decide it."
    if not reason.action:
        return "You cannot decide this request: you acted on this run by hand" + end
    what = f"{label('audit', reason.action)}, {_when(reason.at)}"
    if reason.run_id == approval.run_id:
        return f"You cannot decide this request: you acted on this run by hand ({what})" + end
    return (
        f"You cannot decide this request: you acted by hand on run #{reason.run_id}, which "
        f"this run replays ({what})" + end
    )
