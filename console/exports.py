"""Each panel's table as CSV rows: the numbers of the page, unformatted.

Headers are plain words. A column that holds a code (a stage, a reason, a route, an effect)
holds its label from console.vocabulary, and the column right after it, headed "... code",
holds the code: a spreadsheet reads in words, a script still matches codes."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from console import vocabulary
from console.vocabulary import Kind
from reports import selectors
from reports.selectors import Period, Rates, Share, Spend

CSV_PENDING_LIMIT = 1000
# A spreadsheet runs a cell that starts with one of these as a formula.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
NUMBER = re.compile(r"[+-]?\d+(\.\d+)?")


def spreadsheet_safe(value: str | int) -> str | int:
    """A text cell that a spreadsheet would run as a formula (an event id such as
    `=HYPERLINK(...)`, say) is written with a leading apostrophe, so it stays text. Numbers,
    negative ones included, are left as they are."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS) and not NUMBER.fullmatch(value):
        return "'" + value
    return value


@dataclass(frozen=True)
class Table:
    header: list[str]
    rows: list[list[str | int]]


def said(kind: Kind, code: str) -> list[str | int]:
    """The two cells of a coded column: its label, then its code."""
    return [vocabulary.label(kind, code), code]


def coded(heading: str) -> list[str]:
    """The two headers of a coded column: "Stage", "Stage code"."""
    return [heading, f"{heading} code"]


def _rate(value: float | None) -> str:
    return "" if value is None else f"{value:.4f}"


def _seconds(value: float | None) -> str:
    return "" if value is None else f"{value:.0f}"


def _ms(value: float | None) -> str:
    return "" if value is None else f"{value:.1f}"


def _route(route: str) -> list[str | int]:
    # Every route together is "all" in the code column, as before the labels.
    return ["All runs", "all"] if route == "all" else said(Kind.ROUTE, route)


def _share_row(start: datetime, route: str, share: Share) -> list[str | int]:
    return [
        start.date().isoformat(),
        *_route(route),
        share.runs,
        share.completed,
        share.straight_through,
        _rate(share.rate),
    ]


def straight_through(period: Period, now: datetime) -> Table:
    panel = selectors.straight_through(period=period)
    rows = []
    for week in panel.weeks:
        rows.append(_share_row(week.start, "all", week.overall))
        rows += [_share_row(week.start, route, week.route(route)) for route in panel.routes]
    header = ["Week starting", *coded("Route"), "Runs", "Completed", "Straight through", "Rate"]
    return Table(header, rows)


def handoffs(period: Period, now: datetime) -> Table:
    rows: list[list[str | int]] = [
        [
            *said(Kind.STAGE, h.stage),
            *said(Kind.STAGE_OUTCOME, h.outcome),
            h.runs,
            h.previous,
            h.change,
        ]
        for h in selectors.handoffs(period=period)
    ]
    header = [*coded("Stage"), *coded("Reason"), "Runs", "Runs in the previous period", "Change"]
    return Table(header, rows)


def approval_waits(period: Period, now: datetime) -> Table:
    panel = selectors.approval_waits(period=period, now=now, limit=0)
    rows: list[list[str | int]] = [
        [
            w.group or "All groups",
            w.decided,
            _seconds(w.median),
            _seconds(w.p90),
            _seconds(w.longest),
        ]
        for w in [panel.overall, *panel.groups]
    ]
    header = [
        "Group",
        "Decided",
        "Median wait (seconds)",
        "90th percentile wait (seconds)",
        "Longest wait (seconds)",
    ]
    return Table(header, rows)


def pending_approvals(period: Period, now: datetime) -> Table:
    panel = selectors.approval_waits(period=period, now=now, limit=CSV_PENDING_LIMIT)
    rows: list[list[str | int]] = [
        [
            p.request_id,
            p.run_id,
            p.event_id,
            *said(Kind.EFFECT, p.effect),
            p.group,
            p.owner,
            p.created_at.isoformat(),
            f"{p.age.total_seconds():.0f}",
            "yes" if p.escalated else "no",
        ]
        for p in panel.pending
    ]
    header = [
        "Request",
        "Run",
        "Event id",
        *coded("Effect"),
        "Group",
        "Owner",
        "Waiting since",
        "Age (seconds)",
        "Escalated",
    ]
    return Table(header, rows)


def _rates_row(rates: Rates) -> list[str | int]:
    return [
        rates.runs,
        rates.completed,
        rates.straight_through,
        rates.approval,
        rates.blocked,
        _rate(rates.completed_rate),
        _rate(rates.straight_through_rate),
        _rate(rates.approval_rate),
        _rate(rates.blocked_rate),
    ]


def rule_changes(period: Period, now: datetime) -> Table:
    rows = []
    for change in selectors.rule_changes(period=period, now=now):
        about: list[str | int] = [
            change.version,
            change.previous_version,
            change.activated_at.isoformat(),
            f"{change.window.total_seconds():.0f}",
        ]
        rows.append([*about, "before", *_rates_row(change.before)])
        rows.append([*about, "after", *_rates_row(change.after)])
    header = [
        "Version",
        "Previous version",
        "Activated at",
        "Window (seconds)",
        "Before or after",
        "Runs",
        "Completed",
        "Straight through",
        "Sent for approval",
        "Blocked",
        "Completion rate",
        "Straight-through rate",
        "Approval rate",
        "Block rate",
    ]
    return Table(header, rows)


def stage_durations(period: Period, now: datetime) -> Table:
    rows: list[list[str | int]] = [
        [*said(Kind.STAGE, s.stage), s.attempts, _ms(s.median_ms), _ms(s.p95_ms)]
        for s in selectors.stage_durations(period=period)
    ]
    header = [*coded("Stage"), "Attempts", "Median (ms)", "95th percentile (ms)"]
    return Table(header, rows)


def measured_quality(period: Period, now: datetime) -> Table:
    quality = selectors.measured_quality(period=period)
    rows: list[list[str | int]] = []
    for week in quality.weeks:
        low, high = week.errors.interval or (None, None)
        route = ["All routes", "all"] if not week.route else said(Kind.ROUTE, week.route)
        rows.append(
            [
                week.start.date().isoformat(),
                *(spreadsheet_safe(cell) for cell in route),
                week.errors.reviewed,
                week.errors.wrong,
                _rate(week.errors.rate),
                _rate(low),
                _rate(high),
            ]
        )
    header = [
        "Week starting",
        *coded("Route"),
        "Reviewed",
        "Read wrong",
        "Error rate",
        "95% interval low",
        "95% interval high",
    ]
    return Table(header, rows)


def model_spend(period: Period, now: datetime) -> Table:
    """One row per day, route and classifier version: the "By" column says which."""
    spend = selectors.model_spend(period=period)
    rows: list[list[str | int]] = []

    def row(by: str, name: list[str | int], s: Spend) -> list[str | int]:
        return [
            by,
            *(spreadsheet_safe(cell) for cell in name),
            s.runs,
            s.straight_through,
            _rate(s.rate),
            s.prompt_tokens,
            s.completion_tokens,
            f"{s.cost:f}",
        ]

    rows.append(row("period", ["All runs", "all"], spend.total))
    for start, s in spend.days:
        rows.append(row("day", [start.date().isoformat(), ""], s))
    for route, s in spend.routes:
        rows.append(row("route", said(Kind.ROUTE, route) if route else ["No route", ""], s))
    for version, s in spend.versions:
        rows.append(row("classifier version", [version, version], s))
    header = [
        "By",
        "Name",
        "Code",
        "Runs",
        "Straight through",
        "Straight-through rate",
        "Prompt tokens",
        "Completion tokens",
        "Cost",
    ]
    return Table(header, rows)


EXPORTS: dict[str, Callable[[Period, datetime], Table]] = {
    "straight-through": straight_through,
    "handoffs": handoffs,
    "approval-waits": approval_waits,
    "pending-approvals": pending_approvals,
    "rule-changes": rule_changes,
    "stage-durations": stage_durations,
    "measured-quality": measured_quality,
    "model-spend": model_spend,
}
