"""The ORM broker as the workers see it, on PostgreSQL: a batch of messages is one statement,
and two brokers (two clusters) never take the same message (worker.dispatch, worker.broker).

The messages are rows of `django_q_ormq`, written in the test's own committed transactions
(no inline queue); the task they name is never run here."""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django_q.models import OrmQ
from django_q.signing import SignedPackage

from worker.broker import PriorityOrmBroker
from worker.dispatch import Priority, batch, enqueue_after_commit

pytestmark = pytest.mark.django_db(transaction=True)

TASK = "automation.tasks.advance_run"


def queued() -> list[tuple[str, str, tuple[Any, ...]]]:
    """The waiting messages, oldest first: (queue, task, args)."""
    rows = OrmQ.objects.order_by("id").values_list("key", "payload")
    return [
        (key, task["func"], task["args"])
        for key, task in ((key, SignedPackage.loads(payload)) for key, payload in rows)
    ]


def test_a_batch_sends_its_messages_in_one_statement(db: None) -> None:
    with CaptureQueriesContext(connection) as queries, batch(priority=Priority.BULK):
        for n in range(5):
            enqueue_after_commit(TASK, n)
    inserts = [q for q in queries.captured_queries if "django_q_ormq" in q["sql"]]
    assert len(inserts) == 1
    assert [key for key, _, _ in queued()] == ["gatehouse.bulk"] * 5


def test_two_brokers_never_take_the_same_message(db: None) -> None:
    with batch():
        for n in range(20):
            enqueue_after_commit(TASK, n)
    first, second = PriorityOrmBroker(), PriorityOrmBroker()
    taken = [pk for broker in (first, second, first) for pk, _ in broker.dequeue() or []]
    assert len(taken) == len(set(taken)) == min(20, 3 * settings.Q_CLUSTER["bulk"])
