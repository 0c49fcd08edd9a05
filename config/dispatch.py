"""Enqueueing work: only after commit, and by dotted path so apps need not import each other.

A queue message is a nudge, never the truth: every task re-reads its row and does nothing when
the work is already done. `inline()` swaps django-q2 for an in-process list, which the fixture
runner and the tests drain by calling the very same task functions the workers call.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.utils.module_loading import import_string


@dataclass(frozen=True)
class Message:
    func: str
    args: tuple[Any, ...]

    def run(self) -> Any:
        return import_string(self.func)(*self.args)


_inline: contextvars.ContextVar[deque[Message] | None] = contextvars.ContextVar(
    "gatehouse_inline_queue", default=None
)


def enqueue_after_commit(func: str, *args: Any) -> None:
    """Send `func(*args)` to the workers once the current transaction commits."""
    message = Message(func, args)
    transaction.on_commit(lambda: _send(message))


def _send(message: Message) -> None:
    queue = _inline.get()
    if queue is not None:
        queue.append(message)
        return
    from django_q.tasks import async_task

    async_task(message.func, *message.args, task_name=f"{message.func}{message.args}"[:100])


@contextlib.contextmanager
def inline() -> Iterator[deque[Message]]:
    """Collect messages in memory instead of sending them (drained by the caller)."""
    queue: deque[Message] = deque()
    token = _inline.set(queue)
    try:
        yield queue
    finally:
        _inline.reset(token)


def drain(queue: deque[Message], limit: int = 10_000) -> int:
    """Run collected messages until none are left; returns how many ran."""
    count = 0
    while queue and count < limit:
        queue.popleft().run()
        count += 1
    return count
