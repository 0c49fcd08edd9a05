"""Charts as SVG drawn on the server: no script, no chart library, nothing from a CDN.

Each chart is an `<svg role="img">` with a `<title>` and a `<desc>` that name it and say what
it shows; every point and bar carries its own `<title>` with the exact number. The table under
each chart holds the same numbers for anyone who cannot see the picture. Colours come from
classes in gatehouse.css, so the page needs no inline style.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from console import vocabulary
from console.vocabulary import Kind
from reports.selectors import (
    ApprovalWaiting,
    ErrorRate,
    Handoff,
    ModelSpend,
    Quality,
    RuleChange,
    Share,
    StageDuration,
    StraightThrough,
)

WIDTH = 760
LEFT = 44
RIGHT = 16
TOP = 28
BOTTOM = 36
LINE_HEIGHT = 270
LABEL_WIDTH = 190
BAR = 12
BAR_GAP = 2
GROUP_GAP = 10
PALETTE = 6


# --- formatting shared with the templates ---------------------------------------------------


def percent(fraction: float | None) -> str:
    return "—" if fraction is None else f"{100 * fraction:.1f}%"


def duration(seconds: float | None) -> str:
    """A wait a person reads: 45 s, 30 min, 2 h 5 min, 3 d 4 h."""
    if seconds is None:
        return "—"
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes} min" + (f" {secs} s" if secs else "")
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h" + (f" {minutes} min" if minutes else "")
    days, hours = divmod(hours, 24)
    return f"{days} d" + (f" {hours} h" if hours else "")


def age(delta: timedelta) -> str:
    return duration(delta.total_seconds())


def milliseconds(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{number(value)} ms"


def number(value: float) -> str:
    """12 or 12.5: one decimal only when there is one."""
    rounded = round(value, 1)
    return f"{rounded:.0f}" if rounded == int(rounded) else f"{rounded:.1f}"


def points_per_week(slope: float | None) -> str:
    if slope is None:
        return "—"
    return f"{slope:+.1f} points a week"


# --- the two kinds of chart -----------------------------------------------------------------


@dataclass(frozen=True)
class Series:
    name: str
    values: Sequence[float | None]  # one per x slot; None: nothing to show there
    notes: Sequence[str] = ()  # the tooltip of each point
    strong: bool = False


@dataclass(frozen=True)
class Marker:
    label: str
    position: float  # 0 (left edge of the axis) .. 1 (right edge)
    note: str = ""


@dataclass(frozen=True)
class BarGroup:
    label: str
    values: Sequence[float | None]  # one per legend entry
    notes: Sequence[str] = field(default_factory=tuple)


def _join(parts: Sequence[str]) -> SafeString:
    """Concatenate pieces made by format_html (already escaped) into one safe string."""
    return format_html_join("", "{}", ((part,) for part in parts))


def _svg(chart_id: str, title: str, description: str, height: int, body: SafeString) -> SafeString:
    return format_html(
        '<svg class="chart" role="img" viewBox="0 0 {} {}" aria-labelledby="{}-title {}-desc" '
        'data-testid="chart-{}"><title id="{}-title">{}</title><desc id="{}-desc">{}</desc>'
        "{}</svg>",
        WIDTH,
        height,
        chart_id,
        chart_id,
        chart_id,
        chart_id,
        title,
        chart_id,
        description,
        body,
    )


def _empty(height: int, text: str) -> SafeString:
    return format_html(
        '<text class="empty-note" x="{}" y="{}" text-anchor="middle">{}</text>',
        WIDTH // 2,
        height // 2,
        text,
    )


def legend(names: Sequence[str]) -> SafeString:
    """The key of a chart, as HTML under it (same colour classes as the SVG)."""
    items = format_html_join(
        "",
        '<li><span class="swatch c{}" aria-hidden="true"></span>{}</li>',
        ((i % PALETTE, name) for i, name in enumerate(names)),
    )
    return format_html('<ul class="legend">{}</ul>', items)


def line_chart(
    *,
    chart_id: str,
    title: str,
    description: str,
    labels: Sequence[str],
    series: Sequence[Series],
    markers: Sequence[Marker] = (),
    top: float = 100.0,
    unit: str = "%",
) -> SafeString:
    """Lines over equal slots (weeks), a 0..top axis, and dashed vertical event markers."""
    height = LINE_HEIGHT
    plot_w, plot_h = WIDTH - LEFT - RIGHT, height - TOP - BOTTOM
    slot = plot_w / max(len(labels), 1)

    def x(i: float) -> float:
        return LEFT + (i + 0.5) * slot

    def y(value: float) -> float:
        return TOP + plot_h * (1 - value / top)

    parts: list[SafeString] = [_y_axis(y, top, unit), _x_labels(labels, x, height)]
    parts += [_marker(m, LEFT + m.position * plot_w, height) for m in markers]
    parts += [_line(i, s, x, y) for i, s in enumerate(series)]
    if not any(v is not None for s in series for v in s.values):
        parts.append(_empty(height, "No runs in these weeks"))
    return _svg(chart_id, title, description, height, _join(parts))


def _y_axis(y: Callable[[float], float], top: float, unit: str) -> SafeString:
    ticks = [top * i / 4 for i in range(5)]
    return _join(
        [
            format_html(
                '<line class="grid" x1="{}" x2="{}" y1="{}" y2="{}"/>'
                '<text class="tick" x="{}" y="{}" text-anchor="end">{}{}</text>',
                LEFT,
                WIDTH - RIGHT,
                f"{y(t):.1f}",
                f"{y(t):.1f}",
                LEFT - 6,
                f"{y(t) + 4:.1f}",
                number(t),
                unit,
            )
            for t in ticks
        ]
    )


def _x_labels(labels: Sequence[str], x: Callable[[float], float], height: int) -> SafeString:
    return _join(
        [
            format_html(
                '<text class="tick" x="{}" y="{}" text-anchor="middle">{}</text>',
                f"{x(i):.1f}",
                height - BOTTOM + 16,
                label,
            )
            for i, label in enumerate(labels)
        ]
    )


def _marker(marker: Marker, at: float, height: int) -> SafeString:
    return format_html(
        '<g class="marker"><title>{}</title><line x1="{}" x2="{}" y1="{}" y2="{}"/>'
        '<text x="{}" y="{}" text-anchor="middle">{}</text></g>',
        marker.note or marker.label,
        f"{at:.1f}",
        f"{at:.1f}",
        TOP - 4,
        height - BOTTOM,
        f"{at:.1f}",
        TOP - 10,
        marker.label,
    )


def _line(
    index: int, series: Series, x: Callable[[float], float], y: Callable[[float], float]
) -> SafeString:
    colour = f"c{index % PALETTE}"
    weight = " strong" if series.strong else ""
    runs: list[list[str]] = [[]]
    dots = []
    for i, value in enumerate(series.values):
        if value is None:
            runs.append([])  # a week without runs breaks the line
            continue
        runs[-1].append(f"{x(i):.1f},{y(value):.1f}")
        note = series.notes[i] if i < len(series.notes) else ""
        dots.append(
            format_html(
                '<circle class="dot {}" cx="{}" cy="{}" r="3.5"><title>{}: {}</title></circle>',
                colour,
                f"{x(i):.1f}",
                f"{y(value):.1f}",
                series.name,
                note,
            )
        )
    lines = [
        format_html('<polyline class="line {}{}" points="{}"/>', colour, weight, " ".join(r))
        for r in runs
        if len(r) > 1
    ]
    return format_html(
        '<g class="series" aria-label="{}">{}{}</g>', series.name, _join(lines), _join(dots)
    )


def bar_chart(
    *,
    chart_id: str,
    title: str,
    description: str,
    groups: Sequence[BarGroup],
    fmt: Callable[[float | None], str],
    empty: str = "Nothing in this period",
) -> SafeString:
    """Horizontal bars, one group per row label and one bar per legend entry."""
    per_group = max((len(g.values) for g in groups), default=1)
    group_h = per_group * (BAR + BAR_GAP) + GROUP_GAP
    height = max(TOP + len(groups) * group_h + 8, 90)
    biggest = max((v for g in groups for v in g.values if v), default=0.0)
    scale = (WIDTH - LABEL_WIDTH - RIGHT - 70) / biggest if biggest else 0.0
    rows: list[SafeString] = [
        _bar_group(g, TOP + n * group_h, scale, fmt) for n, g in enumerate(groups)
    ]
    if not biggest:
        rows.append(_empty(height, empty))
    return _svg(chart_id, title, description, height, _join(rows))


def _bar_group(
    group: BarGroup, top: float, scale: float, fmt: Callable[[float | None], str]
) -> SafeString:
    parts = [
        format_html(
            '<text class="label" x="{}" y="{}" text-anchor="end">{}</text>',
            LABEL_WIDTH - 8,
            f"{top + BAR:.1f}",
            group.label,
        )
    ]
    for i, value in enumerate(group.values):
        y = top + i * (BAR + BAR_GAP)
        length = (value or 0) * scale
        note = group.notes[i] if i < len(group.notes) else fmt(value)
        parts.append(
            format_html(
                '<g><title>{}: {}</title><rect class="bar c{}" x="{}" y="{}" width="{}" '
                'height="{}"/><text class="value" x="{}" y="{}">{}</text></g>',
                group.label,
                note,
                i % PALETTE,
                LABEL_WIDTH,
                f"{y:.1f}",
                f"{max(length, 0.5 if value else 0):.1f}",
                BAR,
                f"{LABEL_WIDTH + length + 4:.1f}",
                f"{y + BAR - 2:.1f}",
                fmt(value),
            )
        )
    return _join(parts)


# --- the five panels ------------------------------------------------------------------------

ALL_RUNS = "All runs"


READ_WRONG = "Read wrong (QA)"


def route_label(route: str) -> str:
    """A route in words: `returns_desk` → "Returns desk"."""
    return vocabulary.label(Kind.ROUTE, route)


def straight_through_chart(panel: StraightThrough, quality: Quality | None = None) -> SafeString:
    span = panel.until - panel.since
    labels = [w.start.strftime("%m-%d") for w in panel.weeks]
    series = [
        Series(
            ALL_RUNS,
            [_pct(w.overall.rate) for w in panel.weeks],
            [share_text(w.overall) for w in panel.weeks],
            strong=True,
        )
    ]
    series += [
        Series(
            route_label(route),
            [_pct(w.route(route).rate) for w in panel.weeks],
            [share_text(w.route(route)) for w in panel.weeks],
        )
        for route in panel.routes
    ]
    if quality is not None and quality.weeks:
        # The measured error rate beside the rate: a rising rate is no gain if it rises too.
        wrong = [quality.overall(w.start) for w in panel.weeks]
        series.append(
            Series(
                READ_WRONG,
                [_pct(e.rate) if e else None for e in wrong],
                [error_rate_text(e) for e in wrong],
            )
        )
    markers = [
        Marker(
            a.version,
            (a.at - panel.since) / span,
            f"{a.version} activated {a.at:%Y-%m-%d %H:%M} UTC",
        )
        for a in panel.activations
    ]
    return line_chart(
        chart_id="straight-through",
        title="Straight-through rate per week",
        description=f"Weekly share of runs completed with no person involved, weeks starting "
        f"{labels[0]} to {labels[-1]}, overall and per route; dashed lines mark policy "
        f"activations. Trend: {points_per_week(panel.trend)}.",
        labels=labels,
        series=series,
        markers=markers,
    )


def _pct(rate: float | None) -> float | None:
    return None if rate is None else 100 * rate


def share_text(share: Share) -> str:
    """75.0% (3 of 4): the rate and what it is made of."""
    if not share.runs:
        return "no runs"
    return f"{percent(share.rate)} ({share.straight_through} of {share.runs})"


def handoffs_chart(panel: list[Handoff]) -> SafeString:
    groups = [
        BarGroup(handoff_text(h), [h.runs, h.previous]) for h in panel if h.runs or h.previous
    ]
    return bar_chart(
        chart_id="handoffs",
        title="Runs sent to a person, by stage and reason",
        description="Runs each stage handed to a person in this period and in the previous one "
        "of the same length, most first.",
        groups=groups,
        fmt=_count,
        empty="No run went to a person in these periods",
    )


def handoff_text(handoff: Handoff) -> str:
    """Read · Unusable reading: the stage and why it handed the run to a person, in words."""
    stage = vocabulary.label(Kind.STAGE, handoff.stage)
    return f"{stage} · {vocabulary.label(Kind.STAGE_OUTCOME, handoff.outcome)}"


def _count(value: float | None) -> str:
    return "0" if not value else f"{value:.0f}"


def approvals_chart(panel: ApprovalWaiting) -> SafeString:
    rows = [panel.overall, *panel.groups] if panel.overall.decided else []
    groups = [
        BarGroup(
            w.group or "all groups",
            [w.median, w.p90, w.longest],
            [
                f"median {duration(w.median)}",
                f"90th percentile {duration(w.p90)}",
                f"longest {duration(w.longest)}",
            ],
        )
        for w in rows
    ]
    return bar_chart(
        chart_id="approval-waits",
        title="Approval wait times",
        description="Median, 90th percentile and longest wait of the approvals decided in this "
        "period, for all groups and per group.",
        groups=groups,
        fmt=duration,
        empty="No approval was decided in this period",
    )


RULE_METRICS = (
    ("completion", "completed_rate"),
    ("straight-through", "straight_through_rate"),
    ("approval", "approval_rate"),
    ("blocked", "blocked_rate"),
)


def rule_changes_chart(panel: list[RuleChange]) -> SafeString:
    groups = [
        BarGroup(
            f"{change.version} · {label}",
            [_pct(getattr(change.before, attr)), _pct(getattr(change.after, attr))],
            [
                f"before {percent(getattr(change.before, attr))}",
                f"after {percent(getattr(change.after, attr))}",
            ],
        )
        for change in panel
        for label, attr in RULE_METRICS
    ]
    return bar_chart(
        chart_id="rule-changes",
        title="Rates before and after each policy activation",
        description="Completion, straight-through, approval and block rates of the runs received "
        "in equal windows before and after each activation in this period.",
        groups=groups,
        fmt=lambda v: "—" if v is None else f"{v:.1f}%",
        empty="No policy was activated in this period",
    )


def stages_chart(panel: list[StageDuration]) -> SafeString:
    groups = [
        BarGroup(vocabulary.label(Kind.STAGE, s.stage), [s.median_ms, s.p95_ms]) for s in panel
    ]
    return bar_chart(
        chart_id="stage-durations",
        title="Stage durations",
        description="Median and 95th percentile duration of each stage's attempts in this "
        "period, in milliseconds.",
        groups=groups,
        fmt=milliseconds,
        empty="No stage ran in this period",
    )


def error_rate_text(errors: ErrorRate | None) -> str:
    """ "4.0% (1.1%-13.5%, 50 reviewed)": a QA error rate with its 95% interval and sample."""
    if errors is None or not errors.reviewed:
        return "no review"
    low, high = errors.interval or (0.0, 0.0)
    interval = f"{percent(low)} to {percent(high)}"
    return f"{percent(errors.rate)} ({interval}, {errors.reviewed} reviewed)"


def quality_chart(quality: Quality) -> SafeString:
    """The weekly error rate of reviewed QA samples, over all routes and per route."""
    starts = sorted({w.start for w in quality.weeks})
    if not starts:
        return SafeString("")
    routes = sorted({w.route for w in quality.weeks if w.route})
    cells = {(w.start, w.route): w.errors for w in quality.weeks}
    series = [
        Series(
            route_label(name) if name else "All routes",
            [_pct(cells[(s, name)].rate) if (s, name) in cells else None for s in starts],
            [error_rate_text(cells.get((s, name))) for s in starts],
            strong=not name,
        )
        for name in ["", *routes]
    ]
    top = max((v for line in series for v in line.values if v is not None), default=0.0)
    return line_chart(
        chart_id="measured-quality",
        title="Straight-through runs read wrong, per week",
        description="Weekly share of reviewed QA samples whose reading a person corrected, "
        "over all routes and per route.",
        labels=[s.strftime("%m-%d") for s in starts],
        series=series,
        top=max(10.0, min(100.0, 10 * math.ceil(top / 10))),
    )


def spend_chart(panel: ModelSpend) -> SafeString:
    groups = [
        BarGroup(
            route_label(route) if route else "No route yet",
            [float(spent.cost)],
            [f"{spent.cost:.4f} for {spent.runs} runs, {percent(spent.rate)} straight through"],
        )
        for route, spent in panel.routes
    ]
    return bar_chart(
        chart_id="model-spend",
        title="What reading cost, by route",
        description="The cost of the classifier calls of the runs received in this period, by "
        "the route policy gave them, most first.",
        groups=groups,
        fmt=lambda value: "0" if not value else f"{value:.4f}",
        empty="No model call was priced in this period",
    )
