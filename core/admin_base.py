"""Admin building blocks shared by the apps: machine-made rows are read-only."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import cached_property
from typing import Any

from django.contrib import admin
from django.core.paginator import Paginator
from django.db import connections
from django.db.models import Q, QuerySet
from django.http import HttpRequest

# Approval records are shown in the admin only to those who read every group's requests (ops
# leads, auditors, recovery staff). An approver reads the requests routed to their groups in
# the console, which decides visibility request by request; the admin has no such filter.
VIEW_ALL_APPROVALS = "approvals.view_all_approvalrequests"


def sees_all_approvals(request: HttpRequest) -> bool:
    return request.user.is_active and request.user.has_perm(VIEW_ALL_APPROVALS)


class ReadOnlyAdminMixin:
    """No add, no edit, no delete: the row is a record, not a form."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ReadOnlyInline(ReadOnlyAdminMixin, admin.TabularInline):  # type: ignore[type-arg]
    extra = 0
    can_delete = False
    show_change_link = False

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        # Every shown field is read-only, including machine-set ones such as created_at.
        return [f for f in (self.fields or []) if isinstance(f, str)]


# --- large tables: no count of the whole table, no scan for a list filter's choices ---------

# Beyond this many rows a change list says "about N" and offers no further pages: a person
# narrows the filters (or searches) instead of paging through a million rows with OFFSET.
COUNT_BOUND = 10_000


def estimated_rows(rows: QuerySet[Any]) -> int | None:
    """PostgreSQL's own estimate of the table's rows (pg_class.reltuples, kept by ANALYZE and
    autovacuum); None for a table never analyzed."""
    connection = connections[rows.db]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT reltuples FROM pg_class WHERE oid = to_regclass(%s)",
            [connection.ops.quote_name(rows.model._meta.db_table)],
        )
        found = cursor.fetchone()
    return int(found[0]) if found and found[0] is not None and found[0] >= 0 else None


class EstimatedCountPaginator(Paginator):
    """A change list's paginator that never counts a whole large table.

    Unfiltered, the count is PostgreSQL's estimate when the table is large; filtered (or
    small), rows are counted up to COUNT_BOUND + 1 only, so a filter that matches most of a
    million rows costs what one that matches ten thousand does. Pages stop at the bound.
    """

    @cached_property
    def count(self) -> int:
        rows = self.object_list
        if not isinstance(rows, QuerySet):
            return int(super().count)
        if not rows.query.where:
            estimate = estimated_rows(rows)
            if estimate is not None and estimate > COUNT_BOUND:
                return estimate
        return int(rows.order_by()[: COUNT_BOUND + 1].count())

    @cached_property
    def num_pages(self) -> int:
        reachable = max(1, -(-(COUNT_BOUND + 1) // self.per_page))
        return int(min(super().num_pages, reachable))


class LargeTableAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """For tables of millions of rows: no full count, newest first by primary key (an index
    walked backwards), sorting only by indexed columns, and an index-backed search."""

    paginator = EstimatedCountPaginator
    show_full_result_count = False
    ordering = ["-id"]
    sortable_by = ["id"]

    def search_condition(self, term: str) -> Q:
        """The rows a search term names; exact matches on indexed columns only."""
        raise NotImplementedError

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        term = search_term.strip()
        if not term:
            return queryset, False
        return queryset.filter(self.search_condition(term)), False


def known_values_filter(
    field: str,
    title: str,
    values: Callable[[HttpRequest], Iterable[str]],
    said: Callable[[str], str] = str,
) -> type[admin.SimpleListFilter]:
    """A list filter whose choices come from a known list, not from SELECT DISTINCT over the
    whole table (what Django's filter for a plain column does: a scan of every row). The
    request is passed so the choices can leave out what this person may not see; `said`
    gives each value's words (a code's label), the value itself stays in the address."""

    def lookups(self: Any, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(value, said(value)) for value in values(request)]

    def queryset(self: Any, request: HttpRequest, rows: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return rows.filter(**{field: value}) if value else rows

    namespace = {
        "title": title,
        "parameter_name": field,
        "lookups": lookups,
        "queryset": queryset,
        "__module__": __name__,
    }
    return type(f"{field.title().replace('_', '')}Filter", (admin.SimpleListFilter,), namespace)


def distinct_by_index(rows: QuerySet[Any], field: str) -> list[str]:
    """The distinct values of a column that leads an index, by skipping through the index
    (a recursive "loose index scan"): one index probe per value, not a read of every row."""
    connection = connections[rows.db]
    quote = connection.ops.quote_name
    table = quote(rows.model._meta.db_table)
    column = quote(rows.model._meta.get_field(field).column)
    sql = (
        f"WITH RECURSIVE seen (value) AS ("  # noqa: S608 - names only, no values
        f" (SELECT {column} FROM {table} ORDER BY {column} LIMIT 1)"
        f" UNION ALL SELECT (SELECT {column} FROM {table} WHERE {column} > seen.value"
        f" ORDER BY {column} LIMIT 1) FROM seen WHERE seen.value IS NOT NULL"
        f") SELECT value FROM seen WHERE value IS NOT NULL"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return [value for (value,) in cursor.fetchall()]
