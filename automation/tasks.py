"""Worker entry points: ids in, one service call. Duplicates and late messages do nothing."""

from __future__ import annotations

import logging

from django_fsm import ConcurrentTransition, TransitionNotAllowed

from automation import services

log = logging.getLogger(__name__)


def advance_run(run_id: int) -> str | None:
    try:
        return services.run_advance(run_id=run_id)
    except (ConcurrentTransition, TransitionNotAllowed) as exc:
        # Another worker moved the run first; its step stands, ours is void.
        log.info("run %s: step lost a race: %s", run_id, exc)
        return None


def deliver_effect(effect_id: int) -> str | None:
    try:
        return services.effect_deliver(effect_id=effect_id)
    except (ConcurrentTransition, TransitionNotAllowed) as exc:
        log.info("effect %s: delivery lost a race: %s", effect_id, exc)
        return None


def sweep() -> dict[str, int]:
    return services.sweep_due()


def process_batch(batch_id: int) -> None:
    from automation.services.recovery import batch_process

    batch_process(batch_id=batch_id)


def process_simulation(simulation_id: int) -> None:
    from automation.services.simulation import simulation_process

    simulation_process(simulation_id=simulation_id)
