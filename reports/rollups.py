"""Run rollups: how many runs each hour (and each day) received, by route, state and outcome,
and whether a person had a hand in them. The straight-through panel, the rule-change rates and
/metrics sum these rows instead of counting runs, so their cost follows the hours asked for,
not the history.

How they are kept: an incremental job, not a write in the run engine's transaction.
- A run's figures change long after it finishes: an approval is asked or decided later, a
  person corrects, retries, replays or re-decides it. A transactional hook would have to sit
  in every service that writes any of those; the job reads one change feed instead.
- The engine is the hot path: an upsert per finished run is one more statement per run, and
  every run finishing in the same hour and route updates the same rollup row, a lock that
  would serialise the workers. The job pays once a minute, off the engine's path.
- The change feed is the ids of the four tables that can change a run's figures: runs, the
  audit trail (every transition of a run writes one, conventions 2 and 3), approval requests
  and recovery actions. `RollupMark` keeps the highest id folded in for each. The job
  recomputes whole hours from the raw rows (delete, then insert), then their days from the
  hours, so running it twice, or after a day of downtime, gives the same rows.
- Readers are never stale: the hours of runs named by a row above a mark are counted from the
  raw rows at read time (an index range on the primary keys finds them), every other hour
  from the rollup: whole days from the day rows, the other hours from the hour rows. With no
  mark yet, everything is counted raw.
- Ids are handed out before commit, so a row with a lower id can commit after one with a
  higher id. The job therefore moves a mark only up to the newest row written more than LAG
  ago: a transaction that lasts longer than LAG could be missed (ours last milliseconds).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.db.models import (
    Aggregate,
    BooleanField,
    CharField,
    Count,
    Exists,
    ExpressionWrapper,
    F,
    Model,
    OuterRef,
    Q,
    QuerySet,
    Sum,
    Value,
)
from django.db.models.functions import TruncDay, TruncHour
from django.utils import timezone

from approvals.models import ApprovalRequest
from audit.models import AuditAction, AuditEvent
from automation.models import EffectAttempt, RecoveryAction, RecoveryKind, Run
from reports import histograms
from reports.models import DeliveryTotal, RollupMark, RunCounts, RunDay, RunHour, RunTotal
from reports.spans import (
    DAY,
    HOUR,
    Span,
    clean_hours,
    floor_day,
    floor_hour,
    merge,
    minus,
    segment,
    segments_of,
    whole_days,
    within,
)

LAG = timedelta(minutes=5)
# Rebuilds insert a week of hours at a time: memory stays bounded whatever the history.
REBUILD_CHUNK = timedelta(days=7)

# Recovery actions that change what happens to a run. Claiming, assigning and releasing a
# queue item only say who looks at it: a run that was merely claimed can still go straight
# through.
TOUCHING_RECOVERY = (
    RecoveryKind.CORRECT,
    RecoveryKind.RETRY,
    RecoveryKind.RESUME,
    RecoveryKind.REPLAY,
    RecoveryKind.RESOLVE,
    RecoveryKind.ABANDON,
)
# Transitions a person makes, named on the audit trail with their actor: a correction or a
# resume, a retry, a re-decision, a resolution by hand, a replay closing the
# original. (A retry of a held effect is a RecoveryAction, like every retry.)
PERSON_MOVES = (
    AuditAction.RUN_CLASSIFY,
    AuditAction.RUN_RETRY_STAGE,
    AuditAction.RUN_RECONSIDER,
    AuditAction.RUN_RESOLVE_BY_HAND,
    AuditAction.RUN_ABANDON,
    AuditAction.RUN_CLOSE_EXCEPTION,
    AuditAction.RUN_CORRECT_READING,
    AuditAction.RUN_RESUME,
    AuditAction.RUN_REPLAY,
)


def untouched() -> Q:
    """Runs no person had a hand in: no approval request, correction or recovery."""
    run = OuterRef("pk")
    approval = ApprovalRequest.objects.filter(run=run)
    recovery = RecoveryAction.objects.filter(run=run, action__in=TOUCHING_RECOVERY)
    moved = AuditEvent.objects.filter(run=run, action__in=PERSON_MOVES, actor__isnull=False)
    return ~Q(Exists(approval)) & ~Q(Exists(recovery)) & ~Q(Exists(moved))


def asked_for_approval() -> Q:
    return Q(Exists(ApprovalRequest.objects.filter(run=OuterRef("pk"))))


@dataclass(frozen=True)
class Cell:
    """Runs of one kind: the unit both the rollup and the raw count are summed in, with what
    their classifier calls cost."""

    route: str
    state: str
    outcome: str
    touched: bool
    asked_approval: bool
    runs: int
    classifier_version: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: Decimal = Decimal(0)


# --- counting from the raw rows -------------------------------------------------------------


def _flagged(runs: QuerySet[Run]) -> QuerySet[Run]:
    return runs.annotate(
        touched=ExpressionWrapper(~untouched(), output_field=BooleanField()),
        asked_approval=ExpressionWrapper(asked_for_approval(), output_field=BooleanField()),
    )


KIND = RunCounts.KIND
# What is summed over the runs of a kind: raw, from the runs' columns.
RAW_SUMS: dict[str, Aggregate] = {
    "n": Count("pk"),
    "p": Sum("prompt_tokens"),
    "c": Sum("completion_tokens"),
    "m": Sum("model_cost"),
}


def _cell(row: dict[str, Any]) -> Cell:
    return Cell(
        row["route"],
        row["state"],
        row["outcome"],
        row["touched"],
        row["asked_approval"],
        row["n"],
        row["classifier_version"],
        int(row["p"] or 0),
        int(row["c"] or 0),
        Decimal(row["m"] or 0),
    )


def raw_hours(runs: QuerySet[Run]) -> Iterator[tuple[datetime, Cell]]:
    """The runs counted per hour received and kind: what a rollup row holds."""
    rows = (
        _flagged(runs.annotate(hour=TruncHour("created_at", tzinfo=UTC)))
        .values("hour", *KIND)
        .annotate(**RAW_SUMS)
        .order_by()
    )
    for row in rows:
        yield row["hour"], _cell(row)


# --- which hours the rollup cannot answer yet -----------------------------------------------


class Unread:
    """No mark was passed: counts reads it."""


UNREAD = Unread()


def current_mark() -> RollupMark | None:
    """The marks, read first so that the queries below carry them as literals: the planner
    then knows an `id > mark` range holds a handful of rows and walks the primary key index
    (with a subquery it assumes a third of the table and scans it)."""
    return RollupMark.objects.order_by("pk").first()


def changed_hours(mark: RollupMark) -> set[datetime]:
    """Hours holding a run named by a row above the marks: one UNION of primary-key ranges."""
    named = [
        AuditEvent.objects.filter(pk__gt=mark.audit_id, run__isnull=False).values("run_id"),
        ApprovalRequest.objects.filter(pk__gt=mark.approval_id).values("run_id"),
        RecoveryAction.objects.filter(pk__gt=mark.recovery_id).values("run_id"),
    ]
    hour = TruncHour("created_at", tzinfo=UTC)
    new = Run.objects.filter(pk__gt=mark.run_id)
    parts = [Run.objects.filter(pk__in=ids) for ids in named]
    hours = [q.annotate(hour=hour).values_list("hour", flat=True).order_by() for q in parts]
    found = new.annotate(hour=hour).values_list("hour", flat=True).order_by().union(*hours)
    return set(found)


# --- reading: rollup where it holds, raw rows elsewhere ------------------------------------


def counts(spans: list[Span], *, mark: RollupMark | Unread | None = UNREAD) -> list[list[Cell]]:
    """The runs received in each [since, until) span, by kind: two queries for all of them
    (three without `mark`, current_mark when the caller has read it).

    Spans may overlap and need not fall on the hour. Whole hours that no span bound cuts and
    no pending change touched come from the rollup (whole days of them from the day rows); the
    rest (the partial hours at the edges, the changed hours, everything while no rollup
    exists) is counted from the runs. All are summed per segment between two consecutive
    bounds, in one UNION ALL.
    """
    if not spans:
        return []
    bounds = sorted({moment for span in spans for moment in span})
    covered = merge(spans)
    if isinstance(mark, Unread):
        mark = current_mark()
    clean = [] if mark is None else clean_hours(covered, bounds, changed_hours(mark))
    days = whole_days(clean, bounds)
    hours = minus(clean, days)
    raw = minus(covered, clean)
    parts: list[QuerySet[Any]] = []
    if days:
        day_rows = RunDay.objects.filter(within(days, "day"))
        parts.append(_by_segment(day_rows, "day", bounds, ROLLUP_SUMS))
    if hours:
        hour_rows = RunHour.objects.filter(within(hours, "hour"))
        parts.append(_by_segment(hour_rows, "hour", bounds, ROLLUP_SUMS))
    if raw:
        runs = _flagged(Run.objects.filter(within(raw, "created_at")))
        parts.append(_by_segment(runs, "created_at", bounds, RAW_SUMS))
    if not parts:  # only empty spans
        return [[] for _ in spans]
    rows = parts[0].union(*parts[1:], all=True)
    found = [
        (
            int(number),
            Cell(
                *(route, state, outcome, bool(touched), bool(asked), int(n), version),
                int(p or 0),
                int(c or 0),
                Decimal(m or 0),
            ),
        )
        for number, route, state, outcome, touched, asked, version, n, p, c, m in rows
    ]
    return [_in_span(span, bounds, found) for span in spans]


# The same sums over the rollup's rows.
ROLLUP_SUMS: dict[str, Aggregate] = {
    "n": Sum("runs"),
    "p": Sum("prompt_tokens"),
    "c": Sum("completion_tokens"),
    "m": Sum("cost"),
}


def _by_segment(
    rows: QuerySet[Any], field: str, bounds: list[datetime], sums: Mapping[str, Aggregate]
) -> QuerySet[Any]:
    return (
        rows.annotate(segment=segment(field, bounds))
        .values_list("segment", *KIND)
        .annotate(**sums)
        .order_by()
    )


def _in_span(span: Span, bounds: list[datetime], found: list[tuple[int, Cell]]) -> list[Cell]:
    inside = segments_of(span, bounds)
    return [cell for number, cell in found if number in inside]


@dataclass(frozen=True)
class Total:
    """Runs of one state and outcome, and what their classifier calls cost."""

    runs: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: Decimal = Decimal(0)

    def __add__(self, other: Total) -> Total:
        return Total(
            self.runs + other.runs,
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.cost + other.cost,
        )


def _negated(sums: Mapping[str, Aggregate]) -> dict[str, Any]:
    return {name: -total for name, total in sums.items()}


def totals(mark: RollupMark | None) -> dict[tuple[str, str], Total]:
    """Runs of all time by state and outcome, with their tokens and cost (/metrics): two
    queries. The running totals, less the rollup rows of the changed hours, plus those hours
    counted from the runs. With no mark yet (before the first rebuild), every run is
    counted."""
    by_kind = ("state", "outcome")
    if mark is None:
        parts: list[QuerySet[Any]] = [
            Run.objects.values_list(*by_kind).annotate(**RAW_SUMS).order_by()
        ]
    else:
        parts = [
            RunTotal.objects.values_list(
                *by_kind, "runs", "prompt_tokens", "completion_tokens", "cost"
            ).order_by()
        ]
        dirty = merge((h, h + HOUR) for h in changed_hours(mark))
        if dirty:
            stale = RunHour.objects.filter(within(dirty, "hour")).values_list(*by_kind)
            parts.append(stale.annotate(**_negated(ROLLUP_SUMS)).order_by())
            raw = Run.objects.filter(within(dirty, "created_at")).values_list(*by_kind)
            parts.append(raw.annotate(**RAW_SUMS).order_by())
    found: dict[tuple[str, str], Total] = defaultdict(Total)
    rows = parts[0].union(*parts[1:], all=True) if len(parts) > 1 else parts[0]
    for state, outcome, n, p, c, m in rows:
        found[(state, outcome)] += Total(int(n), int(p or 0), int(c or 0), Decimal(m or 0))
    return {key: total for key, total in found.items() if total.runs}


# --- writing: the job and the rebuild -------------------------------------------------------


def _newest_before(model: type[Model], cutoff: datetime, field: str = "created_at") -> int:
    # Walks the primary key index backwards to the first row older than the cutoff.
    rows = model._default_manager.filter(**{f"{field}__lt": cutoff}).order_by("-pk")
    return int(rows.values_list("pk", flat=True).first() or 0)


def _recompute(spans: list[Span]) -> None:
    """Replace the rollup rows of the hours in `spans` (whole hours) by fresh counts, then the
    rows of their days by the sums of their hours."""
    for since, until in spans:
        start = since
        while start < until:
            end = min(start + REBUILD_CHUNK, until)
            old = RunHour.objects.filter(hour__gte=start, hour__lt=end)
            _shift_totals(old, sign=-1)
            old.delete()
            runs = Run.objects.filter(created_at__gte=start, created_at__lt=end)
            RunHour.objects.bulk_create(_rows(raw_hours(runs)), batch_size=2000)
            _shift_totals(RunHour.objects.filter(hour__gte=start, hour__lt=end), sign=1)
            start = end
    for since, until in merge((floor_day(a), floor_day(b - HOUR) + DAY) for a, b in spans):
        RunDay.objects.filter(day__gte=since, day__lt=until).delete()
        RunDay.objects.bulk_create(_day_rows(since, until), batch_size=2000)


def _day_rows(since: datetime, until: datetime) -> Iterator[RunDay]:
    """Each day's sums of its hour rows, by kind."""
    rows = (
        RunHour.objects.filter(hour__gte=since, hour__lt=until)
        .annotate(start=TruncDay("hour", tzinfo=UTC))
        .values("start", *KIND)
        .annotate(**ROLLUP_SUMS)
        .order_by()
    )
    for row in rows:
        yield RunDay(day=row["start"], **_columns(_cell(row)))


def _shift_totals(rows: QuerySet[RunHour], *, sign: int) -> None:
    """Add (sign 1) or take away (sign -1) the rollup rows `rows` from the running totals."""
    sums = rows.values_list("state", "outcome").annotate(**ROLLUP_SUMS).order_by()
    for state, outcome, n, p, c, m in sums:
        total, _ = RunTotal.objects.get_or_create(
            state=state, outcome=outcome, defaults={"runs": 0}
        )
        RunTotal.objects.filter(pk=total.pk).update(
            runs=F("runs") + sign * n,
            prompt_tokens=F("prompt_tokens") + sign * p,
            completion_tokens=F("completion_tokens") + sign * c,
            cost=F("cost") + sign * m,
        )


def _rows(found: Iterable[tuple[datetime, Cell]]) -> Iterator[RunHour]:
    for hour, cell in found:
        yield RunHour(hour=hour, **_columns(cell))


def _columns(cell: Cell) -> dict[str, Any]:
    """A rollup row's columns for the runs of one kind: a Cell's fields are RunCounts'."""
    return asdict(cell)


def _advance(mark: RollupMark, now: datetime) -> None:
    cutoff = now - LAG
    mark.run_id = max(mark.run_id, _newest_before(Run, cutoff))
    mark.audit_id = max(mark.audit_id, _newest_before(AuditEvent, cutoff))
    mark.approval_id = max(mark.approval_id, _newest_before(ApprovalRequest, cutoff))
    mark.recovery_id = max(mark.recovery_id, _newest_before(RecoveryAction, cutoff))
    mark.attempt_id = max(mark.attempt_id, _newest_before(EffectAttempt, cutoff, "started_at"))
    histograms.advance(mark, cutoff, _newest_before)
    mark.built_at = now
    mark.save()


def _add_deliveries(*, above: int, upto: int) -> None:
    """Add the attempts with ids in (above, upto] to the totals by result."""
    rows = (
        EffectAttempt.objects.filter(pk__gt=above, pk__lte=upto)
        .values_list("outcome")
        .annotate(n=Count("pk"))
        .order_by()
    )
    for outcome, n in rows:
        total, _ = DeliveryTotal.objects.get_or_create(outcome=outcome, defaults={"attempts": 0})
        DeliveryTotal.objects.filter(pk=total.pk).update(attempts=F("attempts") + n)


def _text(value: str) -> Value:
    return Value(value, output_field=CharField())


def delivery_rows(mark: RollupMark | None) -> QuerySet[Any]:
    """Effect delivery attempts of all time by result, as ("delivery", result, "", count) rows:
    the totals up to the mark plus the attempts above it (a primary-key range)."""
    live = (
        EffectAttempt.objects.filter(pk__gt=mark.attempt_id if mark else 0)
        .annotate(kind=_text("delivery"), a=F("outcome"), b=_text(""))
        .values_list("kind", "a", "b")
        .annotate(n=Count("pk"))
        .order_by()
    )
    if mark is None:  # the totals hold only with the mark they were counted up to
        return live
    done = (
        DeliveryTotal.objects.annotate(
            kind=_text("delivery"), a=F("outcome"), b=_text(""), n=F("attempts")
        )
        .values_list("kind", "a", "b", "n")
        .order_by()
    )
    return done.union(live, all=True)


def rollups_refresh(*, now: datetime | None = None) -> int:
    """Fold the changes since the marks into the rollup; returns the hours recomputed.

    Idempotent: the hours are recomputed whole from the raw rows. The mark row is locked so two
    workers never fold the same changes at once.
    """
    now = now or timezone.now()
    with transaction.atomic(durable=True):
        mark = RollupMark.objects.select_for_update().first()
        if mark is None:
            return _rebuild(None, now)
        dirty = changed_hours(mark)
        stale = histograms.changed_hours(mark) if histograms.built(mark) else None
        counted = mark.attempt_id
        # Every row at or below the new marks was committed before `dirty` was read, so it
        # is in the hours recomputed below; a row above them stays a pending change.
        _advance(mark, now)
        _recompute(merge((hour, hour + HOUR) for hour in dirty))
        _add_deliveries(above=counted, upto=mark.attempt_id)
        return len(dirty) + histograms.refresh(stale, now=now)


def rollups_rebuild(*, since: datetime | None = None, now: datetime | None = None) -> int:
    """Recount every hour from `since` (all of history without it) from the raw rows.

    Returns the hours recomputed. Hours before `since` are kept but still brought up to date
    with the changes above the marks, so the result equals a full rebuild.
    """
    with transaction.atomic(durable=True):
        return _rebuild(since, now or timezone.now())


def _rebuild(since: datetime | None, now: datetime) -> int:
    """rollups_rebuild in the caller's transaction (a refresh that finds no rollups yet)."""
    mark = RollupMark.objects.select_for_update().first()
    if mark is None and since is not None:
        raise ValueError("there are no rollups yet: rebuild all of history first")
    before = changed_hours(mark) if mark is not None else set()
    stale = histograms.changed_hours(mark) if histograms.built(mark) else None
    # One mark row: two first rebuilds at once collide on its primary key, one rolls back.
    fresh = mark or RollupMark(pk=1)
    _advance(fresh, now)
    oldest = Run.objects.order_by("created_at").values_list("created_at", flat=True).first()
    newest = Run.objects.order_by("-created_at").values_list("created_at", flat=True).first()
    start = floor_hour(since or oldest or now)
    # Runs stamped ahead of the clock (skew) are counted too.
    end = floor_hour(max(now, newest or now)) + HOUR
    if since is None:
        RunHour.objects.all().delete()
        RunDay.objects.all().delete()
        RunTotal.objects.all().delete()
    DeliveryTotal.objects.all().delete()
    _add_deliveries(above=0, upto=fresh.attempt_id)
    spans = merge([(start, end), *((h, h + HOUR) for h in before if h < start)])
    _recompute(spans)
    # The histograms likewise: from `since` if they were built before, else all of them.
    histograms.rebuild(since=since if stale is not None else None, now=now)
    for fact, hours in (stale or {}).items():
        histograms.recompute(fact, [(h, h + HOUR) for h in hours if since and h < since])
    return sum(int((b - a) / HOUR) for a, b in spans)
