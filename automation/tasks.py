"""Worker entry points: ids in, one service call. Duplicates and late messages do nothing."""

from __future__ import annotations

from django_fsm import ConcurrentTransition, TransitionNotAllowed

from automation.effects.services import effect_deliver
from automation.models import Effect
from automation.pipeline import shadow
from automation.pipeline.evaluation import labelled_set_evaluation_run
from automation.pipeline.operations import sweep_due
from automation.pipeline.services import run_advance
from automation.recovery.services import batch_process
from automation.recovery.simulation import simulation_process
from automation.runs.runlog import log_run_id


def advance_run(run_id: int) -> str | None:
    try:
        return run_advance(run_id=run_id)
    except (ConcurrentTransition, TransitionNotAllowed) as exc:
        # Another worker moved the run first; its step stands, ours is void.
        log_run_id(run_id, f"run {run_id}: step lost a race", error=str(exc))
        return None


def deliver_effect(effect_id: int) -> str | None:
    try:
        return effect_deliver(effect_id=effect_id)
    except (ConcurrentTransition, TransitionNotAllowed) as exc:
        run_id = Effect.objects.filter(pk=effect_id).values_list("run_id", flat=True).first()
        log_run_id(
            run_id, f"effect {effect_id}: delivery lost a race", effect_id=effect_id, error=str(exc)
        )
        return None


def sweep() -> dict[str, int]:
    return sweep_due()


def process_batch(batch_id: int) -> None:
    batch_process(batch_id=batch_id)


def process_simulation(simulation_id: int) -> None:
    simulation_process(simulation_id=simulation_id)


def shadow_read(run_id: int, classifier: str) -> str:
    return shadow.shadow_read(run_id=run_id, classifier=classifier)


def evaluate_labelled_set(evaluation_id: int) -> str:
    return labelled_set_evaluation_run(evaluation_id=evaluation_id)


def train_into_shadow(training_id: int) -> str:
    return shadow.classifier_training_run(training_id=training_id)
