"""Effects recorded inside the console. get_or_create on the key: a repeat changes nothing."""

from __future__ import annotations

from typing import Any

from automation.effects.base import Delivery
from automation.effects.models import (
    AccountReview,
    DeliveryResult,
    Effect,
    FollowUp,
    InternalNotification,
    LocalEffectRecord,
)
from core.rows import insert_new


class LocalAdapter:
    """Records the effect in the console's database, in the delivering transaction."""

    local = True
    honours_idempotency_keys = True
    max_attempts = 5
    deadline_seconds = 3600.0

    def __init__(self, model: type[LocalEffectRecord], prefix: str, *fields: str) -> None:
        self.model = model
        self.prefix = prefix
        self.fields = fields

    def deliver(self, effect: Effect) -> Delivery:
        # The caller holds the effect's row lock, and every delivery of this key goes through
        # that row; the unique key settles it all the same: a repeat inserts nothing and
        # answers with the record the first delivery wrote.
        record = self.model(
            idempotency_key=effect.idempotency_key,
            run_id=effect.run_id,
            payload=effect.payload,
            **self.columns(effect),
        )
        if not insert_new(record, unique="idempotency_key"):
            record = self.model._default_manager.get(idempotency_key=effect.idempotency_key)
        return Delivery(DeliveryResult.DELIVERED, reference=f"{self.prefix}:{record.pk}")

    def columns(self, effect: Effect) -> dict[str, Any]:
        return {name: effect.payload[name] for name in self.fields}


class NotificationAdapter(LocalAdapter):
    def columns(self, effect: Effect) -> dict[str, Any]:
        payload = effect.payload
        return {
            "route": payload["route"],
            "message": f"{payload['subject']} ({payload['event_id']})",
        }


LOCAL_ADAPTERS: dict[str, LocalAdapter] = {
    "create_follow_up": LocalAdapter(FollowUp, "follow-up", "route", "subject"),
    "queue_account_review": LocalAdapter(
        AccountReview, "account-review", "account_tier", "subject"
    ),
    "send_internal_notification": NotificationAdapter(InternalNotification, "notification"),
}
