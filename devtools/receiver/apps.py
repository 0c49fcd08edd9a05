from __future__ import annotations

from django.apps import AppConfig

from devtools.receiver.logs import lower_planned_failures


class ReceiverConfig(AppConfig):
    name = "devtools.receiver"
    # The label it had as a top-level app: its tables, migrations and content types keep
    # their names, so a database made before it moved migrates without a change.
    label = "receiver"
    verbose_name = "Demo receiver"

    def ready(self) -> None:
        lower_planned_failures()
