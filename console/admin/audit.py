"""The audit trail in the admin: searchable, never editable."""

from __future__ import annotations

from typing import Any, TypeVar

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.db.models import Model, Q, QuerySet
from django.http import HttpRequest

from audit.models import APPROVAL_ACTIONS, AuditEvent
from automation.recovery.selectors import identifier_match
from automation.runs.models import Run
from core.admin_base import (
    LargeTableAdmin,
    ReadOnlyAdminMixin,
    distinct_by_index,
    known_values_filter,
    sees_all_approvals,
)
from core.inputs import parse_number


def _actions(request: HttpRequest) -> list[str]:
    """The actions on record (audit_action_idx leads with the action: its distinct values by
    skipping through it); approval actions only for those who see approval rows."""
    actions = distinct_by_index(AuditEvent.objects.all(), "action")
    if sees_all_approvals(request):
        return actions
    return [action for action in actions if not action.startswith(APPROVAL_ACTIONS)]


M = TypeVar("M", bound=Model)


def without_approval_rows(request: HttpRequest, rows: QuerySet[M]) -> QuerySet[M]:
    """Audit rows about approvals (decisions, comments, escalations) only for those who may
    read every group's requests: someone else reading the trail sees the runs' own rows."""
    if sees_all_approvals(request):
        return rows
    return rows.filter(approval__isnull=True).exclude(action__startswith=APPROVAL_ACTIONS)


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdminMixin, LargeTableAdmin):
    list_display = [
        "created_at",
        "action",
        "actor_label",
        "run",
        "approval",
        "from_state",
        "to_state",
    ]
    list_filter = [known_values_filter("action", "action", _actions)]
    search_fields = ["action"]  # shows the search box; get_search_results searches
    search_help_text = (
        "Exact match on a username (what that person did) or, when no one has that name, on "
        "a run number or a run's event id, Message-ID, fingerprint or customer reference. "
        "Index lookups only; no partial words."
    )
    list_select_related = ["run", "approval"]
    sortable_by = []  # newest first by id; no other order has an index

    def search_condition(self, term: str) -> Q:
        # One indexed condition, never an OR of two subqueries: PostgreSQL answers that OR
        # by reading the whole trail. A username names a person; anything else, runs.
        person = get_user_model().objects.filter(username=term).values_list("pk", flat=True)
        found = list(person[:1])
        if found:
            return Q(actor_id=found[0])
        return Q(run_id__in=_named_runs(term))

    def get_queryset(self, request: HttpRequest) -> QuerySet[AuditEvent]:
        return without_approval_rows(request, super().get_queryset(request))


def _named_runs(term: str) -> QuerySet[Any]:
    """The runs a term names, as the runs' own search reads it, or a run's number. Each branch
    is an index lookup on the runs table."""
    match = identifier_match(term)
    number = parse_number(term)
    if number is not None:
        match |= Q(pk=number)
    return Run.objects.filter(match).values("pk")
