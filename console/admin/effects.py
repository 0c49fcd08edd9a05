"""What was done: the outbox, its tasks for people and the effect controls that pause and
resume an effect (automation.effects)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import Q, QuerySet
from django.http import HttpRequest

from automation.effects.selectors import sees_effect_answers
from automation.effects.services import DELIVERABLE, effect_pause, effect_resume
from automation.models import Effect, EffectControl, Task
from console.admin.runs import EffectAttemptInline, effect_names, run_ids
from console.vocabulary import Kind, label
from core.admin_base import LargeTableAdmin, ReadOnlyAdminMixin, known_values_filter
from core.errors import ServiceError
from core.http import AuthenticatedHttpRequest


@admin.register(Effect)
class EffectAdmin(ReadOnlyAdminMixin, LargeTableAdmin):
    list_display = ["id", "name", "status", "attempts", "run", "created_at", "delivered_at"]
    list_filter = [
        "status",
        known_values_filter("name", "effect", effect_names, lambda c: label(Kind.EFFECT, c)),
    ]
    inlines = [EffectAttemptInline]
    search_fields = ["idempotency_key"]  # shows the search box; get_search_results searches
    search_help_text = (
        "Exact match on an idempotency key, or on anything that names its run (see the runs' "
        "search). Index lookups only; no partial words."
    )
    list_select_related = ["run"]

    def get_exclude(self, request: HttpRequest, obj: Any = None) -> list[str]:
        # The receiver's answer, to the people who handle deliveries only (sees_effect_answers).
        return [] if sees_effect_answers(request.user) else ["response_body"]

    def search_condition(self, term: str) -> Q:
        return Q(idempotency_key=term) | Q(run_id__in=run_ids(term))


@admin.register(Task)
class TaskAdmin(ReadOnlyAdminMixin, LargeTableAdmin):
    # Worked on the console's Tasks page (/tasks/); the admin only lists them.
    list_display = [
        "id",
        "effect",
        "group",
        "subject",
        "run",
        "claimed_by",
        "done_at",
        "created_at",
    ]
    search_fields = ["idempotency_key"]  # shows the search box; get_search_results searches
    search_help_text = "Exact match on an idempotency key or on anything that names its run."
    list_select_related = ["run", "claimed_by"]

    def search_condition(self, term: str) -> Q:
        return Q(idempotency_key=term) | Q(run_id__in=run_ids(term))


@admin.register(EffectControl)
class EffectControlAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Pause an effect during a downstream outage; resume it at a gentle rate."""

    list_display = ["name", "paused", "rate_per_minute", "changed_by", "changed_at", "waiting"]
    readonly_fields = ["name", "paused", "rate_per_minute", "changed_by", "changed_at"]
    actions = ["pause", "resume_slowly", "resume"]

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="deliveries waiting")
    def waiting(self, control: EffectControl) -> int:
        return Effect.objects.filter(name=control.name, status__in=DELIVERABLE).count()

    @admin.action(description="Pause deliveries", permissions=["change"])
    def pause(self, request: AuthenticatedHttpRequest, queryset: QuerySet[EffectControl]) -> None:
        done = 0
        for control in queryset:
            try:
                effect_pause(name=control.name, user=request.user)
            except ServiceError as exc:  # already paused: left as it was, nothing written
                self.message_user(request, exc.message, messages.WARNING)
            else:
                done += 1
        self.message_user(request, f"paused {done} effect(s)")

    @admin.action(description="Resume at 10 per minute", permissions=["change"])
    def resume_slowly(
        self, request: AuthenticatedHttpRequest, queryset: QuerySet[EffectControl]
    ) -> None:
        self._resume(request, queryset, 10)

    @admin.action(description="Resume at full speed", permissions=["change"])
    def resume(self, request: AuthenticatedHttpRequest, queryset: QuerySet[EffectControl]) -> None:
        self._resume(request, queryset, None)

    def _resume(
        self,
        request: AuthenticatedHttpRequest,
        queryset: QuerySet[EffectControl],
        rate: int | None,
    ) -> None:
        done = 0
        for control in queryset:
            try:
                effect_resume(name=control.name, user=request.user, rate_per_minute=rate)
            except ServiceError as exc:  # not paused: left as it was, nothing written
                self.message_user(request, exc.message, messages.WARNING)
            else:
                done += 1
        self.message_user(request, f"resumed {done} effect(s)")
