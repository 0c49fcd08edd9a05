from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from automation.roles import roles_ensure


class Command(BaseCommand):
    help = "Create the role groups (approvers, ops leads, recovery staff, auditors)."

    def handle(self, *args: Any, **options: Any) -> None:
        for name, count in roles_ensure().items():
            self.stdout.write(f"{name}: {count} permissions")
