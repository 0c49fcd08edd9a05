"""What the worker wing relies on in django-q2 (docs/worker.md#what-it-relies-on-in-django-q2):
a change of the table, the payload, the brokers' or the cluster's methods, or a version
outside the pin fails here before it fails in a worker."""

from __future__ import annotations

import inspect
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest
from django.core.management import get_commands
from django.db import connection
from django.utils import timezone
from django_q.brokers import Broker
from django_q.brokers.orm import ORM
from django_q.brokers.redis_broker import Redis
from django_q.cluster import Cluster
from django_q.conf import Conf
from django_q.management.commands import qcluster as django_q_qcluster
from django_q.models import OrmQ
from django_q.signing import SignedPackage
from packaging.requirements import Requirement

from worker import dispatch
from worker.broker import PriorityOrmBroker, PriorityRedisBroker
from worker.management.commands import qcluster

REPO = Path(__file__).resolve().parents[2]
# The keys django-q2's pusher, worker and monitor read from every package we build.
READ_BY_DJANGO_Q = {"id", "name", "func", "args", "kwargs", "started", "save", "ack_failure"}


def test_the_installed_django_q2_is_within_the_pin() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    (pin,) = [Requirement(line) for line in project["dependencies"] if line.startswith("django-q2")]
    assert pin.specifier.contains(version("django-q2")), (pin, version("django-q2"))
    # One minor version: an upper bound below the next minor, never "<2".
    upper = [spec for spec in pin.specifier if spec.operator == "<"]
    assert upper, pin
    assert upper[0].version.count(".") == 1 and not upper[0].version.endswith(".0"), pin


def test_the_broker_table_is_django_qs_ormq_with_the_columns_the_broker_names() -> None:
    assert OrmQ._meta.db_table == "django_q_ormq"
    fields = {field.name: field for field in OrmQ._meta.concrete_fields}
    assert set(fields) == {"id", "key", "payload", "lock"}
    assert {name: field.column for name, field in fields.items()} == {name: name for name in fields}
    assert fields["key"].get_internal_type() == "CharField"
    assert fields["key"].max_length == 100
    assert fields["payload"].get_internal_type() == "TextField"
    assert fields["lock"].get_internal_type() == "DateTimeField"
    assert fields["lock"].null


@pytest.mark.django_db
def test_the_table_in_the_database_has_those_columns_and_the_wake_up_trigger() -> None:
    with connection.cursor() as cursor:
        columns = {
            c.name for c in connection.introspection.get_table_description(cursor, "django_q_ormq")
        }
        constraints = connection.introspection.get_constraints(cursor, "django_q_ormq")
    assert columns == {"id", "key", "payload", "lock"}
    assert "gatehouse_ormq_key_id" in constraints
    assert constraints["gatehouse_ormq_key_id"]["columns"] == ["key", "id"]
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT tgname FROM pg_trigger WHERE tgrelid = 'django_q_ormq'::regclass"
                " AND NOT tgisinternal"
            )
            assert ("gatehouse_q_notify",) in cursor.fetchall()


def test_a_package_we_build_is_read_by_django_qs_own_loads() -> None:
    message = dispatch.Message("automation.tasks.advance_run", (7,))
    task = SignedPackage.loads(dispatch._package(message))
    assert set(task) >= READ_BY_DJANGO_Q
    assert task["func"] == "automation.tasks.advance_run"
    assert task["args"] == (7,)
    assert task["kwargs"] == {}
    assert task["save"] is False
    assert task["ack_failure"] is Conf.ACK_FAILURES
    assert len(task["id"]) == 32 and int(task["id"], 16) >= 0
    assert task.get("group") is None  # the worker reads it only when present


def test_a_row_we_build_is_what_django_qs_own_admin_reads() -> None:
    fields = dispatch._message_fields(
        dispatch.Message("automation.tasks.advance_run", (7,)), now=timezone.now()
    )
    row = OrmQ(**fields)
    assert row.key == Conf.CLUSTER_NAME
    assert (row.func(), row.args(), row.kwargs(), row.group()) == (
        "automation.tasks.advance_run",
        (7,),
        {},
        None,
    )
    assert row.name() == "automation.tasks.advance_run(7,)"


@pytest.mark.parametrize(
    ("ours", "theirs", "names"),
    [
        (PriorityOrmBroker, ORM, ["__init__", "dequeue", "queue_size", "lock_size"]),
        (PriorityRedisBroker, Redis, ["__init__", "dequeue", "queue_size"]),
    ],
)
def test_every_broker_method_we_override_exists_with_the_same_signature(
    ours: type[Broker], theirs: type[Broker], names: list[str]
) -> None:
    assert issubclass(ours, theirs) and issubclass(theirs, Broker)
    for name in names:
        assert name in vars(ours), name  # we override it...
        base = getattr(theirs, name)  # ...and django-q2 still has it, called the same way
        assert list(inspect.signature(getattr(ours, name)).parameters) == list(
            inspect.signature(base).parameters
        ), name
    for used in ("get_connection", "enqueue", "acknowledge", "delete", "fail"):
        assert callable(getattr(theirs, used)), used


def test_the_redis_key_and_the_conf_names_are_django_qs() -> None:
    assert "list_key" in inspect.signature(Redis.__init__).parameters
    source = inspect.getsource(Redis.__init__)
    assert 'f"django_q:{list_key}:q"' in source
    for name in ("CLUSTER_NAME", "ORM", "BULK", "POLL", "RETRY", "SYNC", "ACK_FAILURES", "PREFIX"):
        assert hasattr(Conf, name), name


def test_the_cluster_command_subclasses_django_qs_and_calls_what_still_exists() -> None:
    assert issubclass(qcluster.Command, django_q_qcluster.Command)
    assert list(inspect.signature(Cluster.sig_handler).parameters) == ["self", "signum", "frame"]
    assert list(inspect.signature(Cluster.start).parameters) == ["self"]
    assert list(inspect.signature(Cluster.stop).parameters) == ["self"]
    parser = qcluster.Command().create_parser("manage.py", "qcluster")
    options = {action.dest for action in parser._actions}
    assert {"run_once", "cluster_name"} <= options


def test_our_qcluster_is_the_one_django_finds() -> None:
    assert get_commands()["qcluster"] == "worker"
