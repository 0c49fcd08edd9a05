from __future__ import annotations

import signal
from typing import Any

from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.core.management.base import BaseCommand, CommandError, CommandParser, OutputWrapper
from django.utils import timezone

from automation.models import RecoveryBatch
from automation.recovery.services import BATCH_ACTIONS, batch_create, batch_select, batch_step
from core.errors import ServiceError
from core.terminal import ProgressBar, when_argument


class Command(BaseCommand):
    help = (
        "Retry or replay every run of an exception queue in a time window, with a progress "
        "bar. Without --commit it only lists what it would do."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--queue", required=True, help="e.g. effect_unavailable")
        parser.add_argument("--since", type=when_argument, required=True)
        parser.add_argument("--until", type=when_argument, default=None)
        parser.add_argument("--action", choices=BATCH_ACTIONS, required=True)
        parser.add_argument("--reason", required=True)
        parser.add_argument("--user", required=True, help="who does it (for the record)")
        parser.add_argument("--commit", action="store_true", help="really do it")

    def handle(self, *args: Any, **options: Any) -> None:
        until = options["until"] or timezone.now()
        ids = batch_select(queue=options["queue"], since=options["since"], until=until)
        if not options["commit"]:
            self.stdout.write(f"would {options['action']} {len(ids)} run(s): {ids[:50]}")
            self.stdout.write("dry run: add --commit to do it")
            return
        user = user_named(options["user"])
        try:
            batch = batch_create(
                action=options["action"],
                queue=options["queue"],
                since=options["since"],
                until=until,
                user=user,
                reason=options["reason"],
                in_worker=False,
            )
        except (ServiceError, PermissionDenied) as exc:
            raise CommandError(str(exc)) from exc
        work_batch(batch, self.stdout)


def user_named(username: str) -> User:
    try:
        return User.objects.get(username=username)
    except User.DoesNotExist as exc:
        raise CommandError(f"no user {username!r}") from exc


def work_batch(batch: RecoveryBatch, out: OutputWrapper) -> None:
    """Work a batch in this process with a progress bar, then say how it went. TERM stops it
    after the chunk in hand; the batch row keeps its position for a worker to carry on."""
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    progress = ProgressBar(out, unit="runs")
    while not stop["now"] and batch_step(batch_id=batch.pk):
        batch.refresh_from_db()
        progress(batch.done, batch.total)
    batch.refresh_from_db()
    if batch.done < batch.total:
        out.write("")  # end the bar's line
    out.write(
        f"batch {batch.pk}: {batch.done}/{batch.total} done, {batch.succeeded} ok, "
        f"{len(batch.failures)} failed" + (" (stopped early)" if stop["now"] else "")
    )
    for failure in batch.failures:
        out.write(f"  run {failure['run']}: {failure['reason']}")
