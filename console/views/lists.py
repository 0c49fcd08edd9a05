"""What the lists do in bulk: claim the chosen runs of a queue at once."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.http import HttpResponse
from django.shortcuts import redirect
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from automation.recovery.services import ClaimMany, queue_claim_many
from console.refusals import show_refusal
from core.errors import ServiceError
from core.http import AuthenticatedHttpRequest
from core.inputs import parse_number


@require_POST
@login_required
@permission_required("automation.work_queue", raise_exception=True)
def claim_many(request: AuthenticatedHttpRequest, name: str) -> HttpResponse:
    """Claim the runs ticked on a queue page; back to that page, with what happened."""
    run_ids = _run_ids(request.POST.getlist("run"))
    if not run_ids:
        messages.error(request, "Nothing claimed: tick the runs to claim first.")
    else:
        try:
            result = queue_claim_many(run_ids=run_ids, user=request.user)
        except ServiceError as exc:  # too many at once: nothing claimed, and why
            show_refusal(request, exc)
        else:
            level = messages.SUCCESS if result.claimed else messages.WARNING
            messages.add_message(request, level, claimed_text(result))
    target = request.POST.get("next", "")
    # A path on this site only: redirect() reads any other word as a URL name (a 500).
    if target.startswith("/") and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}
    ):
        return redirect(target)
    return redirect("queues:queue", name=name)


def _run_ids(values: list[str]) -> list[int]:
    """The run numbers posted; anything else (not a number, or past any id) names no run."""
    return [number for v in values if (number := parse_number(v)) is not None]


def claimed_text(result: ClaimMany) -> str:
    """What a bulk claim did, in plain words: "Claimed 3 runs; 1 was already taken by ana."."""
    parts = [f"Claimed {_runs(len(result.claimed))}"]
    by_owner: dict[str, int] = {}
    for owner in result.taken.values():
        by_owner[owner or "someone"] = by_owner.get(owner or "someone", 0) + 1
    for owner, count in sorted(by_owner.items()):
        parts.append(f"{count} {_was(count)} already taken by {owner}")
    if result.not_queued:
        count = len(result.not_queued)
        parts.append(f"{count} {_was(count)} no longer in a queue")
    return "; ".join(parts) + "."


def _runs(count: int) -> str:
    return "no runs" if count == 0 else "1 run" if count == 1 else f"{count} runs"


def _was(count: int) -> str:
    return "was" if count == 1 else "were"
