"""The operators' view of runs: what came in, how it was read, what was decided and done.

The run's list, its page and the records shown on it; what a person may do to a run is
console/admin/recovery.py."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin
from django.db.models import Q, QuerySet
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join

from automation.effects.selectors import sees_effect_answers
from automation.models import (
    AuditEvent,
    Checkpoint,
    ClassificationAttempt,
    Effect,
    EffectAttempt,
    Outcome,
    Run,
    RunComment,
    StageRecord,
    State,
)
from automation.recovery.selectors import identifier_match
from console.admin.audit import without_approval_rows
from console.admin.recovery import RunRecoveryAdmin
from console.vocabulary import Kind, label
from core.admin_base import LargeTableAdmin, ReadOnlyAdminMixin, ReadOnlyInline, known_values_filter
from core.inputs import parse_number
from policy.models import PolicyVersion
from policy.selectors import stored_businesses


def _routes(request: HttpRequest) -> list[str]:
    return stored_businesses().names("routes")


def effect_names(request: HttpRequest) -> list[str]:
    return stored_businesses().names("effects")


def said(kind: Kind, code: str) -> str:
    """A code in a list column as words first, the code as quiet secondary text."""
    if not code:
        return "—"
    return format_html('{} <small class="code">{}</small>', label(kind, code), code)


def _pretty(value: Any) -> str:
    return format_html("<pre>{}</pre>", json.dumps(value, indent=2, sort_keys=True))


class StageInline(ReadOnlyInline):
    model = StageRecord
    fields = ["stage", "attempt", "started_at", "duration_ms", "outcome", "error_class"]
    verbose_name_plural = "Stage timings"


class CheckpointInline(ReadOnlyInline):
    model = Checkpoint
    fields = ["sequence", "state", "source", "created_at", "versions", "data"]


class ClassificationInline(ReadOnlyInline):
    model = ClassificationAttempt
    fields = ["attempt", "classifier", "outcome", "latency_ms", "raw_output", "errors"]


class EffectInline(ReadOnlyInline):
    model = Effect
    fields = ["name", "status", "attempts", "idempotency_key", "response_ref", "delivered_at"]


ATTEMPT_FIELDS = [
    "attempt",
    "started_at",
    "duration_ms",
    "outcome",
    "status_code",
    "error_class",
    "detail",
]


class EffectAttemptInline(ReadOnlyInline):
    model = EffectAttempt
    fields = [*ATTEMPT_FIELDS]

    def get_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:  # type: ignore[override]
        # An attempt's detail is the start of the receiver's answer when it had one.
        if sees_effect_answers(request.user):
            return ATTEMPT_FIELDS
        return [name for name in ATTEMPT_FIELDS if name != "detail"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return self.get_fields(request, obj)


class CommentInline(ReadOnlyInline):
    model = RunComment
    fields = ["created_at", "author", "body", "mentions"]
    verbose_name_plural = "Comments"

    def get_queryset(self, request: HttpRequest) -> QuerySet[RunComment]:
        return super().get_queryset(request).select_related("author")  # its name on each row


class AuditInline(ReadOnlyInline):
    model = AuditEvent
    fk_name = "run"
    fields = ["created_at", "actor_label", "action", "from_state", "to_state", "data"]
    verbose_name_plural = "History"

    def get_queryset(self, request: HttpRequest) -> QuerySet[AuditEvent]:
        return without_approval_rows(request, super().get_queryset(request))


def _policy_versions(request: HttpRequest) -> list[str]:
    return list(PolicyVersion.objects.order_by("name").values_list("name", flat=True))


def run_match(term: str) -> Q:
    """The runs a search term names: identifier_match, or a run's number."""
    match = identifier_match(term)
    number = parse_number(term)
    if number is not None:
        match |= Q(pk=number)
    return match


def run_ids(term: str) -> QuerySet[Run]:
    """The runs a search term names, as ids for a subquery."""
    return Run.objects.filter(run_match(term)).values("pk")


RUN_SEARCH_HELP = (
    "Exact match on a run number, event id (an e-mail's Message-ID, with or without <>), "
    "input fingerprint or customer reference. Each is an index lookup; no partial words."
)


# What the run list shows (list_display and total_ms), with the channel's name.
RUN_LIST_COLUMNS = (
    "id",
    "event_id",
    "channel__name",
    "state",
    "outcome",
    "route",
    "effect_name",
    "policy_version",
    "created_at",
    "finished_at",
)


@admin.register(Run)
class RunAdmin(RunRecoveryAdmin, ReadOnlyAdminMixin, LargeTableAdmin):
    list_display = [
        "id",
        "event_id",
        "channel",
        "state_said",
        "outcome_said",
        "route_said",
        "effect_said",
        "policy_version",
        "created_at",
        "total_ms",
    ]
    # Choices from known lists (never SELECT DISTINCT over every run). The date hierarchy
    # filters on a range of created_at (run_created_idx) and is drawn from its MIN and MAX
    # (templates/admin/automation/run/change_list.html), not by reading every run.
    date_hierarchy = "created_at"
    # Each filter's choices in words (console.vocabulary); the codes stay in the address.
    list_filter = [
        known_values_filter("state", "state", lambda r: [*State], lambda c: label(Kind.STATE, c)),
        known_values_filter(
            "outcome", "outcome", lambda r: [*Outcome], lambda c: label(Kind.OUTCOME, c)
        ),
        # The routes and effects any stored version's catalogue names (policy.selectors).
        known_values_filter("route", "route", _routes, lambda c: label(Kind.ROUTE, c)),
        known_values_filter("effect_name", "effect", effect_names, lambda c: label(Kind.EFFECT, c)),
        "channel",
        known_values_filter("policy_version", "policy version", _policy_versions),
    ]
    search_fields = ["event_id"]  # shows the search box; get_search_results does the work
    search_help_text = RUN_SEARCH_HELP
    sortable_by = ["id", "event_id", "created_at"]  # each one an index
    list_select_related = ["channel"]
    list_per_page = 50
    readonly_fields = [
        "normalized_pretty",
        "classification_pretty",
        "rules_pretty",
        "raw_input",
        "effect_attempts",
    ]
    fieldsets = [
        (
            None,
            {
                "fields": [
                    "channel",
                    "identity_scope",
                    "event_id",
                    "state",
                    "outcome",
                    "failure_field",
                    "failure_detail",
                    "queue",
                    "owner",
                ]
            },
        ),
        (
            "Input",
            {
                "fields": [
                    "raw_input",
                    "normalized_pretty",
                    "fingerprint",
                    "enrichment",
                    "replay_of",
                ]
            },
        ),
        (
            "Interpretation",
            {
                "fields": [
                    "classification_pretty",
                    "category",
                    "reason_code",
                    "confidence",
                    "classify_attempts",
                    "next_attempt_at",
                ]
            },
        ),
        ("Decision", {"fields": ["route", "effect_name", "rules_pretty"]}),
        ("Delivery", {"fields": ["effect_attempts"]}),
        (
            "Versions",
            {
                "fields": [
                    "workflow_version",
                    "classifier_version",
                    "prompt_version",
                    "policy_version",
                    "version",
                ]
            },
        ),
        ("Times", {"fields": ["created_at", "updated_at", "finished_at"]}),
    ]
    inlines = [
        StageInline,
        CheckpointInline,
        ClassificationInline,
        EffectInline,
        CommentInline,
        AuditInline,
    ]
    actions = ["retry_selected", "replay_selected"]

    def search_condition(self, term: str) -> Q:
        return Q(pk__in=run_ids(term))

    def get_queryset(self, request: HttpRequest) -> QuerySet[Run]:
        runs = super().get_queryset(request)
        match = request.resolver_match
        if match is not None and match.url_name == "automation_run_changelist":
            # The list reads the columns it shows, not each run's documents.
            runs = runs.only(*RUN_LIST_COLUMNS)
        return runs

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [f.name for f in Run._meta.fields] + list(self.readonly_fields)

    @admin.display(description="state")
    def state_said(self, run: Run) -> str:
        return said(Kind.STATE, run.state)

    @admin.display(description="outcome")
    def outcome_said(self, run: Run) -> str:
        return said(Kind.OUTCOME, run.outcome)

    @admin.display(description="route")
    def route_said(self, run: Run) -> str:
        return said(Kind.ROUTE, run.route)

    @admin.display(description="effect")
    def effect_said(self, run: Run) -> str:
        return said(Kind.EFFECT, run.effect_name)

    @admin.display(description="total (ms)")
    def total_ms(self, run: Run) -> int | None:
        if run.finished_at is None:
            return None
        return int((run.finished_at - run.created_at).total_seconds() * 1000)

    @admin.display(description="normalized input")
    def normalized_pretty(self, run: Run) -> str:
        return _pretty(run.normalized)

    @admin.display(description="classification")
    def classification_pretty(self, run: Run) -> str:
        return _pretty(run.classification)

    @admin.display(description="rules that fired")
    def rules_pretty(self, run: Run) -> str:
        return _pretty(run.rules)

    @admin.display(description="effect attempts")
    def effect_attempts(self, run: Run) -> str:
        rows = EffectAttempt.objects.filter(effect__run=run).order_by("effect", "attempt")
        return (
            format_html_join(
                "\n",
                "<div>#{} {} · {} · {} ms · {} {}</div>",
                (
                    (
                        a.attempt,
                        a.started_at.strftime("%Y-%m-%d %H:%M:%S"),
                        a.outcome,
                        a.duration_ms,
                        a.status_code or "",
                        a.error_class,
                    )
                    for a in rows
                ),
            )
            or "—"
        )

    @admin.display(description="raw input")
    def raw_input(self, run: Run) -> str:
        return format_html(
            '<a href="../../intakerecord/{}/change/">intake #{}</a>', run.intake_id, run.intake_id
        )
