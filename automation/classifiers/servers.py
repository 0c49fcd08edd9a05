"""A model server's limits, kept by every worker and machine together, in PostgreSQL.

Before a remote classifier is called, the call is admitted (`admit`), and after it the answer
is reported (`report`). Both read and write the server's one `ModelServer` row, keyed by its
base URL; an admission locks it for one short transaction. PostgreSQL, not Redis, holds it:
every worker already shares the database (with either broker), a row lock makes the
admission exact across machines, and one statement per call is far below what a call to a
model costs. No library we found keeps a rate limit, a breaker and a budget in PostgreSQL;
the process-local ones (circuitbreaker, pybreaker) would count per process.

What an admission weighs, in this order:

- **the daily budget** (GATEHOUSE_OPENAI_DAILY_BUDGET, in the price table's money): once
  today's calls cost that much, no call is made until the next day; the run waits for it, or
  is held for a person (GATEHOUSE_OPENAI_WHEN_OVER_BUDGET). Calls already in flight finish,
  so a day may end a few calls over.
- **the circuit breaker**: after GATEHOUSE_OPENAI_BREAKER_FAILURES failures in a row
  (timeouts, 5xx, lost connections) the server is left alone for
  GATEHOUSE_OPENAI_BREAKER_COOLING seconds; then one call, the probe, is let through, and
  its answer closes the breaker or opens it again. Meanwhile runs wait, or are held for a
  person (GATEHOUSE_OPENAI_WHEN_UNAVAILABLE).
- **a pause** the server asked for: a `429` with `Retry-After` moves every worker's next
  call past it, not just the one that got it.
- **requests and tokens per minute** (GATEHOUSE_OPENAI_RPM, GATEHOUSE_OPENAI_TPM): a generic
  cell rate algorithm with no burst. Each call takes the next free moment of each limit and
  moves it on by its share (a minute over the limit; its tokens as the prompt's estimate
  plus the answer's limit, corrected once the server says what they were), so calls are
  spaced evenly and no minute holds more than the limit. A call whose moment is near waits
  for it in its worker, holding it; one whose moment is further off than `longest_wait`
  keeps the moment and waits in the queue (a delayed message), without spending an attempt.

An admission that turns a call away says why in words, which the run keeps.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation
from enum import StrEnum

from django.db import transaction
from django.db.models import Count, F, Q
from django.utils import timezone

from audit.models import AuditAction, AuditEvent
from automation.classifiers.base import (
    ClassifierRateLimited,
    ClassifierRefused,
    ClassifierTimeout,
    ClassifierUnavailable,
)
from automation.classifiers.models import ModelServer
from automation.conf import setting
from automation.runs.models import Run, State
from core.backoff import jitter

# A 429 without Retry-After pauses the pool this long.
DEFAULT_PAUSE = 1.0
# A probe not reported within this many seconds beyond its deadline is presumed lost (its
# worker died): another call may probe.
PROBE_MARGIN = 5.0
WHEN = ("wait", "hold")


class Waiting(StrEnum):
    """What a turned-away run waits for (Run.waiting_for)."""

    CAPACITY = "capacity"  # its moment under the rate limit, which it keeps
    BREAKER = "breaker"
    BUDGET = "budget"


@dataclass(frozen=True)
class Admission:
    """`go`: call at `at` (now or a moment under the rate limit). Otherwise the run waits
    until `at` for `waiting`, or is held for a person (`hold`); `why` says it in words."""

    go: bool
    at: datetime
    waiting: Waiting | None = None
    hold: bool = False
    why: str = ""
    probe: bool = False


@dataclass(frozen=True)
class Limits:
    rpm: int
    tpm: int
    failures: int
    cooling: timedelta
    when_unavailable: str
    budget: Decimal | None
    when_over_budget: str

    @classmethod
    def configured(cls) -> Limits:
        return cls(
            rpm=max(int(setting("OPENAI_RPM")), 0),
            tpm=max(int(setting("OPENAI_TPM")), 0),
            failures=max(int(setting("OPENAI_BREAKER_FAILURES")), 1),
            cooling=timedelta(seconds=max(int(setting("OPENAI_BREAKER_COOLING_SECONDS")), 1)),
            when_unavailable=_when("OPENAI_WHEN_UNAVAILABLE"),
            budget=daily_budget(),
            when_over_budget=_when("OPENAI_WHEN_OVER_BUDGET"),
        )


def _when(name: str) -> str:
    value = str(setting(name)).strip().lower()  # type: ignore[call-overload]
    return value if value in WHEN else "wait"


def daily_budget() -> Decimal | None:
    """GATEHOUSE_OPENAI_DAILY_BUDGET as money; None when empty or not a positive amount."""
    written = str(setting("OPENAI_DAILY_BUDGET")).strip()
    if not written:
        return None
    try:
        budget = Decimal(written)
    except InvalidOperation:
        return None
    return budget if budget > 0 else None


def _state(key: str) -> ModelServer:
    """The server's row, locked; made on first use."""
    ModelServer.objects.get_or_create(key=key)
    return ModelServer.objects.select_for_update().get(key=key)


def server_state(key: str) -> ModelServer | None:
    return ModelServer.objects.filter(key=key).first()


def admit(
    key: str,
    *,
    tokens: int,
    now: datetime,
    deadline: float,
    longest_wait: float,
    reserved: bool = False,
    durable: bool = True,
) -> Admission:
    """May a call to the server `key`, of about `tokens` tokens, be made, and when?

    `reserved`: the run already holds its moment under the rate limit (it waited for it in
    the queue), so it takes no second one. `durable`: its own transaction (False: a savepoint
    of the caller's, as in the classifier evaluation's dry run).
    """
    limits = Limits.configured()
    found = server_state(key)
    if found is not None and _open_road(found, limits, now):
        # Nothing to take or claim: one read, no lock, no write.
        return Admission(True, max(now, timezone.now()))
    with transaction.atomic(durable=durable):
        state = _state(key)
        turned_away = _over_budget(state, limits, now, key) or _breaker_shut(
            state, limits, now, key
        )
        if turned_away is not None:
            return turned_away
        probe = state.open_until is not None  # open, cooled down: this call is the probe
        if probe:
            state.probe_until = now + timedelta(seconds=deadline + PROBE_MARGIN)
        # Moments are of the clock, whenever the run's step began (it may have waited for a
        # slot, or for the row's lock).
        at = max(now, timezone.now())
        if state.paused_until is not None:
            at = max(at, state.paused_until)
        if not reserved:
            at = _take_moment(state, limits, at, tokens)
        state.save()
        if at - now > timedelta(seconds=longest_wait):
            # Too far off to wait for in a worker: the run keeps its moment and waits in the
            # queue. A probe given up this way is no probe.
            if probe:
                ModelServer.objects.filter(pk=state.pk).update(probe_until=None)
            return Admission(
                False,
                at,
                Waiting.CAPACITY,
                why=f"{key} is at its rate limit ({_rates(limits)}): the call waits for its turn",
            )
        return Admission(True, at, probe=probe)


def _open_road(state: ModelServer, limits: Limits, now: datetime) -> bool:
    """A call may go at once and changes nothing: no rate to keep, the breaker closed, no
    pause asked for, the budget not spent."""
    return (
        not limits.rpm
        and not limits.tpm
        and state.open_until is None
        and (state.paused_until is None or state.paused_until <= now)
        and _over_budget(state, limits, now, state.key) is None
    )


def _take_moment(state: ModelServer, limits: Limits, at: datetime, tokens: int) -> datetime:
    """The first moment at or after `at` free under both rates; taken (moved on)."""
    if limits.rpm:
        free = state.requests_free_at
        at = at if free is None else max(at, free)
    if limits.tpm:
        free = state.tokens_free_at
        at = at if free is None else max(at, free)
    if limits.rpm:
        state.requests_free_at = at + timedelta(minutes=1) / limits.rpm
    if limits.tpm:
        state.tokens_free_at = at + timedelta(minutes=1) * max(tokens, 1) / limits.tpm
    return at


def _rates(limits: Limits) -> str:
    parts = []
    if limits.rpm:
        parts.append(f"{limits.rpm} requests a minute")
    if limits.tpm:
        parts.append(f"{limits.tpm} tokens a minute")
    return ", ".join(parts) or "a pause it asked for"


def _over_budget(state: ModelServer, limits: Limits, now: datetime, key: str) -> Admission | None:
    if limits.budget is None or state.day != timezone.localdate(now):
        return None
    if state.spent < limits.budget:
        return None
    tomorrow = timezone.localtime(now).replace(hour=0, minute=0, second=0, microsecond=0)
    tomorrow += timedelta(days=1)
    hold = limits.when_over_budget == "hold"
    why = (
        f"the daily budget of {limits.budget} for {key} is spent ({state.spent:.4f} today, "
        "GATEHOUSE_OPENAI_DAILY_BUDGET): "
        + ("held for a person" if hold else "the call waits for tomorrow")
    )
    return Admission(False, tomorrow, Waiting.BUDGET, hold=hold, why=why)


def _breaker_shut(state: ModelServer, limits: Limits, now: datetime, key: str) -> Admission | None:
    """An admission turned away by the open breaker, or by a probe in flight; None when a
    call may go (closed, or cooled down with no probe out)."""
    if state.open_until is None:
        return None
    probing = state.probe_until is not None and state.probe_until > now
    if state.open_until <= now and not probing:
        return None
    # Spread over a cooling period, so that waiting runs do not all come back at once: the
    # first after the cooling is the probe, and the probe's answer wakes the others when it
    # closes the breaker (pipeline: _wake_after_breaker).
    spread = timedelta(seconds=jitter(limits.cooling.total_seconds()))
    until = (now if probing else state.open_until) + spread
    hold = limits.when_unavailable == "hold"
    why = (
        f"{key} is unavailable: its circuit breaker opened after {state.failures} "
        f"failure{'' if state.failures == 1 else 's'} in "
        f"a row (last: {state.last_error[:200]}) and "
        + ("a probe call is deciding whether it closes" if probing else "cools down")
        + ("; held for a person (GATEHOUSE_OPENAI_WHEN_UNAVAILABLE)" if hold else "")
    )
    return Admission(False, until, Waiting.BREAKER, hold=hold, why=why)


def report(
    key: str,
    *,
    error: Exception | None,
    now: datetime,
    tokens_estimated: int = 0,
    tokens_used: int | None = None,
    cost: Decimal | None = None,
    durable: bool = True,
) -> bool:
    """What came of a call: the breaker counts a failure or closes, a 429 pauses everybody,
    the tokens' estimate is corrected and the cost is added to the day's spend. A healthy
    server's answer writes nothing unless there is a token limit or a budget to count.
    True when this answer closed the breaker (the runs waiting for it may go on)."""
    limits = Limits.configured()
    servers = ModelServer.objects.filter(key=key)
    if isinstance(error, ClassifierRateLimited):
        pause = now + timedelta(seconds=error.retry_after or DEFAULT_PAUSE)
        servers.filter(Q(paused_until__isnull=True) | Q(paused_until__lt=pause)).update(
            paused_until=pause
        )
        return False
    if isinstance(error, (ClassifierTimeout, ClassifierUnavailable)) and not isinstance(
        error, ClassifierRefused
    ):
        _failed(key, error, limits, now, durable=durable)
        return False
    # An answer (a refusal too: the server is up) closes the breaker and ends a run of
    # failures: one statement, which changes no row while the server is healthy. (It may
    # say "closed" when it only ended a run of failures: waking the runs that wait for the
    # breaker then finds none.)
    closed = servers.filter(Q(open_until__isnull=False) | Q(failures__gt=0)).update(
        failures=0, opened_at=None, open_until=None, probe_until=None
    )
    if limits.tpm and tokens_used is not None and tokens_used != tokens_estimated:
        correction = timedelta(minutes=1) * (tokens_used - tokens_estimated) / limits.tpm
        servers.exclude(tokens_free_at=None).update(tokens_free_at=F("tokens_free_at") + correction)
    if cost:
        today = timezone.localdate(now)
        if not servers.filter(day=today).update(spent=F("spent") + cost):
            servers.update(day=today, spent=cost)
    return bool(closed)


def _failed(key: str, error: Exception, limits: Limits, now: datetime, *, durable: bool) -> None:
    with transaction.atomic(durable=durable):
        state = _state(key)
        state.failures += 1
        state.last_error = str(error)[:1000]
        probed = state.open_until is not None and state.open_until <= now
        if probed or (state.open_until is None and state.failures >= limits.failures):
            if state.open_until is None:
                state.opened_at = now
            state.open_until = now + limits.cooling
            state.probe_until = None
        state.save()


@dataclass(frozen=True)
class ServerView:
    """A model server's state as the console and /metrics show it."""

    key: str
    breaker: str  # closed, open, probing
    failures: int
    opened_at: datetime | None
    open_until: datetime | None
    last_error: str
    paused_until: datetime | None
    budget: Decimal | None
    spent_today: Decimal
    over_budget: bool


def server_view(
    key: str, *, now: datetime | None = None, state: ModelServer | None = None
) -> ServerView:
    now = now or timezone.now()
    state = state or server_state(key) or ModelServer(key=key)
    if state.open_until is None:
        breaker = "closed"
    elif state.probe_until is not None and state.probe_until > now:
        breaker = "probing"
    else:
        breaker = "open"
    budget = daily_budget()
    spent = state.spent if state.day == timezone.localdate(now) else Decimal(0)
    return ServerView(
        key=key,
        breaker=breaker,
        failures=state.failures,
        opened_at=state.opened_at,
        open_until=state.open_until,
        last_error=state.last_error,
        paused_until=state.paused_until
        if state.paused_until and state.paused_until > now
        else None,
        budget=budget,
        spent_today=spent,
        over_budget=budget is not None and spent >= budget,
    )


def server_views(*, now: datetime | None = None) -> list[ServerViewWithWaiting]:
    """Every model server a call was made to, with the runs waiting for each reason (runs
    waiting are few: they are at `enriched`, an index's condition)."""
    now = now or timezone.now()
    states = list(ModelServer.objects.order_by("key"))
    if not states:  # no call was ever made to a model server: nothing waits for one
        return []
    waiting = dict(
        Run.objects.filter(state=State.ENRICHED)
        .exclude(waiting_for="")
        .values("waiting_for")
        .annotate(count=Count("pk"))
        .values_list("waiting_for", "count")
    )
    return [
        ServerViewWithWaiting(server_view(state.key, now=now, state=state), waiting)
        for state in states
    ]


@dataclass(frozen=True)
class ServerViewWithWaiting:
    server: ServerView
    # Runs waiting, by Waiting (the whole deployment's: one model server in practice).
    waiting: dict[str, int]


def waiting_of(run: Run) -> dict[str, str] | None:
    """Why a run waits for its model server, in words (its latest such audit row), while it
    does; None otherwise."""
    if not run.waiting_for or run.state != State.ENRICHED:
        return None
    row = (
        AuditEvent.objects.filter(run=run, action=AuditAction.RUN_WAITING)
        .order_by("-pk")
        .values_list("data", flat=True)
        .first()
    )
    return {"waiting_for": run.waiting_for, "why": str((row or {}).get("why", ""))}
