from __future__ import annotations

from django.apps import AppConfig
from django.db.backends.signals import connection_created

from reports.aggregates import register_sqlite_functions


class ReportsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "reports"
    verbose_name = "Reports"

    def ready(self) -> None:
        connection_created.connect(register_sqlite_functions, dispatch_uid="reports.sqlite")
