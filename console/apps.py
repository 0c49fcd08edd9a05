from __future__ import annotations

from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    """The pages people use: views, forms, templates and static files, over the domain apps."""

    name = "console"
    verbose_name = "Console"
