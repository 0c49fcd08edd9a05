"""django-q2 brokers with priority queues, and on PostgreSQL a wake-up instead of a poll.

Gatehouse sends each message to one of three queues of its cluster (`config.dispatch`):
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
  an idle cluster polls only every `poll` seconds as a fallback.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from typing import Any

import psycopg
from django import db
from django.conf import settings
from django.db import connections, transaction
from django.utils import timezone
from django_q.brokers.orm import ORM
from django_q.brokers.redis_broker import Redis
from django_q.conf import Conf

LOG = logging.getLogger("gatehouse.broker")

NOTIFY_CHANNEL = "gatehouse_q"
PRIORITIES = ("urgent", "live", "bulk")


def queue_key(base: str, priority: str) -> str:
    """The broker key of one priority queue of the cluster named `base`."""
    return base if priority == "live" else f"{base}.{priority}"


def served_keys(base: str) -> list[str]:
    served = [p for p in settings.GATEHOUSE["Q_SERVES"] if p in PRIORITIES] or list(PRIORITIES)
    return [queue_key(base, priority) for priority in served]


def _base_key(list_key: str) -> str:
    for priority in PRIORITIES:
        if list_key.endswith(f".{priority}"):
            return list_key[: -len(priority) - 1]
    return list_key


class PriorityOrmBroker(ORM):
    """The ORM broker, taking messages in priority order in one transaction per batch."""

    def __init__(self, list_key: str | None = None) -> None:
        super().__init__(list_key=list_key or Conf.CLUSTER_NAME)
        self.keys = served_keys(_base_key(self.list_key))
        self._listener: psycopg.Connection[Any] | None = None

    def dequeue(self) -> list[tuple[int, str]] | None:
        self._listen()  # before looking, so a message committed meanwhile still wakes us
        if transaction.get_autocommit(using=Conf.ORM):
            db.close_old_connections()  # persistent connections: closes only a broken one
        taken = self._take()
        if taken:
            return taken
        self._wait()
        return None

    def _take(self) -> list[tuple[int, str]]:
        """Lease up to `bulk` due messages, urgent queue first.

        SKIP LOCKED: another pusher (a second cluster) taking messages right now is passed
        over instead of waited for, and never gets the same message. The index on
        (key, id) serves each queue's oldest-first scan.
        """
        now = timezone.now()
        lease = now + timedelta(seconds=Conf.RETRY)
        taken: list[tuple[int, str]] = []
        with transaction.atomic(using=Conf.ORM), connections[Conf.ORM].cursor() as cursor:
            for key in self.keys:
                room = Conf.BULK - len(taken)
                if room <= 0:
                    break
                cursor.execute(
                    "SELECT id, payload FROM django_q_ormq WHERE key = %s AND lock < %s "
                    "ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED",
                    [key, now, room],
                )
                taken.extend(cursor.fetchall())
            if taken:
                cursor.execute(
                    "UPDATE django_q_ormq SET lock = %s WHERE id = ANY(%s)",
                    [lease, [pk for pk, _ in taken]],
                )
        return taken

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

    def _wait(self) -> None:
        """Sleep until a transaction that wrote messages commits, or `poll` seconds pass."""
        listener = self._listener
        if listener is None:
            time.sleep(Conf.POLL)
            return
        try:
            for _ in listener.notifies(timeout=Conf.POLL, stop_after=1):
                pass
        except psycopg.Error:
            listener.close()
            self._listener = None

    def queue_size(self) -> int:
        return self.get_connection().filter(key__in=self.keys, lock__lte=timezone.now()).count()

    def lock_size(self) -> int:
        return self.get_connection().filter(key__in=self.keys, lock__gt=timezone.now()).count()


class PriorityRedisBroker(Redis):
    """django-q2's Redis broker over the priority queues: BLPOP takes from the first list
    that has a message, in the order given, so urgent work goes first."""

    def __init__(self, list_key: str | None = None) -> None:
        base = _base_key(list_key or Conf.CLUSTER_NAME)
        super().__init__(list_key=list_key or Conf.CLUSTER_NAME)
        self.keys = [f"django_q:{key}:q" for key in served_keys(base)]

    def dequeue(self) -> list[tuple[None, bytes]] | None:
        task = self.connection.blpop(self.keys, 1)
        if task:
            return [(None, task[1])]
        return None

    def queue_size(self) -> int:
        return int(sum(self.connection.llen(key) for key in self.keys))
