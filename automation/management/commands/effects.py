from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import Count
from django.utils import timezone

from automation.effects.services import effect_pause, effect_resume
from automation.management.commands.recover import user_named, work_batch
from automation.models import Effect, EffectControl, Outcome
from automation.recovery.services import held_effects_batch, held_effects_select
from core.errors import ServiceError
from core.terminal import when_argument


class Command(BaseCommand):
    help = "Operate effect delivery during an outage: status, pause, resume, retry-held."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        sub.add_parser("status", help="deliveries by effect and status, and paused effects")
        for name in ("pause", "resume"):
            action = sub.add_parser(name)
            action.add_argument("effect")
            action.add_argument("--user", required=True, help="who does it (for the record)")
            if name == "resume":
                action.add_argument("--rate", type=int, help="deliveries per minute")
        retry = sub.add_parser("retry-held", help="retry runs held for their effect")
        retry.add_argument("--since", type=when_argument, required=True)
        retry.add_argument("--until", type=when_argument, default=None)
        retry.add_argument(
            "--outcome",
            default=Outcome.EFFECT_UNAVAILABLE,
            choices=[Outcome.EFFECT_UNAVAILABLE, Outcome.EFFECT_UNCERTAIN],
        )
        retry.add_argument("--reason", required=True)
        retry.add_argument("--user", required=True)
        retry.add_argument("--commit", action="store_true", help="really do it")

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        if action == "status":
            self._status()
            return
        if action == "retry-held":
            self._retry_held(options)
            return
        try:
            self._control(action, options)
        except ServiceError as exc:  # it would have changed nothing: nothing was written
            raise CommandError(exc.message) from exc

    def _control(self, action: str, options: dict[str, Any]) -> None:
        user = user_named(options["user"])
        if action == "pause":
            effect_pause(name=options["effect"], user=user)
            self.stdout.write(f"{options['effect']}: paused")
        else:
            effect_resume(name=options["effect"], user=user, rate_per_minute=options["rate"])
            rate = f" at {options['rate']}/min" if options["rate"] else ""
            self.stdout.write(f"{options['effect']}: resumed{rate}")

    def _retry_held(self, options: dict[str, Any]) -> None:
        """A batch (its row and a RecoveryAction for each run), or without --commit a list."""
        window = {"since": options["since"], "until": options["until"] or timezone.now()}
        if not options["commit"]:
            ids = held_effects_select(outcome=options["outcome"], **window)
            self.stdout.write(f"would retry the effect of {len(ids)} run(s): {ids[:50]}")
            self.stdout.write("dry run: add --commit to do it")
            return
        user = user_named(options["user"])
        try:
            batch = held_effects_batch(
                user=user, reason=options["reason"], outcome=options["outcome"], **window
            )
        except (ServiceError, PermissionDenied) as exc:
            raise CommandError(str(exc)) from exc
        work_batch(batch, self.stdout)

    def _status(self) -> None:
        rows = Effect.objects.values("name", "status").annotate(n=Count("pk")).order_by("name")
        for row in rows:
            self.stdout.write(f"{row['name']:<28} {row['status']:<10} {row['n']}")
        for control in EffectControl.objects.filter(paused=True):
            self.stdout.write(f"{control.name}: PAUSED")
