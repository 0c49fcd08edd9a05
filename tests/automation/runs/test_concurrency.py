"""At-least-once delivery and racing submissions: the rows, not the messages, decide.

Real threads on real connections: each thread has its own PostgreSQL session, so row locks,
SKIP LOCKED and the unique index arbitrate exactly as they do between two workers.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from email.message import EmailMessage
from typing import Any

import pytest
from django.db import connection, transaction
from django.utils import timezone

from accounts.roles import roles_ensure
from automation import tasks
from automation.classifiers.recorded import RecordedClassifier
from automation.intake.services import MAIL_TYPE, IntakeResult, channel_get_or_create, intake_submit
from automation.models import (
    AuditEvent,
    ClassificationAttempt,
    Effect,
    EffectStatus,
    IntakeChannel,
    IntakeRecord,
    Outcome,
    Run,
    StageRecord,
    State,
    Task,
)
from automation.runs.sending import ADVANCE_RUN_TASK, DELIVER_EFFECT_TASK
from tests.catalogues import SIGNING_VARIABLE, activate_effects, http_effect
from tests.conftest import Pipeline, decision_for, make_event
from tests.downstream import Downstream, running_downstream
from worker.dispatch import Message, inline

SECRET = "s" * 32

pytestmark = pytest.mark.django_db(transaction=True)

STAGES = ["intake", "validate", "normalize", "enrich", "classify", "decide", "execute", "complete"]


def at_once(*calls: Callable[[], Any]) -> tuple[list[Any], list[Message]]:
    """Run the calls in threads released together; return their results and enqueued work."""
    barrier = threading.Barrier(len(calls))
    results: list[Any] = [None] * len(calls)
    errors: list[BaseException] = []
    messages: list[Message] = []

    def worker(index: int, call: Callable[[], Any]) -> None:
        try:
            with inline() as queue:
                barrier.wait(timeout=10)
                results[index] = call()
            messages.extend(queue)
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=worker, args=item) for item in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not any(thread.is_alive() for thread in threads)
    assert errors == []
    return results, messages


def submit(pipeline: Pipeline, event: dict[str, Any]) -> IntakeResult:
    return intake_submit(
        channel=pipeline.channel,
        raw=json.dumps(event).encode(),
        content_type="application/json",
        source="test",
    )


def started(pipeline: Pipeline, event_id: str) -> Run:
    event = make_event(event_id=event_id)
    result = pipeline.submit(event, [decision_for(event)], drain=False)
    assert result.code == "accepted"
    return pipeline.run(result)


def assert_done_once(run: Run) -> None:
    run.refresh_from_db()
    assert (run.state, run.outcome) == (State.COMPLETED, Outcome.COMPLETED)
    assert Counter(StageRecord.objects.filter(run=run).values_list("stage", flat=True)) == (
        Counter(STAGES)
    )
    assert ClassificationAttempt.objects.filter(run=run).count() == 1
    assert Effect.objects.filter(run=run).count() == 1
    effect = Effect.objects.get(run=run)
    assert (effect.status, effect.attempts) == (EffectStatus.DELIVERED, 1)
    assert Task.objects.filter(idempotency_key=effect.idempotency_key).count() == 1
    actions = Counter(AuditEvent.objects.filter(run=run).values_list("action", flat=True))
    assert max(actions.values()) == 1


def test_same_event_submitted_twice_at_once_makes_exactly_one_run(pipeline: Pipeline) -> None:
    for n in range(5):  # several rounds: each may resolve the race a different way
        event = make_event(event_id=f"evt-race-{n}")
        pipeline.record(event["event_id"], [decision_for(event)])

        (first, second), messages = at_once(
            lambda event=event: submit(pipeline, event),
            lambda event=event: submit(pipeline, event),
        )

        assert sorted([first.code, second.code]) == ["accepted", Outcome.IDEMPOTENT_REPLAY]
        assert first.run.pk == second.run.pk
        runs = Run.objects.filter(channel=pipeline.channel, event_id=event["event_id"])
        assert runs.count() == 1
        assert (
            AuditEvent.objects.filter(
                action="intake.idempotent_replay", data__existing_run=first.run.pk
            ).count()
            == 1
        )
        assert messages == [Message(ADVANCE_RUN_TASK, (first.run.pk,))]

        pipeline.queue.extend(messages)
        pipeline.drain()

        assert_done_once(runs.get())
    assert IntakeRecord.objects.count() == 10
    assert Effect.objects.count() == Task.objects.count() == 5


def lease_lost_in_enriched(pipeline: Pipeline, run: Run) -> None:
    """What a worker killed during the classifier call leaves: the run carried to `enriched`
    (committed) with the call's lease taken, its message unspent; the lease then runs out."""

    def dies(*args: Any, **kwargs: Any) -> Any:
        raise SystemExit("worker killed during the classifier call")

    event = make_event(event_id=run.event_id)
    pipeline.record(run.event_id, [decision_for(event)] * 2)  # what attempt 2 will read
    message = pipeline.queue.popleft()
    original = RecordedClassifier.classify
    RecordedClassifier.classify = dies  # type: ignore[method-assign]
    try:
        with pytest.raises(SystemExit), inline():
            message.run()
    finally:
        RecordedClassifier.classify = original  # type: ignore[method-assign]
    run.refresh_from_db()
    assert (run.state, run.classify_attempts) == (State.ENRICHED, 1)
    assert run.lease_expires_at is not None
    assert run.dispatched_at is not None  # its message was never spent
    Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now())
    pipeline.queue.append(message)  # redelivered: the broker never saw it acknowledged


# Where a run rests between messages: just taken in (its first message waits), and carried
# to `enriched` by a worker that died during the classifier call.
RESTING = ["received", "enriched_lease_lost"]


def resting(pipeline: Pipeline, where: str) -> Run:
    run = started(pipeline, "evt-dup")
    if where == "enriched_lease_lost":
        lease_lost_in_enriched(pipeline, run)
    assert len(pipeline.queue) == 1  # the run's own message is still waiting
    return run


@pytest.mark.parametrize("where", RESTING)
def test_a_message_delivered_twice_in_a_row_does_each_step_once(
    pipeline: Pipeline, where: str
) -> None:
    run = resting(pipeline, where)

    with inline() as queue:
        tasks.advance_run(run.pk)  # the duplicate arrives first
    pipeline.queue.extend(queue)
    pipeline.drain()

    assert_done_once(run)


@pytest.mark.parametrize("where", RESTING)
def test_a_message_delivered_twice_at_once_does_each_step_once(
    pipeline: Pipeline, where: str
) -> None:
    run = resting(pipeline, where)
    pipeline.queue.clear()  # replaced by the two copies below

    _, messages = at_once(lambda: tasks.advance_run(run.pk), lambda: tasks.advance_run(run.pk))
    pipeline.queue.extend(messages)
    pipeline.drain()

    assert_done_once(run)


def test_one_message_carries_a_straight_through_run_to_completion(pipeline: Pipeline) -> None:
    run = started(pipeline, "evt-one")
    assert list(pipeline.queue) == [Message(ADVANCE_RUN_TASK, (run.pk,))]

    with inline() as queue:
        assert tasks.advance_run(run.pk) == State.COMPLETED
    assert not queue  # nothing further to send: every step was taken by this message

    assert_done_once(run)
    run.refresh_from_db()
    assert run.dispatched_at is None  # spent: the sweep may look after the run again


def test_concurrent_steps_of_different_runs_never_skip_each_other(pipeline: Pipeline) -> None:
    """Runs of one channel share its row: a step locks only its own run's row, so steps of
    different runs taken at the same moment all go through (none finds a row locked)."""
    runs = [started(pipeline, f"evt-side-{n}") for n in range(6)]
    pipeline.queue.clear()

    results, messages = at_once(*(lambda run=run: tasks.advance_run(run.pk) for run in runs))

    assert results == [State.COMPLETED] * len(runs)
    assert messages == []
    for run in runs:
        assert_done_once(run)


def test_classifier_answer_survives_another_session_holding_the_run(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = started(pipeline, "evt-held")
    pipeline.queue.clear()
    locked, release = threading.Event(), threading.Event()

    def hold_row() -> None:
        # What a duplicate message (or an operator's run_nudge) does: lock the row.
        try:
            with transaction.atomic():
                Run.objects.select_for_update().get(pk=run.pk)
                locked.set()
                release.wait(timeout=2)  # a fixed pipeline waits here for the lock
        finally:
            connection.close()

    holder = threading.Thread(target=hold_row)
    recorded = RecordedClassifier.classify

    def classify_while_the_row_is_held(
        self: RecordedClassifier, event: Any, attempt: int, *, deadline: float
    ) -> Any:
        answer = recorded(self, event, attempt, deadline=deadline)
        holder.start()
        assert locked.wait(timeout=10)
        return answer

    monkeypatch.setattr(RecordedClassifier, "classify", classify_while_the_row_is_held)

    with inline() as queue:
        tasks.advance_run(run.pk)
    release.set()
    holder.join(timeout=10)
    pipeline.queue.extend(queue)
    pipeline.drain()

    assert ClassificationAttempt.objects.filter(run=run).count() == 1
    assert_done_once(run)


@pytest.fixture
def remote_follow_up(monkeypatch: pytest.MonkeyPatch, policy: None) -> Iterator[Downstream]:
    """create_follow_up delivered over HTTP: its delivery is a message of its own."""
    monkeypatch.setenv(SIGNING_VARIABLE, SECRET)
    roles_ensure()  # a version is stored only if the groups its catalogue names exist
    with running_downstream(SECRET) as downstream:
        follow_up = http_effect(
            downstream.url, read_timeout=2, max_attempts=3, honours_idempotency_keys=True
        )
        activate_effects({"create_follow_up": follow_up})
        yield downstream


def _effect_ready(pipeline: Pipeline) -> tuple[Run, Effect]:
    run = started(pipeline, "evt-deliver")
    with inline() as queue:
        assert tasks.advance_run(run.pk) == State.EXECUTING
    effect = Effect.objects.get(run=run)
    assert list(queue) == [Message(DELIVER_EFFECT_TASK, (effect.pk,))]
    pipeline.queue.clear()
    return run, effect


def assert_delivered_once(run: Run, downstream: Downstream) -> None:
    run.refresh_from_db()
    assert (run.state, run.outcome) == (State.COMPLETED, Outcome.COMPLETED)
    effect = Effect.objects.get(run=run)
    assert (effect.status, effect.attempts) == (EffectStatus.DELIVERED, 1)
    assert downstream.performed == [effect.idempotency_key]
    assert StageRecord.objects.filter(run=run, stage="complete").count() == 1


def test_effect_message_delivered_twice_in_a_row_delivers_once(
    pipeline: Pipeline, remote_follow_up: Downstream
) -> None:
    run, effect = _effect_ready(pipeline)

    first = tasks.deliver_effect(effect.pk)
    second = tasks.deliver_effect(effect.pk)

    assert (first, second) == (EffectStatus.DELIVERED, None)
    assert_delivered_once(run, remote_follow_up)


def test_effect_message_delivered_twice_at_once_delivers_once(
    pipeline: Pipeline, remote_follow_up: Downstream
) -> None:
    run, effect = _effect_ready(pipeline)

    results, messages = at_once(
        lambda: tasks.deliver_effect(effect.pk), lambda: tasks.deliver_effect(effect.pk)
    )

    assert Counter(results) == Counter([EffectStatus.DELIVERED, None])
    assert messages == []
    assert_delivered_once(run, remote_follow_up)


def test_same_event_id_with_different_content_at_once_runs_one_and_refuses_the_other(
    pipeline: Pipeline,
) -> None:
    one = make_event(event_id="evt-race")
    other = make_event(event_id="evt-race", subject="Different content")

    (first, second), messages = at_once(
        lambda: submit(pipeline, one), lambda: submit(pipeline, other)
    )

    codes = {first.code, second.code}
    assert codes == {"accepted", Outcome.IDEMPOTENCY_CONFLICT}
    assert first.run.pk == second.run.pk
    assert Run.objects.filter(event_id="evt-race").count() == 1
    assert len(messages) == 1
    assert AuditEvent.objects.filter(action="intake.idempotency_conflict").count() == 1


def test_one_message_by_the_mailbox_and_the_api_at_once_makes_one_run(
    pipeline: Pipeline,
) -> None:
    mailbox = channel_get_or_create(name="email")
    api = channel_get_or_create(name="api")

    def take(channel: IntakeChannel, raw: bytes) -> IntakeResult:
        return intake_submit(
            channel=channel, raw=raw, content_type=MAIL_TYPE, source=f"race:{channel.name}"
        )

    for n in range(5):  # several rounds: each may resolve the race a different way
        message = EmailMessage()
        message["From"] = "ana@northwind-traders.test"
        message["Subject"] = "Quote for 10 seats"
        message["Message-ID"] = f"<race-{n}@northwind-traders.test>"
        message.set_content("Please send a quote for 10 seats.")
        raw = message.as_bytes()

        (first, second), messages = at_once(
            lambda raw=raw: take(mailbox, raw), lambda raw=raw: take(api, raw)
        )

        assert sorted([first.code, second.code]) == ["accepted", Outcome.IDEMPOTENT_REPLAY]
        assert first.run.pk == second.run.pk
        assert Run.objects.filter(event_id=f"race-{n}@northwind-traders.test").count() == 1
        assert messages == [Message(ADVANCE_RUN_TASK, (first.run.pk,))]


def test_late_message_for_a_completed_run_does_nothing(pipeline: Pipeline) -> None:
    event = make_event(event_id="evt-late")
    run = pipeline.run(pipeline.submit(event, [decision_for(event)]))
    assert run.state == State.COMPLETED
    effect = Effect.objects.get(run=run)
    before = Run.objects.values().get(pk=run.pk)
    counts = (StageRecord.objects.count(), AuditEvent.objects.count(), Task.objects.count())

    with inline() as queue:
        assert tasks.advance_run(run.pk) is None
        assert tasks.deliver_effect(effect.pk) is None

    assert not queue
    assert Run.objects.values().get(pk=run.pk) == before
    assert (StageRecord.objects.count(), AuditEvent.objects.count(), Task.objects.count()) == (
        counts
    )
