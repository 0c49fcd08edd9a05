"""Recovering runs from the admin: the retry and replay actions and the run page's
operations, each through its service in automation.recovery."""

from __future__ import annotations

from typing import Any, cast

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path

from automation.models import RecoveryKind, Run
from automation.recovery.services import OPERATIONS, run_operations_for, run_replay, run_retry
from core.errors import ServiceError
from core.http import AuthenticatedHttpRequest


class RunRecoveryAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """What a person may do to runs from the admin: retry or replay the selected ones (the
    reason asked first), and start an operation the run's page offers (its permission
    checked first). Mixed into RunAdmin (console/admin/runs.py)."""

    @admin.action(description="Retry the failed stage of the selected held runs")
    def retry_selected(
        self, request: AuthenticatedHttpRequest, queryset: QuerySet[Run]
    ) -> HttpResponse | None:
        return self._recover(request, queryset, RecoveryKind.RETRY)

    @admin.action(description="Replay the selected finished runs")
    def replay_selected(
        self, request: AuthenticatedHttpRequest, queryset: QuerySet[Run]
    ) -> HttpResponse | None:
        return self._recover(request, queryset, RecoveryKind.REPLAY)

    def _recover(
        self, request: AuthenticatedHttpRequest, queryset: QuerySet[Run], action: RecoveryKind
    ) -> HttpResponse | None:
        """Ask for the reason first (an intermediate page), then call the service per run."""
        if not request.user.has_perm("automation.recover_run"):
            raise PermissionDenied("you may not recover runs")
        reason = request.POST.get("reason", "").strip()
        if not reason:
            context = {
                **self.admin_site.each_context(request),
                "runs": queryset,
                "action": action,
                "action_name": f"{action}_selected",
                "opts": self.model._meta,
            }
            return TemplateResponse(request, "admin/automation/run/recover_reason.html", context)
        user = request.user
        done = 0
        for run in queryset:
            try:
                if action == RecoveryKind.REPLAY:
                    run_replay(run_id=run.pk, user=user, reason=reason)
                    done += 1
                else:
                    run_retry(run_id=run.pk, user=user, reason=reason)
                    done += 1
            except ServiceError as exc:
                self.message_user(request, f"run {run.pk}: {exc.message}", messages.WARNING)
        self.message_user(request, f"{action}: {done} of {queryset.count()} run(s)")
        return None

    def get_urls(self) -> list[URLPattern]:
        operation = path(
            "<int:run_id>/operation/<str:name>/",
            self.admin_site.admin_view(self.operation_view),
            name="automation_run_operation",
        )
        return [operation, *super().get_urls()]

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        run = Run.objects.filter(pk=object_id).first()
        # The admin lets only a signed-in member of staff this far.
        user = cast(AuthenticatedHttpRequest, request).user
        operations = run_operations_for(run=run, user=user) if run else []
        context = {**(extra_context or {}), "run_operations": operations}
        return super().change_view(request, object_id, form_url, context)

    def operation_view(
        self, request: AuthenticatedHttpRequest, run_id: int, name: str
    ) -> HttpResponse:
        """Start an operation through its service; only transitions offered on the page.

        The operation's permission is checked first: a staff user who may not start it gets a
        403 that says nothing about the run, and nothing is written on the run's record.
        """
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        operation = OPERATIONS.get(name)
        if operation is None:
            raise Http404("no such operation")
        if not (self.has_view_permission(request) and request.user.has_perm(operation.permission)):
            raise PermissionDenied(f"you need the {operation.permission} permission")
        if not Run.objects.filter(pk=run_id).exists():
            raise Http404("no such run")
        reason = request.POST.get("reason", "").strip()
        if not reason:
            self.message_user(
                request, "Give a reason: it goes on the run's record.", messages.ERROR
            )
        else:
            try:
                result = operation.service(run_id=run_id, user=request.user, reason=reason)
            except ServiceError as exc:
                self.message_user(request, f"{name}: {exc.message}", messages.ERROR)
            else:
                self.message_user(request, f"{name}: {result}", messages.SUCCESS)
        return redirect("admin:automation_run_change", run_id)
