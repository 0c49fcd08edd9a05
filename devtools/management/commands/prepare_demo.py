from __future__ import annotations

from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand

# What the demo prepares on every start, in order, in one process (each command on its own
# would pay Django's start again). The sample mailbox is read by the worker once it starts;
# a second start adds nothing: each step finds its work done (tests/devtools/test_demo_setup).
STEPS: list[tuple[str, ...]] = [
    ("migrate", "--no-input"),
    # Eight weeks of past runs for the reports (first start only; loads the shipped policy
    # as of the history's first day, so load_policy below finds it in place).
    ("seed_history",),
    # The shipped versions, stored (none activated here: demo_setup activates the demo's own
    # version of the safe default once, after the history's policy-1, so a second start
    # leaves whatever version is active alone and records nothing).
    ("load_policy",),
]
MAILBOX = "tests/data/mail/"


class Command(BaseCommand):
    help = (
        "Demo only: migrate, seed the history, load the policy, make the demo users and "
        "take in the sample mailbox. Prints the users, the token and the samples; the "
        "steps' own output goes to standard error."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        for name, *arguments in STEPS:
            call_command(name, *arguments, stdout=self.stderr, verbosity=0)
        call_command("demo_setup", stdout=self.stdout)
        call_command("intake_mail", MAILBOX, "--progress", "never", stdout=self.stderr)
