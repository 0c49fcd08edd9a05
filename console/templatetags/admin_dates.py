"""A date hierarchy for change lists of millions of rows.

Django's date hierarchy finds which years, months or days have rows with SELECT DISTINCT
over every row of the period (a read of the whole table at the top level). This one asks
only for the first and the last date (MIN and MAX: two probes of the column's index) and
offers every year, month or day between them; one that turns out empty shows no rows.
The links and the bounded ranges they filter on are Django's own.
"""

from __future__ import annotations

import datetime
from typing import Any

from django import template
from django.contrib.admin.templatetags.base import InclusionAdminNode
from django.contrib.admin.views.main import ChangeList
from django.db.models import Max, Min
from django.template.base import Parser, Token
from django.utils import formats, timezone
from django.utils.text import capfirst
from django.utils.translation import gettext as _

register = template.Library()


def _bounds(cl: ChangeList, field: str) -> tuple[datetime.date, datetime.date] | None:
    found = cl.queryset.aggregate(first=Min(field), last=Max(field))
    first, last = found["first"], found["last"]
    if first is None or last is None:
        return None
    if isinstance(first, datetime.datetime) and timezone.is_aware(first):
        first, last = timezone.localtime(first), timezone.localtime(last)
    return first, last


def _choice(link: str, title: str) -> dict[str, str]:
    return {"link": link, "title": title}


def indexed_date_hierarchy(cl: ChangeList) -> dict[str, Any]:
    field = cl.date_hierarchy
    if not field:
        return {"show": False}
    keys = {part: f"{field}__{part}" for part in ("year", "month", "day")}
    year, month, day = (cl.params.get(keys[p]) for p in ("year", "month", "day"))

    def link(filters: dict[str, Any]) -> str:
        return str(cl.get_query_string(filters, [f"{field}__"]))

    if year and month and day:  # ASCII digits (config.admin_site) that Django filtered on
        chosen = datetime.date(int(year), int(month), int(day))
        back = link({keys["year"]: year, keys["month"]: month})
        return {
            "show": True,
            "back": {"link": back, "title": formats.date_format(chosen, "YEAR_MONTH_FORMAT")},
            "choices": [{"title": capfirst(formats.date_format(chosen, "MONTH_DAY_FORMAT"))}],
        }
    bounds = _bounds(cl, field)
    if bounds is None:
        return {"show": True, "back": None, "choices": []}
    first, last = bounds
    if year and month:
        days = range(first.day, last.day + 1)
        return {
            "show": True,
            "back": {"link": link({keys["year"]: year}), "title": str(year)},
            "choices": [
                _choice(
                    link({keys["year"]: year, keys["month"]: month, keys["day"]: d}),
                    capfirst(formats.date_format(first.replace(day=d), "MONTH_DAY_FORMAT")),
                )
                for d in days
            ],
        }
    if year or first.year == last.year:
        shown_year = int(year) if year else first.year
        return {
            "show": True,
            "back": {"link": link({}), "title": _("All dates")},
            "choices": [
                _choice(
                    link({keys["year"]: shown_year, keys["month"]: m}),
                    capfirst(
                        formats.date_format(datetime.date(shown_year, m, 1), "YEAR_MONTH_FORMAT")
                    ),
                )
                for m in range(first.month, last.month + 1)
            ],
        }
    return {
        "show": True,
        "back": None,
        "choices": [
            _choice(link({keys["year"]: str(y)}), str(y)) for y in range(first.year, last.year + 1)
        ],
    }


@register.tag(name="indexed_date_hierarchy")
def indexed_date_hierarchy_tag(parser: Parser, token: Token) -> InclusionAdminNode:
    return InclusionAdminNode(
        parser,
        token,
        func=indexed_date_hierarchy,
        template_name="date_hierarchy.html",
        takes_context=False,
    )
