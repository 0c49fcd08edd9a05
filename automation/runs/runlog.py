"""The runs' log: one line per step or answer, about one run, written once it commits."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ParamSpec, Protocol, TypeVar

from django.db import transaction

from automation.runs.models import Run

if TYPE_CHECKING:  # intake sits above the run's record; only the type is needed
    from automation.intake.models import IntakeRecord

RUN_LOG = logging.getLogger("gatehouse.runs")


def log_run(run: Run, message: str, *, level: int = logging.INFO, **fields: Any) -> None:
    """Log one line about a run once its transaction commits: a rolled-back step never shows.

    The line carries the run's id, event id, state and outcome as fields, so a log collector
    follows one run or one event across web and worker processes. Callers add facts, never
    secrets or request bodies.
    """
    if not RUN_LOG.isEnabledFor(level):
        return  # nothing to wait for: the line would not be written
    extra = {
        "run_id": run.pk,
        "event_id": run.event_id,
        "state": run.state,
        "outcome": run.outcome,
        **fields,
    }
    transaction.on_commit(lambda: RUN_LOG.log(level, message, extra=extra))


def log_run_id(run_id: int | None, message: str, **fields: Any) -> None:
    """Log about a run known only by its id (a worker that lost a race): one small query."""
    if run_id is None:
        return
    run = Run.objects.filter(pk=run_id).only("event_id", "state", "outcome").first()
    if run is not None:
        log_run(run, message, **fields)


class _Admission(Protocol):
    @property
    def code(self) -> str: ...
    @property
    def run(self) -> Run | None: ...
    @property
    def intake(self) -> IntakeRecord: ...


P = ParamSpec("P")
A = TypeVar("A", bound=_Admission)


def logs_intake(admit: Callable[P, A]) -> Callable[P, A]:
    """Log what intake answered (accepted, a duplicate, invalid...) with the run it names."""

    @functools.wraps(admit)
    def admit_and_log(*args: P.args, **kwargs: P.kwargs) -> A:
        return log_admission(admit(*args, **kwargs))

    return admit_and_log


def log_admission(result: A) -> A:
    """Log what intake answered, with the run it names (see logs_intake)."""
    if result.run is not None:
        code = str(result.code)
        log_run(
            result.run, f"intake {result.intake.pk}: {code}", intake_id=result.intake.pk, code=code
        )
    return result
