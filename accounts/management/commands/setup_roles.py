from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from accounts.roles import roles_ensure


class Command(BaseCommand):
    help = (
        "Make the sample teams with their roles (approvers, ops leads, recovery staff, "
        "auditors, administrators) and set every team's permissions from its roles."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        for name, count in roles_ensure().items():
            self.stdout.write(f"{name}: {count} permissions")
