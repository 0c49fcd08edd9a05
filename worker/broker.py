"""django-q2 brokers with priority queues, and on PostgreSQL a wake-up instead of a poll.

Gatehouse sends each message to one of three queues of its cluster (`worker.dispatch`):
`urgent` (a person waits for it), `live` (intake), `bulk` (batch recovery and replays). A
cluster serves the queues named in `GATEHOUSE_Q_SERVES` (all three by default) in that
order: a worker always takes urgent work first and bulk work last, so a person's retry
overtakes any backlog and a bulk replay never delays live intake. Strict order can starve
`bulk` while live traffic never pauses; a deployment that must guarantee bulk progress
runs a second cluster that serves only `bulk`.

PriorityOrmBroker keeps django-q2's ORM table (`django_q_ormq`) and its at-least-once
semantics (a message is leased, and deleted only when its task is acknowledged), and
changes three things:

- a message is written in the caller's transaction (a transactional outbox, see dispatch);
- one statement batch takes up to `bulk` messages with `FOR UPDATE SKIP LOCKED`, one commit
  for the batch instead of one per message, so two clusters never take the same message;
- an idle pusher waits on `LISTEN gatehouse_q`, which a trigger on the table notifies when
  a transaction that wrote messages commits, so new work starts within milliseconds while
  an idle cluster polls only every `poll` seconds as a fallback (the trigger `gatehouse_q_notify`
  is created by migration automation 0012: docs/worker.md); and it wakes when the earliest
  delayed message comes due (a row whose `lock` is in the future, `worker.dispatch`), so a
  retry goes when its backoff runs out, whatever `poll` is.

Within a queue, a delayed message that has come due goes before the messages waiting there:
it is a retry whose run is already in flight and has already waited its backoff, so under a
backlog it is taken when due instead of going to the back of the line (a new run waits; a
started one finishes). With the ORM broker a delayed message is a row of the queue's
delayed key (`<queue>:delayed`), served before the queue's own key; with Redis it waits in
a sorted set per queue, scored by its due time, and the pusher moves the messages that
have come due to the head of their queue before each wait.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta
from typing import Any

import psycopg
from django import db
from django.db import connections, transaction
from django.db.models import Min
from django.utils import timezone
from django_q.brokers.orm import ORM
from django_q.brokers.redis_broker import Redis
from django_q.conf import Conf
from django_q.models import OrmQ

from worker.conf import setting

LOG = logging.getLogger("gatehouse.broker")

NOTIFY_CHANNEL = "gatehouse_q"
PRIORITIES = ("urgent", "live", "bulk")
DELAYED = ":delayed"


def queue_key(base: str, priority: str) -> str:
    """The broker key of one priority queue of the cluster named `base`."""
    return base if priority == "live" else f"{base}.{priority}"


def delayed_key(key: str) -> str:
    """The ORM broker key of the delayed messages of the queue `key` (worker.dispatch)."""
    return f"{key}{DELAYED}"


def served_keys(base: str) -> list[str]:
    """The keys of the queues a cluster serves, in the order it takes from them."""
    served = [p for p in setting("Q_SERVES") if p in PRIORITIES] or list(PRIORITIES)
    return [queue_key(base, priority) for priority in served]


def _base_key(list_key: str) -> str:
    list_key = list_key.removesuffix(DELAYED)
    for priority in PRIORITIES:
        if list_key.endswith(f".{priority}"):
            return list_key[: -len(priority) - 1]
    return list_key


class PriorityOrmBroker(ORM):
    """The ORM broker, taking messages in priority order in one transaction per batch."""

    def __init__(self, list_key: str | None = None) -> None:
        super().__init__(list_key=list_key or Conf.CLUSTER_NAME)
        # Each served queue's due delayed messages, then the queue's own.
        queues = served_keys(_base_key(self.list_key))
        self.keys = [key for queue in queues for key in (delayed_key(queue), queue)]
        self._listener: psycopg.Connection[Any] | None = None

    def dequeue(self) -> list[tuple[int, str]] | None:
        self._listen()  # before looking, so a message committed meanwhile still wakes us
        if transaction.get_autocommit(using=Conf.ORM):
            db.close_old_connections()  # persistent connections: closes only a broken one
        taken, next_lock = self._take()
        if taken:
            return taken
        self._wait(_seconds_until(next_lock))
        return None

    def _take(self) -> tuple[list[tuple[int, str]], datetime | None]:
        """Lease up to `bulk` due messages, urgent queue first and in each queue its due
        delayed messages first; with none, the earliest time a message's lock runs out (a
        delayed message comes due, a lease ends).

        SKIP LOCKED: another pusher (a second cluster) taking messages right now is passed
        over instead of waited for, and never gets the same message. The index on
        (key, id) serves each key's oldest-first scan.
        """
        now = timezone.now()
        lease = now + timedelta(seconds=Conf.RETRY)
        taken: list[tuple[int, str]] = []
        messages = OrmQ.objects.using(Conf.ORM)
        with transaction.atomic(using=Conf.ORM):
            for key in self.keys:
                room = Conf.BULK - len(taken)
                if room <= 0:
                    break
                due = messages.filter(key=key, lock__lt=now).order_by("id")
                taken.extend(
                    due.select_for_update(skip_locked=True).values_list("id", "payload")[:room]
                )
            if taken:
                messages.filter(id__in=[pk for pk, _ in taken]).update(lock=lease)
                return taken, None
            # Only the messages not yet handed out are left: few rows, read when idle.
            waiting = messages.filter(key__in=self.keys, lock__gte=now)
            return taken, waiting.aggregate(next_lock=Min("lock"))["next_lock"]

    def _listen(self) -> None:
        if self._listener is not None and not self._listener.closed:
            return
        try:
            params = connections[Conf.ORM].get_connection_params()
            params.pop("cursor_factory", None)
            params.pop("context", None)
            self._listener = psycopg.connect(**params, autocommit=True)
            self._listener.execute(f"LISTEN {NOTIFY_CHANNEL}")
        except psycopg.Error:
            LOG.warning("cannot LISTEN for new work; polling every %s s", Conf.POLL)
            self._listener = None

    def _wait(self, until_due: float | None) -> None:
        """Sleep until a transaction that wrote messages commits, the next delayed message is
        due (`until_due` seconds), or `poll` seconds pass."""
        timeout = Conf.POLL if until_due is None else min(Conf.POLL, until_due)
        listener = self._listener
        if listener is None:
            time.sleep(timeout)
            return
        try:
            for _ in listener.notifies(timeout=timeout, stop_after=1):
                pass
        except psycopg.Error:
            listener.close()
            self._listener = None

    def queue_size(self) -> int:
        return self.get_connection().filter(key__in=self.keys, lock__lte=timezone.now()).count()

    def lock_size(self) -> int:
        return self.get_connection().filter(key__in=self.keys, lock__gt=timezone.now()).count()


def _seconds_until(moment: datetime | None) -> float | None:
    if moment is None:
        return None
    # At least a little: a lock that runs out this instant is taken on the next look.
    return max(0.01, (moment - timezone.now()).total_seconds())


# Moves the due members of a sorted set (KEYS[1]) to the head of a list (KEYS[2]), the
# earliest due first, at most ARGV[2] of them, atomically: two clusters never move one
# message twice.
MOVE_DUE = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])
for i = #due, 1, -1 do
  redis.call('ZREM', KEYS[1], due[i])
  redis.call('LPUSH', KEYS[2], due[i])
end
return #due
"""


MOVE_EVERY = 0.2  # seconds between looks at the delayed messages
DELAYED_MOVED_AT_ONCE = 500


def _delayed_key(list_key: str) -> str:
    """The sorted set of a queue's delayed messages ("django_q:<key>:q" -> ":delayed")."""
    return f"{list_key.removesuffix(':q')}:delayed"


class PriorityRedisBroker(Redis):
    """django-q2's Redis broker over the priority queues: BLPOP takes from the first list
    that has a message, in the order given, so urgent work goes first. Delayed messages
    wait in a sorted set per queue and are moved to it when due, before each wait."""

    def __init__(self, list_key: str | None = None) -> None:
        base = _base_key(list_key or Conf.CLUSTER_NAME)
        super().__init__(list_key=list_key or Conf.CLUSTER_NAME)
        self.keys = [f"django_q:{key}:q" for key in served_keys(base)]
        self.delayed_keys = [_delayed_key(key) for key in self.keys]
        self._move_due = self.connection.register_script(MOVE_DUE)
        self._moved_at = 0.0

    def enqueue_at(self, task: str, when: datetime) -> None:
        """Send `task` to this broker's queue, to be taken from `when` on."""
        self.connection.zadd(_delayed_key(self.list_key), {task: when.timestamp()})

    def dequeue(self) -> list[tuple[None, bytes]] | None:
        now = time.time()
        if now - self._moved_at >= MOVE_EVERY:  # not once per message during a backlog
            self._moved_at = now
            for delayed, queue in zip(self.delayed_keys, self.keys, strict=True):
                self._move_due(keys=[delayed, queue], args=[now, DELAYED_MOVED_AT_ONCE])
        # A second at most: a delayed message is moved within a second of coming due.
        task = self.connection.blpop(self.keys, 1)
        if task:
            return [(None, task[1])]
        return None

    def queue_size(self) -> int:
        return int(sum(self.connection.llen(key) for key in self.keys))
