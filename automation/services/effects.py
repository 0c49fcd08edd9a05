"""The outbox: deliver an effect once per idempotency key, and check what authorised it."""

from __future__ import annotations

from datetime import datetime

from django.db import connection, transaction
from django.utils import timezone

from approvals.models import ApprovalRequest, ApprovalStatus
from automation.effects import get_adapter
from automation.models import (
    Effect,
    EffectStatus,
    State,
)
from automation.services.records import (
    Stage,
    binding_of,
    lock_run,
    move,
)
from policy.models import PolicyVersion

# --- effects ---------------------------------------------------------------------------


def effect_deliver(*, effect_id: int, now: datetime | None = None) -> str | None:
    """Deliver one outbox row and complete its run, all in one transaction (local adapters)."""
    now = now or timezone.now()
    with transaction.atomic():
        # SKIP LOCKED: a duplicated message for a row being delivered right now does nothing.
        effect = (
            Effect.objects.select_for_update(
                skip_locked=connection.features.has_select_for_update_skip_locked
            )
            .filter(pk=effect_id, status__in=[EffectStatus.PENDING, EffectStatus.RETRY_WAIT])
            .first()
        )
        if effect is None:
            return None
        run = lock_run(effect.run_id, wait=True)  # we hold the effect: finish the delivery
        if run is None or run.state != State.EXECUTING:
            return None
        stage = Stage("execute", attempt=effect.attempts + 1)
        effect.response_ref = get_adapter(effect.name).deliver(effect)
        effect.status = EffectStatus.DELIVERED
        effect.attempts += 1
        effect.delivered_at = now
        effect.save(update_fields=["response_ref", "status", "attempts", "delivered_at"])
        stage.record(run, "delivered")
        move(
            run,
            "complete",
            stage=Stage("complete"),
            checkpoint={"effect": effect.pk, "response_ref": effect.response_ref},
            finished_at=now,
        )
        return effect.status


def effect_is_authorized(effect: Effect) -> bool:
    """Audit check: did policy (and, where it asks, a fresh counted approval) allow this row?"""
    run = effect.run
    auth = effect.authorization
    if auth.get("policy_version") != run.policy_version or effect.name != run.effect_name:
        return False
    if not run.rules or not all(rule["passed"] for rule in run.rules):
        return False
    rule = PolicyVersion.objects.get(name=run.policy_version).parsed.approvals.get(effect.name)
    if rule is None:
        return True
    request = ApprovalRequest.objects.filter(pk=auth.get("approval_request"), run=run).first()
    if request is None or request.status != ApprovalStatus.APPROVED:
        return False
    counted = request.decisions.filter(counted=True, approve=True).values("user").distinct()
    return request.binding() == binding_of(run) and counted.count() >= rule.approvers
