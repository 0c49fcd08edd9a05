"""An effect's status moves only through its transitions: each from the statuses it names,
setting its own fields; any other move is refused and leaves the row as it was."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone
from django_fsm import ConcurrentTransition, TransitionNotAllowed

from automation.effects.models import Effect, EffectStatus
from automation.models import Run

NOW = timezone.now()


@pytest.fixture
def run(bare_run: Run) -> Run:
    return bare_run


def effect_in(run: Run, status: str, **fields: Any) -> Effect:
    effect = Effect.objects.create(
        run=run,
        name="notify",
        idempotency_key=f"key-{status}",
        payload={},
        authorization={"policy_version": "p1"},
        status=status,
        attempts=2,
        **fields,
    )
    return Effect.objects.get(pk=effect.pk)


def row(effect: Effect) -> dict[str, Any]:
    return Effect.objects.values().get(pk=effect.pk)


# (transition, its arguments, the statuses it leaves from, where it goes)
TRANSITIONS: list[tuple[str, dict[str, Any], set[str], str]] = [
    (
        "wait",
        {"next_attempt_at": NOW, "last_error": "HTTP 503"},
        {EffectStatus.PENDING, EffectStatus.RETRY_WAIT},
        EffectStatus.RETRY_WAIT,
    ),
    (
        "deliver",
        {"reference": "ref-1", "now": NOW},
        {EffectStatus.PENDING, EffectStatus.RETRY_WAIT},
        EffectStatus.DELIVERED,
    ),
    ("reject", {}, {EffectStatus.PENDING, EffectStatus.RETRY_WAIT}, EffectStatus.REJECTED),
    ("lose_track", {}, {EffectStatus.PENDING, EffectStatus.RETRY_WAIT}, EffectStatus.UNCERTAIN),
    (
        "send_again",
        {"attempts": 3, "deadline_at": NOW + timedelta(hours=1), "now": NOW},
        set(EffectStatus) - {EffectStatus.DELIVERED},
        EffectStatus.RETRY_WAIT,
    ),
    (
        "deliver_by_hand",
        {"reference": "by hand: lead", "now": NOW},
        set(EffectStatus) - {EffectStatus.DELIVERED},
        EffectStatus.DELIVERED,
    ),
]
CASES = [
    pytest.param(name, kwargs, status, status in sources, target, id=f"{name}-from-{status}")
    for name, kwargs, sources, target in TRANSITIONS
    for status in EffectStatus
]


@pytest.mark.parametrize(("name", "kwargs", "status", "allowed", "target"), CASES)
def test_a_transition_moves_only_from_its_sources(
    run: Run, name: str, kwargs: dict[str, Any], status: str, allowed: bool, target: str
) -> None:
    effect = effect_in(run, status)
    before = row(effect)

    if not allowed:
        with pytest.raises(TransitionNotAllowed):
            getattr(effect, name)(**kwargs)
        assert effect.status == status
        assert row(effect) == before
        return
    getattr(effect, name)(**kwargs)
    effect.save()

    assert row(effect)["status"] == target


def test_delivering_keeps_the_answer_and_clears_the_waits(run: Run) -> None:
    effect = effect_in(run, EffectStatus.RETRY_WAIT, next_attempt_at=NOW, lease_expires_at=NOW)

    effect.deliver(reference="ref-9", now=NOW)
    effect.save()

    stored = row(effect)
    assert (stored["status"], stored["response_ref"], stored["delivered_at"]) == (
        EffectStatus.DELIVERED,
        "ref-9",
        NOW,
    )
    assert stored["next_attempt_at"] is None and stored["lease_expires_at"] is None


def test_sending_again_grants_a_fresh_budget_on_the_same_key(run: Run) -> None:
    effect = effect_in(run, EffectStatus.UNCERTAIN, attempt_limit=2, lease_expires_at=NOW)
    deadline = NOW + timedelta(hours=1)

    effect.send_again(attempts=3, deadline_at=deadline, now=NOW)
    effect.save()

    stored = row(effect)
    assert stored["status"] == EffectStatus.RETRY_WAIT
    assert (stored["attempt_limit"], stored["deadline_at"], stored["next_attempt_at"]) == (
        5,
        deadline,
        NOW,
    )
    assert stored["lease_expires_at"] is None
    assert stored["idempotency_key"] == "key-uncertain"


def test_waiting_without_an_error_keeps_the_last_one(run: Run) -> None:
    effect = effect_in(run, EffectStatus.PENDING, last_error="HTTP 500")

    effect.wait(next_attempt_at=None)
    effect.save()

    assert (row(effect)["status"], row(effect)["last_error"]) == (
        EffectStatus.RETRY_WAIT,
        "HTTP 500",
    )


def test_status_cannot_be_assigned_directly(run: Run) -> None:
    effect = effect_in(run, EffectStatus.PENDING)

    with pytest.raises(AttributeError, match="Direct status modification is not allowed"):
        effect.status = EffectStatus.DELIVERED

    assert row(effect)["status"] == EffectStatus.PENDING


def test_a_stale_copy_cannot_move_the_status(run: Run) -> None:
    """Two copies read the waiting effect; the first delivers it; the second's rejection is
    refused rather than writing over the delivery."""
    first = effect_in(run, EffectStatus.RETRY_WAIT)
    second = Effect.objects.get(pk=first.pk)
    first.deliver(reference="ref-1", now=NOW)
    first.save()

    second.reject()
    with pytest.raises(ConcurrentTransition), transaction.atomic():
        second.save()

    assert row(first)["status"] == EffectStatus.DELIVERED
