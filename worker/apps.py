from __future__ import annotations

from django.apps import AppConfig

from worker import checks  # noqa: F401  (registers the cluster configuration check)


class WorkerConfig(AppConfig):
    name = "worker"
    verbose_name = "Task workers"
