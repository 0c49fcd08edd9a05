from __future__ import annotations

from django.apps import AppConfig


class AutomationConfig(AppConfig):
    name = "automation"
    verbose_name = "Automation runs"
