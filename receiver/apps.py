from __future__ import annotations

from django.apps import AppConfig


class ReceiverConfig(AppConfig):
    name = "receiver"
    verbose_name = "Demo receiver"
