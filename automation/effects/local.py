"""Effects recorded inside the console: a task row for the group that owns the work.

insert on the effect's key: a repeat delivery changes nothing and answers with the row the
first one wrote.
"""

from __future__ import annotations

from collections.abc import Mapping

from automation.effects.base import Delivery
from automation.effects.models import DeliveryResult, Effect, Task
from core.rows import insert_new


class RecordAdapter:
    """Records the effect as a Task, in the delivering transaction."""

    local = True
    honours_idempotency_keys = True
    max_attempts = 5
    deadline_seconds = 3600.0

    def __init__(self, group: str = "", route_groups: Mapping[str, str] | None = None) -> None:
        # The owner of the work: the effect's own group, else the group of the run's route.
        self.group = group
        self.route_groups = route_groups or {}

    def deliver(self, effect: Effect) -> Delivery:
        # The caller holds the effect's row lock, and every delivery of this key goes through
        # that row; the unique key settles it all the same.
        payload = effect.payload
        route = str(payload.get("route") or "")
        task = Task(
            idempotency_key=effect.idempotency_key,
            run_id=effect.run_id,
            effect=effect.name,
            group=self.group or self.route_groups.get(route, ""),
            route=route,
            subject=str(payload.get("subject") or ""),
            payload=payload,
        )
        if not insert_new(task, unique="idempotency_key"):
            task = Task.objects.get(idempotency_key=effect.idempotency_key)
        return Delivery(DeliveryResult.DELIVERED, reference=f"task:{task.pk}")
