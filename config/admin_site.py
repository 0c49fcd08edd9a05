"""The admin site: every change list, ours and third-party apps', turns filter values that
cannot be queried into Django's own "invalid lookup" redirect (`?e=1`) instead of a 500.

Django already does that for most bad filters, but not for all: a date-hierarchy year near
9999 overflows while the page computes the year's end, a 23-digit year overflows when the
query is compiled, and a value the database cannot hold fails only when the rows are
counted. Each of those is the same mistake (a filter value the query cannot carry), so each
gets the same answer. So does a date-hierarchy part that is not ASCII digits: Django reads
'\u00b2' as a ValueError but an Arabic-Indic digit as the year, month or day it looks like
(core.inputs.parse_number).
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import ERROR_FLAG, ChangeList
from django.db import DataError, router, transaction
from django.http import HttpRequest, HttpResponse

from core.inputs import parse_number

UNQUERYABLE = (ValueError, OverflowError, DataError)


DATE_PARTS = ("year", "month", "day")


class RobustChangeListBehaviour(ChangeList):
    def get_filters(self, request: HttpRequest) -> Any:
        self.check_date_parts(request)
        try:
            return super().get_filters(request)
        except UNQUERYABLE as exc:  # e.g. ?created_at__year=9999: its end is past year 9999
            raise IncorrectLookupParameters(exc) from exc

    def check_date_parts(self, request: HttpRequest) -> None:
        """The date hierarchy's year, month and day are numbers read as every number from a
        request is: ASCII digits, or the filter is refused."""
        if not self.date_hierarchy:
            return
        for part in DATE_PARTS:
            for value in request.GET.getlist(f"{self.date_hierarchy}__{part}"):
                if parse_number(value) is None:
                    raise IncorrectLookupParameters(f"{part} is not a number: {value!r}")

    def get_results(self, request: HttpRequest) -> None:
        # The first queries run here (the counts). A savepoint keeps a failed one from
        # spoiling a surrounding transaction.
        try:
            with transaction.atomic(using=router.db_for_read(self.model)):
                super().get_results(request)
        except UNQUERYABLE as exc:
            raise IncorrectLookupParameters(exc) from exc


_ROBUST: dict[type[ChangeList], type[ChangeList]] = {}


def robust(changelist: type[ChangeList]) -> type[ChangeList]:
    """The change list class with the behaviour above (keeping any customisation of it)."""
    if issubclass(changelist, RobustChangeListBehaviour):
        return changelist
    if changelist not in _ROBUST:
        name = f"Robust{changelist.__name__}"
        _ROBUST[changelist] = type(name, (RobustChangeListBehaviour, changelist), {})
    return _ROBUST[changelist]


class RobustChangeListAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return robust(super().get_changelist(request, **kwargs))

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        # Django drops the filters it could not apply and adds ?e=1, but says nothing.
        if request.method == "GET" and request.GET.get(ERROR_FLAG) == "1":
            self.message_user(
                request,
                "The filters in the address could not be applied (a value out of range or "
                "not of the right kind), so all rows are shown.",
                messages.WARNING,
            )
        return super().changelist_view(request, extra_context)


class GatehouseAdminSite(admin.AdminSite):
    """The default admin site: each registered admin gets the robust change list."""

    def register(self, model_or_iterable: Any, admin_class: Any = None, **options: Any) -> None:
        base = admin_class or admin.ModelAdmin
        if not issubclass(base, RobustChangeListAdmin):
            namespace = {"__module__": base.__module__, "__qualname__": base.__qualname__}
            base = type(base.__name__, (RobustChangeListAdmin, base), namespace)
        super().register(model_or_iterable, base, **options)
