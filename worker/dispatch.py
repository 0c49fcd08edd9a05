"""Sending work to the workers: with the transaction that asks for it, by dotted path.

With django-q2's ORM broker (the default) a message is a row of the broker's table written
in the caller's own transaction, a transactional outbox: it exists exactly when the change
that asked for it commits, and never without it. On PostgreSQL a trigger on that table
wakes idle workers when the transaction commits (`worker.broker`). With Redis a message is
pushed once the transaction commits. `batch()` sends every message a block asks for in one
statement (intake of a mailbox, batch recovery, the sweep).

A message is a nudge, never the truth: every task re-reads its row and does nothing when
the work is already done. Routine tasks store no result when they succeed (a failure is
kept in django-q2's table). Each message goes to a priority queue: `urgent` for work a
person is waiting for, `live` for intake, `bulk` for batch recovery and replays.

A message may be delayed (`not_before`): a retry sent with the answer that asked for it,
taken by a worker when its backoff runs out rather than when the next sweep comes by. With
the ORM broker it is a row whose `lock` (the time from which the broker hands it out) lies
in the future; with Redis it waits in a sorted set by due time until the broker moves it to
its queue (`worker.broker`). Delays are kept short (at most MAX_DELAY): a longer wait is
sent by the sweep once it comes that near, so no message waits long in the broker, and the
sweep's view of the oldest unspent message stays close to now.

`inline()` swaps the broker for an in-process list, which the fixture runner and the tests
drain by calling the very same task functions the workers call.
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from django.db import transaction
from django.utils import timezone
from django.utils.module_loading import import_string


class Priority(StrEnum):
    URGENT = "urgent"  # a person waits: a correction, an approval's effect, a console retry
    LIVE = "live"  # intake
    BULK = "bulk"  # batch recovery, replays of many runs


# The longest a message is delayed; the sweep (every minute) sends what is due within it.
MAX_DELAY = timedelta(seconds=90)


@dataclass(frozen=True)
class Message:
    func: str
    args: tuple[Any, ...]
    priority: Priority = field(default=Priority.LIVE, compare=False)
    # Not handed to a worker before this time (None: at once).
    not_before: datetime | None = field(default=None, compare=False)

    def run(self) -> Any:
        return import_string(self.func)(*self.args)


_inline: contextvars.ContextVar[deque[Message] | None] = contextvars.ContextVar(
    "gatehouse_inline_queue", default=None
)


@dataclass
class _Batch:
    messages: list[Message]
    priority: Priority | None


_batch: contextvars.ContextVar[_Batch | None] = contextvars.ContextVar(
    "gatehouse_message_batch", default=None
)


def enqueue_after_commit(
    func: str,
    *args: Any,
    priority: Priority = Priority.LIVE,
    not_before: datetime | None = None,
) -> None:
    """Send `func(*args)` to the workers as part of the current transaction's commit; with
    `not_before`, to be taken no earlier than that (at most MAX_DELAY on: see above).

    Inline, a delayed message is queued like any other: the caller that drains it controls
    time itself, and a task run before it is due does nothing."""
    current = _batch.get()
    if current is not None and current.priority is not None:
        priority = current.priority
    message = Message(func, args, priority, not_before)
    if _inline.get() is not None or _broker_mode() != "orm":
        transaction.on_commit(lambda: _send([message]))
    elif current is not None:
        current.messages.append(message)
    else:
        _send([message])  # a row in the current transaction


@contextlib.contextmanager
def batch(*, priority: Priority | None = None) -> Iterator[None]:
    """Send the messages the block asks for together, in one statement, when it ends; with
    `priority`, all of them to that queue (a batch recovery goes to `bulk`)."""
    outer = _batch.get()
    if outer is not None and priority is None:  # inside a batch already: the outer one sends
        yield
        return
    current = _Batch([], priority)
    token = _batch.set(current)
    try:
        yield
    finally:
        _batch.reset(token)
    if current.messages:
        if outer is not None:
            outer.messages.extend(current.messages)
        else:
            _send(current.messages)


def _broker_mode() -> str:
    from django_q.conf import Conf

    if Conf.SYNC:
        return "sync"
    return "orm" if Conf.ORM else "other"


def _send(messages: list[Message]) -> None:
    queue = _inline.get()
    if queue is not None:
        queue.extend(messages)
        return
    mode = _broker_mode()
    if mode == "orm":
        _insert(messages)
        return
    from django_q.tasks import async_task

    for message in messages:
        options: dict[str, Any] = {"save": False}
        if mode != "sync":
            broker = _broker_for(message.priority)
            if _delayed(message) and hasattr(broker, "enqueue_at"):
                broker.enqueue_at(_package(message), message.not_before)
                continue
            options["broker"] = broker
        async_task(message.func, *message.args, task_name=_name(message), q_options=options)


def _delayed(message: Message) -> bool:
    return message.not_before is not None and message.not_before > timezone.now()


def _name(message: Message) -> str:
    return f"{message.func}{message.args}"[:100]


def _package(message: Message) -> str:
    """The signed task package django-q2's async_task would build for this message."""
    from django_q.conf import Conf
    from django_q.signals import pre_enqueue
    from django_q.signing import SignedPackage

    task: dict[str, Any] = {
        "id": uuid.uuid4().hex,  # as django_q.humanhash.uuid()[1], without the words
        "name": _name(message),
        "func": message.func,
        "args": message.args,
        "save": False,
        "ack_failure": Conf.ACK_FAILURES,
        "kwargs": {},
        "started": timezone.now(),
    }
    pre_enqueue.send(sender="django_q", task=task)
    return str(SignedPackage.dumps(task))


def _rows(messages: list[Message]) -> list[Any]:
    """The ORM broker's rows (django_q.models.OrmQ) that carry the messages."""
    from django_q.models import OrmQ

    now = timezone.now()
    return [OrmQ(**_message_fields(message, now)) for message in messages]


def _message_fields(message: Message, now: datetime) -> dict[str, Any]:
    """The fields of the ORM broker's row (OrmQ) that carries the message, sent at `now`."""
    from django_q.conf import Conf

    from worker.broker import delayed_key, queue_key

    key = queue_key(Conf.CLUSTER_NAME, message.priority)
    if message.not_before is None or message.not_before <= now:
        return {"key": key, "payload": _package(message), "lock": now}
    # The broker hands out a row once its lock has passed: a delayed message is one whose
    # lock is its due time (worker.broker takes rows WHERE lock < now), under the key that
    # is served before its queue's own.
    return {"key": delayed_key(key), "payload": _package(message), "lock": message.not_before}


def _insert(messages: list[Message]) -> None:
    """Write the messages to the ORM broker's table, in the current transaction."""
    from django_q.conf import Conf
    from django_q.models import OrmQ

    OrmQ.objects.using(Conf.ORM).bulk_create(_rows(messages))


def _broker_for(priority: Priority) -> Any:
    from django_q.brokers import get_broker
    from django_q.conf import Conf

    from worker.broker import queue_key

    return get_broker(queue_key(Conf.CLUSTER_NAME, priority))


def oldest_unspent() -> datetime | None:
    """When the oldest message not yet spent was sent; None if every message is spent.

    Unspent: waiting in a queue or, with the ORM broker, taken by a worker that has not
    acknowledged it (it runs, waits in its cluster, or comes back after the broker's retry
    if the worker died). Messages are taken oldest first, so a message sent before this time
    has been spent or lost. (Redis shows only the waiting ones: a taken message is gone from
    its list.)
    """
    from django_q.conf import Conf
    from django_q.signing import SignedPackage

    from worker.broker import PRIORITIES, delayed_key, queue_key

    mode = _broker_mode()
    if _inline.get() is not None or mode == "sync":
        return None
    keys = [queue_key(Conf.CLUSTER_NAME, p) for p in PRIORITIES]
    if mode == "orm":
        keys += [delayed_key(key) for key in keys]
    heads: list[Any] = []
    if mode == "orm":
        from django_q.models import OrmQ

        heads = list(
            OrmQ.objects.using(Conf.ORM)
            .filter(key__in=keys)
            .order_by("id")
            .values_list("payload", flat=True)[:1]
        )
    else:
        broker = _broker_for(Priority.LIVE)
        heads = [broker.connection.lindex(key, 0) for key in getattr(broker, "keys", [])]
    times = [SignedPackage.loads(head)["started"] for head in heads if head is not None]
    if mode != "orm":
        times.extend(_delayed_sent_since(_broker_for(Priority.LIVE)))
    return min(times) if times else None


def _delayed_sent_since(broker: Any) -> list[datetime]:
    """Redis: for each set of delayed messages, a time none of them was sent before. A set
    is ordered by due time, and a message is due at most MAX_DELAY after it was sent."""
    since = []
    for key in getattr(broker, "delayed_keys", []):
        for _, due in broker.connection.zrange(key, 0, 0, withscores=True):
            since.append(datetime.fromtimestamp(due, tz=UTC) - MAX_DELAY)
    return since


@contextlib.contextmanager
def inline() -> Iterator[deque[Message]]:
    """Collect messages in memory instead of sending them (drained by the caller)."""
    queue: deque[Message] = deque()
    token = _inline.set(queue)
    try:
        yield queue
    finally:
        _inline.reset(token)


def drain(
    queue: deque[Message],
    *,
    limit: int | None = 10_000,
    stop: Callable[[], bool] | None = None,
    when_idle: Callable[[], bool] | None = None,
) -> bool:
    """Run collected messages one by one until none are left; False if `limit` steps did not
    settle it (work that loops is a bug, not a hang; None: no limit).

    `stop` ends it early (a state reached). `when_idle`, asked when the queue is empty, may
    start more work itself (a retry whose backoff has run out) and says whether it did.
    """
    for _ in range(limit) if limit is not None else itertools.count():
        if stop is not None and stop():
            return True
        if queue:
            queue.popleft().run()
        elif when_idle is None or not when_idle():
            return True
    return False
