from __future__ import annotations

from collections import Counter
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from automation.recovery.simulation import simulation_start, simulation_step
from core.terminal import when_argument
from policy.models import PolicyVersion


class Command(BaseCommand):
    help = (
        "Re-evaluate past runs under a policy version and the active one: what activating it "
        "would change (a dry run: no model call, no effect)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--policy", required=True, help="the version to judge them by")
        parser.add_argument("--since", type=when_argument, required=True)
        parser.add_argument("--until", type=when_argument, default=None)

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            simulation = simulation_start(
                version=options["policy"],
                since=options["since"],
                until=options["until"] or timezone.now(),
                user=None,
                in_worker=False,
            )
        except PolicyVersion.DoesNotExist as exc:
            raise CommandError(f"no policy version {options['policy']!r}") from exc
        while simulation_step(simulation_id=simulation.pk):
            simulation.refresh_from_db()
            self.stdout.write(f"\r{simulation.done}/{simulation.total}", ending="")
        simulation.refresh_from_db()
        self.stdout.write("")
        moves = Counter(f"{c['old']} -> {c['new']}" for c in simulation.changes)
        baseline = simulation.baseline_version or "the version that first decided each"
        self.stdout.write(
            f"{simulation.total} run(s) judged again under {simulation.policy_version} and "
            f"{baseline}: {len(simulation.changes)} decision(s) would change"
        )
        for move, count in sorted(moves.items()):
            self.stdout.write(f"  {move}: {count}")
        for change in simulation.changes[:50]:
            rules = ", ".join(r["rule_id"] for r in change["rules"])
            self.stdout.write(
                f"  run {change['run']} ({change['event_id']}): {change['old']} -> "
                f"{change['new']} [{rules}]"
            )
