from __future__ import annotations

from django.apps import AppConfig


class PolicyConfig(AppConfig):
    name = "policy"
    verbose_name = "Policy"

    def ready(self) -> None:
        from django.core.signals import request_started

        from policy import selectors

        # Each request checks once which versions exist (policy.selectors).
        request_started.connect(selectors.recheck, dispatch_uid="policy.selectors.recheck")
