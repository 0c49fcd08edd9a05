from __future__ import annotations

import functools
import signal
import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from automation.intake.mailbox import mail_intake, mail_sources
from automation.intake.services import channel_get_or_create
from core.terminal import ProgressBar
from policy.services import policy_available
from worker.dispatch import drain, inline


class Command(BaseCommand):
    help = (
        "Take in e-mail messages: .eml files, directories of them, or maildirs. Each message "
        "becomes a run, an idempotent replay or an invalid run; a summary ends the output."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("paths", nargs="+", type=Path)
        parser.add_argument("--channel", default="email", help="intake channel (default email)")
        parser.add_argument(
            "--progress",
            choices=["auto", "always", "never"],
            default="auto",
            help="progress bar on stderr: auto shows it on a terminal for 20+ messages",
        )
        parser.add_argument(
            "--process",
            action="store_true",
            help="run the pipeline in this process instead of leaving the runs to the workers",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            sources = mail_sources(options["paths"])
        except FileNotFoundError as exc:
            raise CommandError(str(exc)) from exc
        channel = channel_get_or_create(name=options["channel"])
        if not policy_available(name=channel.policy_version or None):
            raise CommandError(
                "no policy version is active: run `manage.py load_policy` first "
                "(no message was read)"
            )
        mode = options["progress"]
        show = mode == "always" or (mode == "auto" and len(sources) >= 20 and sys.stderr.isatty())
        progress = ProgressBar(self.stderr, unit="messages") if show and sources else None
        # TERM finishes the message in hand, then stops and prints the summary.
        stopping = {"now": False}
        previous = signal.signal(signal.SIGTERM, lambda *_: stopping.update(now=True))
        take_in = functools.partial(
            mail_intake,
            channel=channel,
            sources=sources,
            progress=progress,
            stop=lambda: stopping["now"],
        )
        try:
            if options["process"]:
                with inline() as queue:
                    batch = take_in()
                    drain(queue, limit=None)
            else:
                batch = take_in()
        finally:
            signal.signal(signal.SIGTERM, previous)
        verbose = options["verbosity"] >= 2
        for name, result in batch.results if verbose else []:
            run = f"run #{result.run.pk}" if result.run is not None else "no run"
            self.stdout.write(f"{name}: {result.code} ({run})")
        for name, why in batch.failures:
            self.stdout.write(f"{name}: {why}")
        self.stdout.write(batch.summary())
