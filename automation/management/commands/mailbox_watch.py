from __future__ import annotations

import signal
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from imapclient.exceptions import IMAPClientError
from pydantic import ValidationError

from automation.intake.imap import (
    ConnectionLost,
    MailboxNotConfigured,
    MailboxWatcher,
    mailbox_for,
    watching,
)
from policy.services import policy_available


class Command(BaseCommand):
    help = (
        "Watch a channel's IMAP mailbox and take its mail in as it arrives (IDLE, or polling "
        "where the server has none), until SIGTERM or SIGINT. Each message becomes a run, a "
        "replay or a refused record; the server is told (Processed, Rejected, or a flag) only "
        "after it is stored. Progress is on the queues page."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("channel", help="the intake channel whose mailbox is watched")
        parser.add_argument(
            "--once",
            action="store_true",
            help="take what is in the folder now, then stop (a schedule instead of a watcher)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            mailbox = mailbox_for(options["channel"])
        except MailboxNotConfigured as exc:
            raise CommandError(str(exc)) from exc
        except ValidationError as exc:
            raise CommandError(f"GATEHOUSE_MAILBOXES[{options['channel']!r}]: {exc}") from exc
        if not policy_available(name=mailbox.channel.policy_version or None):
            raise CommandError(
                "no policy version is active: run `manage.py load_policy` first "
                "(no message was read)"
            )
        watcher = MailboxWatcher(mailbox)
        with watching(mailbox) as held:
            if not held:
                raise CommandError(
                    f"another watcher has the mailbox of {options['channel']!r} "
                    f"({mailbox.watcher or 'elsewhere'}): one watcher per mailbox"
                )
            if options["once"]:
                try:
                    done = watcher.run_once()
                except (ConnectionLost, IMAPClientError, OSError) as exc:
                    raise CommandError(f"{type(exc).__name__}: {exc}") from exc
                self.stdout.write(
                    f"{done.found} found: {done.taken} taken, {done.refused} refused, "
                    f"{done.known} taken before, {done.errors} errors"
                )
                return
            # TERM and INT finish the message in hand, leave IDLE, log out and stop.
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: watcher.stop.set())
            self.stdout.write(f"watching {mailbox} for the channel {options['channel']}")
            self.stdout.flush()
            watcher.run()
