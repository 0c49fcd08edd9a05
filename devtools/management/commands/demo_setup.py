from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from devtools.demo import DEMO_POLICY, demo_prepare


class Command(BaseCommand):
    help = (
        "Prepare the demo: roles, one user per role (new passwords), a token, the demo's "
        "policy, the sample customers and requests."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        setup = demo_prepare()
        self.stdout.write("Demo users (passwords are new on every start):")
        for username, password in setup.passwords.items():
            self.stdout.write(f"  {username:<10} {password}")
        self.stdout.write(f"API token for channel 'api': {setup.token}")
        self.stdout.write(f"Sample customers: {setup.customers}")
        self.stdout.write(f"Policy {DEMO_POLICY}: {setup.policy}")
        self.stdout.write("Sample requests:")
        for event_id, code in setup.samples.items():
            self.stdout.write(f"  {event_id}: {code}")
