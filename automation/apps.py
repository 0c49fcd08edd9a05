from __future__ import annotations

from django.apps import AppConfig

from automation import checks  # noqa: F401  (registers the worker configuration check)


class AutomationConfig(AppConfig):
    name = "automation"
    verbose_name = "Automation runs"
