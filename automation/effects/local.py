"""Effects recorded inside the console. get_or_create on the key: a repeat changes nothing."""

from __future__ import annotations

from automation.effects import Delivery, EffectAdapter
from automation.models import AccountReview, Effect, FollowUp, InternalNotification


class LocalAdapter:
    """Records the effect in the console's database, in the delivering transaction."""

    local = True
    honours_idempotency_keys = True
    max_attempts = 5
    deadline_seconds = 3600.0

    def deliver(self, effect: Effect) -> Delivery:
        return Delivery("delivered", reference=self.record(effect))

    def record(self, effect: Effect) -> str:
        raise NotImplementedError


class FollowUpAdapter(LocalAdapter):
    def record(self, effect: Effect) -> str:
        record, _ = FollowUp.objects.get_or_create(
            idempotency_key=effect.idempotency_key,
            defaults={
                "run_id": effect.run_id,
                "payload": effect.payload,
                "route": effect.payload["route"],
                "subject": effect.payload["subject"],
            },
        )
        return f"follow-up:{record.pk}"


class AccountReviewAdapter(LocalAdapter):
    def record(self, effect: Effect) -> str:
        record, _ = AccountReview.objects.get_or_create(
            idempotency_key=effect.idempotency_key,
            defaults={
                "run_id": effect.run_id,
                "payload": effect.payload,
                "account_tier": effect.payload["account_tier"],
                "subject": effect.payload["subject"],
            },
        )
        return f"account-review:{record.pk}"


class NotificationAdapter(LocalAdapter):
    def record(self, effect: Effect) -> str:
        record, _ = InternalNotification.objects.get_or_create(
            idempotency_key=effect.idempotency_key,
            defaults={
                "run_id": effect.run_id,
                "payload": effect.payload,
                "route": effect.payload["route"],
                "message": f"{effect.payload['subject']} ({effect.payload['event_id']})",
            },
        )
        return f"notification:{record.pk}"


LOCAL_ADAPTERS: dict[str, EffectAdapter] = {
    "create_follow_up": FollowUpAdapter(),
    "queue_account_review": AccountReviewAdapter(),
    "send_internal_notification": NotificationAdapter(),
}
