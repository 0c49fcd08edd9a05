"""The runs section (`runs:*`, under /runs/): a run's page and its input as received, and
what people do to a run from there: comment on its thread; correct its reading; claim,
release or assign it in its queue; recover it (retry, resume, reconsider, replay, resolve,
abandon), with a preview first where the action has one."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from approvals import selectors as approval_selectors
from approvals.models import ApprovalStatus
from automation.classifiers.servers import waiting_of
from automation.models import Run
from automation.pipeline.operations import run_reconsider
from automation.recovery.actions import queue_action as offered_queue_action
from automation.recovery.actions import queue_actions, run_action, run_actions
from automation.recovery.preview import preview_runs
from automation.recovery.selectors import run_page as run_record
from automation.recovery.services import (
    CorrectionInvalid,
    correction_problems,
    queue_assign,
    queue_claim,
    queue_release,
    run_correct,
    run_correct_rejected,
    run_replay,
    run_resolve,
    run_resume,
    run_retry,
    run_retry_effect,
)
from automation.runs.comments import may_comment, may_read_run, run_comment_add
from automation.schemas import FieldProblem
from console import statechart
from console.forms.correction import correction_form
from console.forms.ops import RecoveryForm, form_problems
from console.previews import preview_sentence
from console.raw_input import raw_download as download_raw
from console.raw_input import raw_page
from console.refusals import show_refusal
from console.views.staff import VIEW_RUNS, assignees
from console.vocabulary import label
from core.codes import Outcome, Refusal
from core.errors import ServiceError
from core.http import AuthenticatedHttpRequest
from notifications.services import run_notifications


@require_GET
@login_required
def run_page(request: AuthenticatedHttpRequest, run_id: int) -> HttpResponse:
    run = get_object_or_404(
        Run.objects.select_related("channel", "intake", "owner", "replay_of", "thread_parent"),
        pk=run_id,
    )
    user = request.user
    if not may_read_run(user, run.pk):
        raise PermissionDenied("you may not read this run")
    context = {
        "run": run,
        **run_record(run),
        "actions": run_actions(run, user),
        "queue_actions": queue_actions(run, user),
        "reads_runs": user.has_perm(VIEW_RUNS),
        "may_act": any(
            user.has_perm(f"automation.{p}") for p in ("recover_run", "work_queue", "correct_run")
        ),
        "people": assignees() if user.has_perm("automation.work_queue") and run.queue else [],
        "approval_links": approval_selectors.visible_requests(user).filter(
            run=run, status=ApprovalStatus.PENDING
        ),
        "problems": _problems(run),
        "sent_back": (
            approval_selectors.sent_back(run.pk) if run.outcome == Outcome.SENT_BACK else None
        ),
        "waiting": waiting_of(run),
        "told": run_notifications(run.pk),
        "may_comment": may_comment(user, run.pk),
    }
    context["diagram"] = statechart.run_diagram(run, context["history"])
    return render(request, "runs/run.html", context)


@require_POST
@login_required
def comment(request: AuthenticatedHttpRequest, run_id: int) -> HttpResponse:
    """Add a comment to the run's thread, from the run page or a request's evidence page,
    and go back there. Whoever may not read the run gets the forbidden page, before the text
    is looked at."""
    run = get_object_or_404(Run.objects.only("pk"), pk=run_id)
    if not may_comment(request.user, run.pk):
        raise PermissionDenied("you may not comment on this run")
    try:
        run_comment_add(
            run_id=run.pk,
            author=request.user,
            body=request.POST.get("body", ""),
            now=timezone.now(),
        )
    except ServiceError as exc:
        if exc.code == Refusal.FORBIDDEN:
            raise PermissionDenied(exc.message) from exc
        show_refusal(request, exc, prefix="Comment not added: ")
    else:
        messages.success(request, "Comment added to the run's thread.")
    return redirect(_page_of(request, run.pk) + "#comments")


def _page_of(request: HttpRequest, run_id: int) -> str:
    """The page the comment form was on (the run's, or a request's evidence), else the run's."""
    target = request.POST.get("next", "")
    if target.startswith("/") and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}
    ):
        return target.split("#")[0]
    return reverse("runs:run", args=[run_id])


@require_GET
@login_required
@permission_required(VIEW_RUNS, raise_exception=True)
def raw_input(request: AuthenticatedHttpRequest, run_id: int) -> HttpResponse:
    """The run's input as received: a bounded preview, and a link to all of it."""
    run = get_object_or_404(Run.objects.only("pk", "intake_id"), pk=run_id)
    return raw_page(
        request,
        intake_id=run.intake_id,
        download_url=reverse("runs:raw_download", args=[run.pk]),
        back_url=reverse("runs:run", args=[run.pk]),
        back_label=f"Run {run.pk}",
    )


@require_GET
@login_required
@permission_required(VIEW_RUNS, raise_exception=True)
def raw_download(request: AuthenticatedHttpRequest, run_id: int) -> HttpResponse:
    run = get_object_or_404(Run.objects.only("pk", "intake_id"), pk=run_id)
    return download_raw(intake_id=run.intake_id)


def _problems(run: Run) -> list[dict[str, str]]:
    """The validation problems stored with a hold, as field and message."""
    if not run.failure_detail:
        return []
    try:
        problems = json.loads(run.failure_detail)
    except json.JSONDecodeError:
        problems = None
    if isinstance(problems, list) and problems and all(isinstance(p, dict) for p in problems):
        return problems
    return [{"field": "", "message": run.failure_detail}]


@require_http_methods(["GET", "POST"])
@login_required
@permission_required("automation.correct_run", raise_exception=True)
def correct(request: AuthenticatedHttpRequest, run_id: int) -> HttpResponse:
    run = get_object_or_404(Run.objects.select_related("channel"), pk=run_id)
    # A held run is corrected in place; a rejected one as a new run (run_correct_rejected).
    offered = run_action(run, request.user, "correct") or run_action(
        run, request.user, "correct_rejected"
    )
    if offered is None:
        return _not_offered(request, run, "Correcting the reading")
    correct_with = run_correct if offered.name == "correct" else run_correct_rejected
    posted = request.POST if request.method == "POST" else None  # an empty POST is bound too
    form = correction_form(run, posted)
    status = 200
    if not form.is_bound:
        # What held the run, beside the inputs it is about (a needed date: its empty input).
        stored = [p for p in _problems(run) if p.get("field")]
        form.add_problems(
            [FieldProblem(field=str(p["field"]), message=str(p.get("message", ""))) for p in stored]
        )
    else:
        status = 400
        form.is_valid()
        # Every problem at once, the form's own and the correction's: nothing is saved while
        # one remains.
        if form.judge(correction_problems(form.decision(), run)):
            try:
                result = correct_with(
                    run_id=run.pk,
                    user=request.user,
                    corrected=form.decision(),
                    reason=form.cleaned_data["reason"],
                )
            except CorrectionInvalid as exc:
                form.add_problems(exc.problems)
            except ServiceError as exc:
                show_refusal(request, exc)
                return redirect("runs:run", run_id=run.pk)
            else:
                messages.success(request, _corrected_text(result.changed, result.run, run))
                return redirect("runs:run", run_id=result.run.pk)
    context = {"run": run, "form": form, "problems": _problems(run)}
    return render(request, "runs/correct.html", context, status=status)


@require_POST
@login_required
# Checked here as well as in the services: before the assignee is looked up, so that a
# person who may not work the queues cannot learn which usernames exist.
@permission_required("automation.work_queue", raise_exception=True)
def queue_action(request: AuthenticatedHttpRequest, run_id: int, action: str) -> HttpResponse:
    user = request.user
    run = get_object_or_404(Run, pk=run_id)
    offered = offered_queue_action(run, user, action)
    if offered is None:
        return _not_offered(request, run, action.capitalize())
    try:
        if action == "claim":
            queue_claim(run_id=run_id, user=user)
            done = "Claimed: the run is yours to work on."
        elif action == "release":
            queue_release(run_id=run_id, user=user)
            done = "Released: the run is back in the queue for anyone to take."
        else:
            # From the run page, `assignee`; from a queue page, whose rows share one form,
            # the row's own `assignee-<run>`.
            name = request.POST.get(f"assignee-{run_id}") or request.POST.get("assignee", "")
            assignee = get_object_or_404(User, username=name)
            queue_assign(run_id=run_id, user=user, assignee=assignee)
            done = f"Assigned to {assignee.get_username()}."
    except ServiceError as exc:
        show_refusal(request, exc)
    else:
        messages.success(request, done)
    return _back(request, run_id)


def _not_offered(request: HttpRequest, run: Run, what: str) -> HttpResponse:
    """An action the run page does not offer: refused before any service sees it (a hand-made
    POST, or a page opened before the run moved on)."""
    messages.error(
        request,
        f"{what} is not possible for this run now: it is “{label('state', run.state)}”"
        + (f" ({label('outcome', run.outcome)})" if run.outcome else "")
        + ". The run page shows what can be done.",
    )
    response = redirect("runs:run", run_id=run.pk)
    response.status_code = 303
    return response


def _corrected_text(changed: dict[str, list[Any]], corrected: Run, shown: Run) -> str:
    """Which values changed, in words: only those a person changed (a person's reading is
    given confidence 1.0 by the service; that is not something they changed). A rejected
    run's correction is a new run, and says so."""
    names = [
        name.removeprefix("fields.").replace("_", " ") for name in changed if name != "confidence"
    ]
    said = (
        f"Corrected {', '.join(names)}; policy decides again."
        if names
        else "Confirmed as read, nothing changed; policy decides again."
    )
    if corrected.pk != shown.pk:
        said += f" This is the new run, #{corrected.pk}, of rejected run #{shown.pk}."
    return said


def _back(request: HttpRequest, run_id: int) -> HttpResponse:
    """Back to the page the form was on (a queue), or to the run page."""
    target = request.POST.get("next", "")
    # A path on this site only: redirect() reads any other word as a URL name (a 500).
    if target.startswith("/") and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}
    ):
        return redirect(target)
    return redirect("runs:run", run_id=run_id)


def _state_now(run_id: int) -> str:
    run = Run.objects.only("state", "outcome").get(pk=run_id)
    return f"The run is now “{label('state', run.state)}”."


def _retry(run_id: int, user: User, form: RecoveryForm) -> str:
    run_retry(run_id=run_id, user=user, reason=form.cleaned_data["reason"])
    return _state_now(run_id)


def _retry_effect(run_id: int, user: User, form: RecoveryForm) -> str:
    run_retry_effect(run_id=run_id, user=user, reason=form.cleaned_data["reason"])
    return _state_now(run_id)


def _resume(run_id: int, user: User, form: RecoveryForm) -> str:
    run_resume(run_id=run_id, user=user, reason=form.cleaned_data["reason"])
    return _state_now(run_id)


def _reconsider(run_id: int, user: User, form: RecoveryForm) -> str:
    run_reconsider(run_id=run_id, user=user, reason=form.cleaned_data["reason"])
    return _state_now(run_id)


def _replay(run_id: int, user: User, form: RecoveryForm) -> str:
    replay = run_replay(run_id=run_id, user=user, reason=form.cleaned_data["reason"])
    return f"The new run is #{replay.pk}."


def _resolver(done: bool) -> Any:
    def resolve(run_id: int, user: User, form: RecoveryForm) -> str:
        data = form.cleaned_data
        run_resolve(
            run_id=run_id, user=user, reason=data["reason"], evidence=data["evidence"], done=done
        )
        return _state_now(run_id)

    return resolve


RECOVERY = {
    "retry": _retry,
    "retry_effect": _retry_effect,
    "resume": _resume,
    "reconsider": _reconsider,
    "replay": _replay,
    "resolve": _resolver(done=True),
    "abandon": _resolver(done=False),
}


@require_POST
@login_required
@permission_required("automation.recover_run", raise_exception=True)
def recover(request: AuthenticatedHttpRequest, run_id: int, action: str) -> HttpResponse:
    operation = RECOVERY.get(action)
    if operation is None:
        raise Http404("no such recovery operation")
    run = get_object_or_404(Run, pk=run_id)
    offered = run_action(run, request.user, action)
    if offered is None:
        return _not_offered(request, run, vocabulary_action(action))
    form = RecoveryForm(request.POST)
    if not form.is_valid():
        if "reason" in form.errors and not request.POST.get("reason", "").strip():
            messages.error(request, "Give a reason: it goes on the run's record.")
        else:
            messages.error(request, f"{offered.label}: not done. {form_problems(form)}")
        return redirect("runs:run", run_id=run_id)
    if offered.needs_evidence and not form.cleaned_data["evidence"].strip():
        messages.error(request, f"{offered.label}: describe what was done, or why it is dropped.")
        return redirect("runs:run", run_id=run_id)
    try:
        result = operation(run_id, request.user, form)
    except ServiceError as exc:
        show_refusal(request, exc, prefix=f"{offered.label}: ")
    else:
        messages.success(request, f"{offered.label}: done. {result}")
    return redirect("runs:run", run_id=run_id)


def vocabulary_action(action: str) -> str:
    return label("recovery", action)


@require_GET
@login_required
@permission_required("automation.recover_run", raise_exception=True)
def preview(request: AuthenticatedHttpRequest, run_id: int, action: str) -> HttpResponse:
    """What a replay, retry or re-decision of this run would do, with the form that starts it."""
    run = get_object_or_404(Run.objects.select_related("channel"), pk=run_id)
    offered = run_action(run, request.user, action)
    if offered is None or not offered.previewed:
        return _not_offered(request, run, vocabulary_action(action))
    rows = [r.as_dict() for r in preview_runs(run_ids=[run.pk], action=action, user=request.user)]
    said = [{**row, "sentence": preview_sentence(row)} for row in rows]
    context = {"run": run, "action": offered, "row": said[0] if said else None}
    return render(request, "runs/preview.html", context)
