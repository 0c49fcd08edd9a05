"""Sending runs and effects to the workers: the tasks' dotted paths, and one run's nudge."""

from __future__ import annotations

from django.utils import timezone

from automation.runs.models import Run
from worker.dispatch import Priority, enqueue_after_commit

ADVANCE_RUN_TASK = "automation.tasks.advance_run"
DELIVER_EFFECT_TASK = "automation.tasks.deliver_effect"


def run_send(run: Run, *, priority: Priority = Priority.URGENT) -> None:
    """Send the run to the workers with this transaction, and note that a message is out
    (the sweep leaves a run alone while its message waits). Urgent by default: people's
    operations call this, and a person is waiting for the result."""
    run.dispatched_at = timezone.now()
    Run.objects.filter(pk=run.pk).update(dispatched_at=run.dispatched_at)
    enqueue_after_commit(ADVANCE_RUN_TASK, run.pk, priority=priority)
