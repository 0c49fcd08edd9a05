"""The pipeline's third part: a decided run's effect written to the outbox and delivered.

The one place an effect enters the outbox (`effect_write`); a local effect is delivered in the
carrying transaction, a remote one by a message of its own. Composed by
automation/pipeline/services.py.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from jinja2 import TemplateError

from audit.models import AuditAction
from automation.effects.adapters import adapter_for
from automation.effects.base import EffectAdapter
from automation.effects.models import Effect, EffectStatus
from automation.effects.services import (
    DELIVERABLE,
    adapter_of,
    effect_budget,
    effect_deliver_locked,
    effect_priority,
    effect_send,
)
from automation.pipeline.classify import hold_with_problems
from automation.runs.journal import Stage, record_audit, record_transition
from automation.runs.models import Run, StageName, StageOutcome, State
from automation.runs.parameters import unwritten
from automation.runs.payloads import effect_key, effect_payload_of
from automation.runs.sendable import effect_problems
from core.codes import Outcome
from core.rows import insert_new
from policy.catalogue import Catalogue


def effect_write(
    run: Run, *, authorization: dict[str, Any], now: datetime, business: Catalogue
) -> Effect | None:
    """Write the outbox row in the transaction that moved the run to executing.

    The one place an effect enters the outbox, so the one place its parameters are held to
    the run's catalogue (automation.runs.sendable), whatever path brought the run here: an
    effect that fails writes no row, and the run is held with the parameters named (None).
    """
    problems = effect_problems(business, run.effect_name, run, run.classification or {})
    payload: dict[str, Any] = {}
    if not problems:
        try:
            payload = effect_payload_of(run, business)
        except TemplateError as exc:  # within its time budget when checked, over it now
            problems = [unwritten(run.effect_name, exc)]
    if problems:
        hold_with_problems(run, Stage(StageName.EXECUTE), Outcome.EXTRACTION_INVALID, problems)
        return None
    adapter = adapter_for(business, run.effect_name)
    attempts, deadline = effect_budget(adapter, now)
    key = effect_key(scope=run.identity_scope, fingerprint=run.fingerprint, effect=run.effect_name)
    effect = Effect(
        idempotency_key=key,
        run=run,
        name=run.effect_name,
        payload=payload,
        authorization=authorization,
        attempt_limit=attempts,
        deadline_at=deadline,
    )
    if insert_new(effect, unique="idempotency_key"):
        return effect  # delivered by the run's next step (see step_executing)
    effect = Effect.objects.select_for_update().get(idempotency_key=key)
    if effect.run_id != run.pk:
        return _reach_existing_effect(run, effect, authorization, now, adapter)
    return effect


def _reach_existing_effect(
    run: Run, effect: Effect, authorization: dict[str, Any], now: datetime, adapter: EffectAdapter
) -> Effect:
    """A replay reached an effect key that already has a row: never a second effect.

    Delivered: the replay completes without sending anything. Not delivered (rejected,
    uncertain, held): the replay takes the row over, same key, with a fresh budget.
    """
    if effect.status == EffectStatus.DELIVERED:
        record_transition(
            run,
            run.complete,
            stage=Stage(StageName.EXECUTE),
            stage_outcome=StageOutcome.ALREADY_DELIVERED,
            checkpoint={"effect": effect.pk, "already_delivered": True},
            finished_at=now,
            save=False,
        )
        return effect
    previous = effect.run_id
    attempts, deadline_at = effect_budget(adapter, now)
    effect.run = run
    effect.authorization = authorization
    effect.send_again(attempts=attempts, deadline_at=deadline_at, now=now)
    effect.save()
    record_audit(run, AuditAction.EFFECT_ADOPTED, effect=effect.pk, from_run=previous)
    return effect


def step_executing(run: Run, now: datetime) -> bool:
    """Deliver the run's effect: a local one here, in this transaction; a remote one by a
    message of its own (it calls out, so it runs outside any transaction)."""
    effect = Effect.objects.select_for_update().filter(run=run, status__in=DELIVERABLE).first()
    if effect is None:
        return False
    return _deliver(run, effect, now)


def deliver_written(run: Run, effect: Effect, now: datetime, business: Catalogue) -> None:
    """Deliver the outbox row just written (locked by its writer), unless the run is done:
    a replay that reached an effect already delivered completes without one."""
    if run.state == State.EXECUTING and effect.status in DELIVERABLE:
        _deliver(run, effect, now, business)


def _deliver(run: Run, effect: Effect, now: datetime, business: Catalogue | None = None) -> bool:
    """Deliver a local effect here; send a remote one to the workers. `business`: the
    catalogue that authorised it, when the caller has it at hand."""
    adapter = adapter_of(effect) if business is None else adapter_for(business, effect.name)
    if adapter.local:
        return effect_deliver_locked(effect=effect, run=run, adapter=adapter, now=now)
    effect_send(effect=effect, now=now, priority=effect_priority(effect))
    return False
