"""The run's state machine as a picture, read from the code of `Run`.

The nodes are the members of `State`; the edges are the transitions django-fsm registered on
`Run.state`, one per (source, target, method), so a transition added, moved or removed in
automation/runs/models.py changes the picture with it. Only where each state is drawn is chosen
here (`LAYOUT`): a state without a place is still drawn, in a row of its own under the rest.

A transition that leaves every unfinished state (`fail`) is drawn once, from the tinted
region of unfinished states, instead of as one arrow per state. The same graph is written as
a Mermaid `stateDiagram-v2` for docs/recovery.md (`manage.py state_diagram`).

`run_path` reads where one run went from its audit rows (every transition writes one, named
after the method: `run.<name>`); `svg(path)` draws the machine with that path highlighted.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import cast

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from django_fsm import GET_STATE, RETURN_VALUE, FSMField
from django_fsm import Transition as FSMTransition

from automation.models import NON_TERMINAL_STATES, TERMINAL_STATES, AuditEvent, Run, State
from console import vocabulary

ANY_STATE = "*"  # django-fsm's source for "from any state"
ANY_OTHER_STATE = "+"  # and for "from any state but the target"


@dataclass(frozen=True, order=True)
class Edge:
    source: str
    target: str
    transition: str


@dataclass(frozen=True)
class Step:
    """One transition a run made, as its audit row recorded it."""

    source: str
    target: str
    transition: str


@dataclass(frozen=True)
class RunPath:
    """Where a run went: the states it entered in order, the moves, and where it is now."""

    states: tuple[str, ...]
    steps: tuple[Step, ...]
    current: str

    @property
    def visited(self) -> frozenset[str]:
        return frozenset(self.states) | {self.current}


@dataclass(frozen=True)
class StateRow:
    """One state as the About page's table shows it."""

    code: str
    label: str
    explanation: str
    terminal: bool
    actions: tuple[tuple[str, str], ...]  # (action label, label of the state it leads to)


# --- the graph, from the code -------------------------------------------------------------


def _fsm_transitions() -> list[FSMTransition]:
    field = cast(FSMField, Run._meta.get_field("state"))
    return list(field.get_all_transitions(Run))


def _sources(source: str) -> list[str]:
    if source in (ANY_STATE, ANY_OTHER_STATE):
        return [s.value for s in State]
    return [str(source)]


def _targets(t: FSMTransition, source: str) -> list[str]:
    """Where the transition may lead from `source`: its target; a target decided when it runs
    (GET_STATE, RETURN_VALUE) may be any state it names; None means it stays."""
    if isinstance(t.target, GET_STATE | RETURN_VALUE):
        return [str(s) for s in t.target.allowed_states]
    return [source if t.target is None else str(t.target)]


@cache
def edges() -> tuple[Edge, ...]:
    """Every (source, target, transition) of Run.state, in the order of the State enum."""
    found = set()
    for t in _fsm_transitions():
        for source in _sources(str(t.source)):
            for target in _targets(t, source):
                if not (t.source == ANY_OTHER_STATE and source == target):
                    found.add(Edge(source, target, t.name))
    order = {s.value: i for i, s in enumerate(State)}
    return tuple(sorted(found, key=lambda e: (order[e.source], order[e.target], e.transition)))


@cache
def decided_when_run() -> frozenset[str]:
    """Transitions whose target the code decides when it runs (GET_STATE, RETURN_VALUE)."""
    return frozenset(
        t.name for t in _fsm_transitions() if isinstance(t.target, GET_STATE | RETURN_VALUE)
    )


@cache
def transition_labels() -> dict[str, str]:
    """A transition's words: the label its decorator gives (`custom`), else its name as words."""
    return {
        t.name: str(t.custom.get("label") or vocabulary.humanize(t.name))
        for t in _fsm_transitions()
    }


def states() -> list[str]:
    return [s.value for s in State]


def initial_state() -> str:
    return str(Run._meta.get_field("state").default)


def from_any_unfinished() -> frozenset[str]:
    """Transitions that leave every unfinished state (`fail`): drawn once, not per state."""
    unfinished = {s.value for s in NON_TERMINAL_STATES}
    sources: dict[str, set[str]] = {}
    for edge in edges():
        sources.setdefault(edge.transition, set()).add(edge.source)
    return frozenset(name for name, found in sources.items() if found == unfinished)


def drawn_edges() -> tuple[Edge, ...]:
    """The edges a picture shows: all of them, except that a transition whose target is
    decided when it runs is shown staying put where it may (a loop), not as an arrow to each
    state it might pick (`replay` of a finished run would otherwise join every finished state
    to every other)."""
    found = set(edges())
    return tuple(
        e
        for e in edges()
        if e.transition not in decided_when_run()
        or e.source == e.target
        or Edge(e.source, e.source, e.transition) not in found
    )


def state_rows() -> list[StateRow]:
    return [
        StateRow(
            code=code,
            label=vocabulary.label("state", code),
            explanation=vocabulary.explain("state", code),
            terminal=code in TERMINAL_STATES,
            actions=_actions_out(code),
        )
        for code in states()
    ]


def _actions_out(code: str) -> tuple[tuple[str, str], ...]:
    """Each transition out of a state, with the label of where it leads ("A or B" when the
    code picks the state when it runs)."""
    leads: dict[str, list[str]] = {}
    for edge in edges():
        if edge.source == code:
            leads.setdefault(edge.transition, []).append(vocabulary.label("state", edge.target))
    labels = transition_labels()
    return tuple((labels[name], _either(targets)) for name, targets in leads.items())


def _either(words: list[str]) -> str:
    if len(words) == 1:
        return words[0]
    return f"{', '.join(words[:-1])} or {words[-1]}, as decided when it runs"


# --- one run's path -----------------------------------------------------------------------


def run_path(run: Run, history: Iterable[AuditEvent] | None = None) -> RunPath:
    """The states `run` went through, from its audit rows in order (`history`: the run page's
    rows, already read; without them one query reads the transition rows)."""
    actions = {f"run.{name}" for name in transition_labels()}
    if history is None:
        history = run.audit_events.filter(action__in=actions).order_by("created_at", "pk")
    steps = tuple(
        Step(event.from_state, event.to_state, event.action.removeprefix("run."))
        for event in history
        if event.action in actions
    )
    entered = [steps[0].source if steps else run.state]
    for step in steps:
        if step.target != entered[-1]:
            entered.append(step.target)
    return RunPath(states=tuple(entered), steps=steps, current=run.state)


def run_diagram(run: Run, history: Iterable[AuditEvent] | None = None) -> SafeString:
    """The state machine as SVG with the path of `run` highlighted."""
    return svg(run_path(run, history), title=f"The path of run #{run.pk}")


# --- Mermaid, for docs/recovery.md --------------------------------------------------------


def mermaid() -> str:
    """The drawn graph as a Mermaid stateDiagram-v2. The unfinished states are a composite
    state that `fail` leaves once, as the picture's tinted region; moves between the same two
    states share one arrow."""
    grouped = from_any_unfinished()
    unfinished = {s.value for s in NON_TERMINAL_STATES}
    labels = transition_labels()
    arrows: dict[tuple[str, str], list[str]] = {}
    for e in drawn_edges():
        if e.transition not in grouped:
            arrows.setdefault((e.source, e.target), []).append(labels[e.transition])
    inside = [pair for pair in arrows if grouped and set(pair) <= unfinished]
    lines = ["stateDiagram-v2"]
    lines += [f'    state "{vocabulary.label("state", s)}" as {s}' for s in states()]
    lines.append(f"    [*] --> {initial_state()}")
    if inside:
        lines.append('    state "Unfinished" as unfinished {')
        lines += [f"        {a} --> {b}: {' / '.join(arrows[a, b])}" for a, b in inside]
        lines.append("    }")
    lines += [
        f"    {a} --> {b}: {' / '.join(names)}"
        for (a, b), names in arrows.items()
        if (a, b) not in inside
    ]
    for name in sorted(grouped):
        target = next(e.target for e in edges() if e.transition == name)
        lines.append(f"    unfinished --> {target}: {labels[name]}")
    return "\n".join(lines)


# --- the picture --------------------------------------------------------------------------

# Where each state is drawn, as (column, row): the way most runs go along the middle row;
# approval above it, holds and failure below. Only positions are chosen here, never edges.
LAYOUT: dict[str, tuple[int, int]] = {
    State.RECEIVED: (0, 1),
    State.VALIDATED: (1, 1),
    State.NORMALIZED: (2, 1),
    State.ENRICHED: (3, 1),
    State.CLASSIFIED: (4, 1),
    State.EXECUTING: (5, 1),
    State.COMPLETED: (6, 1),
    State.BLOCKED: (4, 0),
    State.APPROVAL_REQUIRED: (5, 0),
    State.APPROVED: (6, 0),
    State.NEEDS_REVIEW: (4, 2),
    State.FAILED: (6, 2),
}
COLUMNS = 7
COL = 124
ROW = 100
NODE_W = 104
NODE_H = 54
LEFT = 12
TOP = 34
RIGHT = 40
BUS_ROOM = 34  # under the placed rows: the arrow from every unfinished state to `failed`
BUS_FROM = (1, 1)  # the unfinished cell that arrow leaves from (with nothing drawn under it)
LEGEND = 30
WRAP = 13  # characters on one line of a node's label

INK = "#1d2330"
MUTED = "#667085"
LINE = "#98a2b3"
ON = "#1f5fbf"
ON_FILL = "#e6eefb"
REGION = "#eef2f8"
BAD = "#b42318"


@dataclass(frozen=True)
class _Box:
    x: float  # centre
    y: float

    def border(self, dx: float, dy: float) -> tuple[float, float]:
        """Where the ray from the centre towards (dx, dy) leaves the box."""
        scale = min(
            (NODE_W / 2 + 2) / abs(dx) if dx else float("inf"),
            (NODE_H / 2 + 2) / abs(dy) if dy else float("inf"),
        )
        return self.x + dx * scale, self.y + dy * scale


def _cells() -> dict[str, tuple[int, int]]:
    """Every state's cell: its place in LAYOUT, or the next free cell of the extra rows."""
    cells = {s: LAYOUT[s] for s in states() if s in LAYOUT}
    first_extra = max(row for _, row in LAYOUT.values()) + 1
    unplaced = [s for s in states() if s not in LAYOUT]
    for i, s in enumerate(unplaced):
        cells[s] = (i % COLUMNS, first_extra + i // COLUMNS)
    return cells


def _placed_rows() -> int:
    return max(row for _, row in LAYOUT.values()) + 1


def _cell_top(row: int) -> float:
    return TOP + row * ROW + (BUS_ROOM if row >= _placed_rows() else 0)


def _box(cell: tuple[int, int]) -> _Box:
    column, row = cell
    return _Box(LEFT + column * COL + COL / 2, _cell_top(row) + ROW / 2)


def _n(value: float) -> str:
    return f"{value:.1f}".removesuffix(".0")


def svg(
    path: RunPath | None = None, *, title: str = "The run states", ids: str = "sc"
) -> SafeString:
    """The state machine as inline SVG; with `path`, that run's states and moves highlighted.

    `ids` prefixes the ids inside the picture, for a page that shows more than one.
    """
    if path is None:  # the page of every state: drawn as it is asked for
        width, height, description, body = _draw(None, ids)
    else:
        width, height, description, body = _picture(path, ids, vocabulary.words_version())
    return format_html(
        '<svg class="state-diagram" role="img" aria-labelledby="{ids}-title {ids}-desc" '
        'viewBox="0 0 {w} {h}" width="{w}" height="{h}" font-family="system-ui, sans-serif" '
        'xmlns="http://www.w3.org/2000/svg"><title id="{ids}-title">{title}</title>'
        '<desc id="{ids}-desc">{desc}</desc>{body}</svg>',
        ids=ids,
        w=_n(width),
        h=_n(height),
        title=title,
        desc=description,
        body=body,
    )


@lru_cache(maxsize=128)
def _picture(path: RunPath, ids: str, words: object) -> tuple[float, float, str, SafeString]:
    """The drawing of a path, in the words of a set of stored versions (`words`, part of the
    key only): the same for every run that went the same way, so drawn once per process."""
    return _draw(path, ids)


def _draw(path: RunPath | None, ids: str) -> tuple[float, float, str, SafeString]:
    cells = _cells()
    rows = max(row for _, row in cells.values()) + 1
    height = _cell_top(rows) + (BUS_ROOM if rows == _placed_rows() else 0)
    height += LEGEND if path else 0
    width = LEFT + COLUMNS * COL + RIGHT
    parts = [
        _defs(ids),
        format_html('<rect width="{}" height="{}" fill="#fff"/>', _n(width), _n(height)),
        _region(cells),
        _edges(cells, path, ids),
        _fail_bus(cells, path, ids),
        _nodes(cells, path),
        _legend(height - LEGEND + 6) if path else "",
    ]
    body = mark_safe("".join(parts))  # noqa: S308 - each part is built by format_html
    return width, height, _description(path), body


def _description(path: RunPath | None) -> str:
    if path is None:
        return "Every state a run can be in and the moves between them."
    went = " → ".join(vocabulary.label("state", s) for s in path.states)
    return f"This run went {went}; it is now {vocabulary.label('state', path.current)}."


def _defs(ids: str) -> SafeString:
    markers = format_html_join(
        "",
        '<marker id="{}-{}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="{}" '
        'markerHeight="{}" markerUnits="userSpaceOnUse" orient="auto-start-reverse">'
        '<path d="M0,0 L10,5 L0,10 z" fill="{}"/></marker>',
        [(ids, "arrow", 8, 8, LINE), (ids, "arrow-on", 11, 11, ON), (ids, "arrow-fail", 8, 8, BAD)],
    )
    return format_html("<defs>{}</defs>", markers)


def _region(cells: dict[str, tuple[int, int]]) -> SafeString:
    """The unfinished states' cells, tinted: the region the `fail` arrow leaves from."""
    if not from_any_unfinished():
        return SafeString("")
    unfinished = [cells[s.value] for s in NON_TERMINAL_STATES]
    return format_html_join(
        "",
        '<rect class="unfinished" x="{}" y="{}" width="{}" height="{}" fill="{}" '
        'shape-rendering="crispEdges"/>',
        [
            (_n(LEFT + c * COL), _n(_cell_top(r)), COL, ROW, REGION)
            for c, r in sorted(set(unfinished))
        ],
    )


def _arrows() -> dict[tuple[str, str], list[str]]:
    """The arrows to draw, (source, target) to the transitions each stands for; those out of
    every unfinished state are left to `_fail_bus`."""
    grouped = from_any_unfinished()
    arrows: dict[tuple[str, str], list[str]] = {}
    for edge in drawn_edges():
        if edge.transition not in grouped:
            arrows.setdefault((edge.source, edge.target), []).append(edge.transition)
    return arrows


def _edges(cells: dict[str, tuple[int, int]], path: RunPath | None, ids: str) -> SafeString:
    arrows = _arrows()
    moved = {(s.source, s.target) for s in path.steps} if path else set()
    labels = transition_labels()
    dynamic = decided_when_run()
    drawn = []
    for (source, target), names in arrows.items():
        on = (source, target) in moved
        what = ", ".join(
            labels[n] + (" (where it ends is decided when it runs)" if n in dynamic else "")
            for n in names
        )
        tip = f"{vocabulary.label('state', source)} → {vocabulary.label('state', target)}: {what}"
        if source == target:
            shape = _loop(_box(cells[source]))
        else:
            both_ways = (target, source) in arrows
            shape = _line(_box(cells[source]), _box(cells[target]), 5 if both_ways else 0)
        drawn.append(
            format_html(
                '<g class="move{}" data-moves="{}"><title>{}</title><path d="{}" fill="none" '
                'stroke="{}" stroke-width="{}" marker-end="url(#{}-{})"/></g>',
                " traversed" if on else "",
                " ".join(names),
                tip,
                shape,
                ON if on else LINE,
                "2.6" if on else "1.3",
                ids,
                "arrow-on" if on else "arrow",
            )
        )
    return SafeString("".join(drawn))


def _line(a: _Box, b: _Box, offset: float) -> str:
    """A straight arrow between two boxes; `offset` moves it aside so a pair going both ways
    shows as two arrows (each to its own right)."""
    dx, dy = b.x - a.x, b.y - a.y
    length = (dx * dx + dy * dy) ** 0.5
    ox, oy = -dy / length * offset, dx / length * offset
    x1, y1 = a.border(dx, dy)
    x2, y2 = b.border(-dx, -dy)
    return f"M{_n(x1 + ox)},{_n(y1 + oy)} L{_n(x2 + ox)},{_n(y2 + oy)}"


def _loop(box: _Box) -> str:
    """A move that stays in its state: a loop over the box's top edge."""
    top = box.y - NODE_H / 2
    return (
        f"M{_n(box.x - 12)},{_n(top)} C{_n(box.x - 26)},{_n(top - 30)} "
        f"{_n(box.x + 26)},{_n(top - 30)} {_n(box.x + 12)},{_n(top - 2)}"
    )


def _fail_bus(cells: dict[str, tuple[int, int]], path: RunPath | None, ids: str) -> SafeString:
    """One arrow for a transition out of every unfinished state: from the tinted region, under
    the placed rows, up into its target."""
    grouped = from_any_unfinished()
    if not grouped:
        return SafeString("")
    target = next(e.target for e in edges() if e.transition in grouped)
    on = path is not None and any(s.transition in grouped for s in path.steps)
    start = _box(BUS_FROM)
    end = _box(cells[target])
    bus = _cell_top(_placed_rows()) + BUS_ROOM / 2
    what = " or ".join(transition_labels()[n] for n in sorted(grouped))
    return format_html(
        '<g class="move from-unfinished{}" data-moves="{}"><title>{}</title>'
        '<path d="M{},{} V{} H{} V{}" fill="none" stroke="{}" stroke-width="{}" '
        'stroke-dasharray="5 3" marker-end="url(#{}-{})"/>'
        '<text x="{}" y="{}" font-size="12" fill="{}">{}: from any unfinished (tinted) state'
        "</text></g>",
        " traversed" if on else "",
        " ".join(sorted(grouped)),
        f"Any unfinished state → {vocabulary.label('state', target)}: {what}",
        _n(start.x),
        _n(_cell_top(1) + ROW),
        _n(bus),
        _n(end.x),
        _n(end.y + NODE_H / 2 + 2),
        ON if on else BAD,
        "2.6" if on else "1.3",
        ids,
        "arrow-on" if on else "arrow-fail",
        _n(start.x + 8),
        _n(bus - 6),
        ON if on else BAD,
        what,
    )


def _nodes(cells: dict[str, tuple[int, int]], path: RunPath | None) -> SafeString:
    return SafeString("".join(_node(s, _box(cells[s]), path) for s in states()))


def _node(code: str, box: _Box, path: RunPath | None) -> SafeString:
    current = path is not None and code == path.current
    visited = path is not None and code in path.visited
    term = vocabulary.term("state", code)
    lines = textwrap.wrap(term.label, WRAP) or [term.label]
    first = box.y - (len(lines) * 15 + 12) / 2 + 12
    tspans = format_html_join(
        " ",  # a space between the lines: the label reads as words, not "Waiting forapproval"
        '<tspan x="{}" y="{}">{}</tspan>',
        [(_n(box.x), _n(first + i * 15), line) for i, line in enumerate(lines)],
    )
    classes = "state" + (" terminal" if code in TERMINAL_STATES else "")
    classes += (" visited" if visited else "") + (" current" if current else "")
    fill, stroke, ink, quiet = "#fff", LINE, INK, MUTED
    if visited:
        fill, stroke = ON_FILL, ON
    if current:
        fill, stroke, ink, quiet = ON, ON, "#fff", "#dbe6fb"
    return format_html(
        '<g class="{}" data-state="{}"{}><title>{}: {}</title>'
        '<rect x="{}" y="{}" width="{}" height="{}" rx="{}" fill="{}" stroke="{}" '
        'stroke-width="{}"/>'
        '<text class="label" text-anchor="middle" font-size="12.5" font-weight="600" '
        'fill="{}">{}</text>'
        '<text class="code" text-anchor="middle" x="{}" y="{}" font-size="9.5" '
        'font-family="ui-monospace, monospace" fill="{}">{}</text></g>',
        classes,
        code,
        mark_safe(' aria-current="step"') if current else "",
        term.label,
        term.explanation,
        _n(box.x - NODE_W / 2),
        _n(box.y - NODE_H / 2),
        NODE_W,
        NODE_H,
        NODE_H / 2 if code in TERMINAL_STATES else 6,
        fill,
        stroke,
        "2.5" if current or visited else "1.2",
        ink,
        tspans,
        _n(box.x),
        _n(first + len(lines) * 15 - 1),
        quiet,
        code,
    )


def _legend(y: float) -> SafeString:
    return format_html(
        '<g class="legend" font-size="12" fill="{ink}">'
        '<rect x="{x0}" y="{y}" width="16" height="12" rx="3" fill="{on}"/>'
        '<text x="{t0}" y="{ty}">Where the run is now</text>'
        '<rect x="{x1}" y="{y}" width="16" height="12" rx="3" fill="{on_fill}" stroke="{on}" '
        'stroke-width="2"/><text x="{t1}" y="{ty}">States it passed through</text>'
        '<path d="M{x2},{my} h28" stroke="{on}" stroke-width="2.6"/>'
        '<text x="{t2}" y="{ty}">Moves it made</text></g>',
        ink=INK,
        on=ON,
        on_fill=ON_FILL,
        y=_n(y),
        ty=_n(y + 10.5),
        my=_n(y + 6),
        x0=LEFT,
        t0=LEFT + 22,
        x1=LEFT + 180,
        t1=LEFT + 202,
        x2=LEFT + 390,
        t2=LEFT + 426,
    )
