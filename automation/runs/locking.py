"""Locking a run's row before a step: skip a row another worker holds, or wait for it."""

from __future__ import annotations

from django.db import connection

from automation.runs.models import Run


def lock_run(run_id: int, *, wait: bool = False) -> Run | None:
    """Lock the run row.

    By default SKIP LOCKED: None when another worker holds the row, because that worker is
    taking this very step and a duplicate message should simply stand aside. With wait=True
    (used by whoever already owns the work, such as a worker holding the classifier lease
    with an answer in hand) it queues for the lock instead, so finished work is never dropped.
    """
    skip = not wait and connection.features.has_select_for_update_skip_locked
    # of=("self",): lock the run's row only. The channel is read in the same query, but
    # every run of a channel shares its row: locking it too would make one run's step skip
    # (or wait for) every other run's.
    query = Run.objects.select_for_update(skip_locked=skip, of=("self",))
    return query.filter(pk=run_id).select_related("channel").first()
