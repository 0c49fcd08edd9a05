"""Template filters of the reports pages: the same wording as the charts' tooltips."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

from django import template

from console import charts
from reports.selectors import ErrorRate, Share, Week

register = template.Library()


@register.filter
def percent(fraction: float | None) -> str:
    return charts.percent(fraction)


@register.filter
def duration(seconds: float | None) -> str:
    return charts.duration(seconds)


@register.filter
def age(delta: timedelta) -> str:
    return charts.age(delta)


@register.filter
def milliseconds(value: float | None) -> str:
    return charts.milliseconds(value)


@register.filter
def points_per_week(slope: float | None) -> str:
    return charts.points_per_week(slope)


@register.filter
def share(value: Share) -> str:
    return charts.share_text(value)


@register.filter
def route_share(week: Week, route: str) -> str:
    return charts.share_text(week.route(route))


@register.filter
def lookup(mapping: dict[str, object], key: str) -> object:
    return mapping.get(key)


@register.filter
def error_rate(errors: ErrorRate | None) -> str:
    return charts.error_rate_text(errors)


@register.filter
def money(value: Decimal | None) -> str:
    """An amount of the price table's money: four decimals below one (a call costs fractions
    of a cent), two above; a dash when there is nothing to divide by."""
    if value is None:
        return "—"
    return f"{value:,.4f}" if abs(value) < 1 else f"{value:,.2f}"


@register.filter
def thousands(value: int) -> str:
    return f"{value:,}"
