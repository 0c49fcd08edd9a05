from __future__ import annotations

from django.apps import AppConfig

from automation.signals import classifier_call_starting, effect_sent_downstream
from devtools import faults


class DevtoolsConfig(AppConfig):
    """The fixture runner, the demo data and the crash tests' switches: installed by
    config.dev_settings (the demo and the tests), never by the production settings."""

    name = "devtools"
    verbose_name = "Development tools"

    def ready(self) -> None:
        classifier_call_starting.connect(
            faults.kill_once_before_classifier_call, dispatch_uid="devtools.kill_once"
        )
        effect_sent_downstream.connect(
            faults.kill_after_downstream_answer, dispatch_uid="devtools.kill_after_downstream"
        )
