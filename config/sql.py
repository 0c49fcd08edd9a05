"""Writing rows in fewer round trips than the ORM's one statement per call.

Each helper writes new model instances the way `bulk_create` does (no `save()`, no
signals), with their fields' defaults and the database's preparation of every value.
Table and column names come from the models' own metadata; every value is a parameter,
but NULL, TRUE, FALSE and '' (see _insert_sql).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import psycopg
from django.conf import settings
from django.db import (
    DEFAULT_DB_ALIAS,
    InterfaceError,
    OperationalError,
    connection,
    connections,
    models,
)
from django.db.backends.utils import CursorDebugWrapper, CursorWrapper
from django.db.models import Model
from django_fsm import FSMField

# Fields whose database preparation hands a value of these exact types to the driver as it
# is: writing such a value directly is the same value, without the per-field calls (the
# hot path of intake writes some sixty values). Anything else is prepared by its field.
_PLAIN: dict[type[models.Field[Any, Any]], tuple[type, ...]] = {
    **dict.fromkeys((models.CharField, models.SlugField, models.TextField, FSMField), (str,)),
    **dict.fromkeys(
        (
            models.IntegerField,
            models.SmallIntegerField,
            models.BigIntegerField,
            models.PositiveIntegerField,
            models.PositiveSmallIntegerField,
            models.AutoField,
            models.BigAutoField,
        ),
        (int,),
    ),
    models.BooleanField: (bool,),
    # With its time zone only (a naive one is prepared: the field makes it aware, and warns).
    models.DateTimeField: (datetime,),
}
# Fields that write None as NULL unprepared, besides those above.
_NULL_AS_IS = (models.JSONField,)


def _plain_types(field: models.Field[Any, Any]) -> tuple[type, ...]:
    kind = type(field)
    if isinstance(field, models.ForeignKey) and kind is models.ForeignKey:
        return _plain_types(field.target_field)
    if kind in _PLAIN:
        return (*_PLAIN[kind], type(None))
    return (type(None),) if kind in _NULL_AS_IS else ()


@functools.cache
def _shape(model: type[Model], with_pk: bool) -> tuple[str, list[Any]]:
    """(INSERT INTO table (columns) VALUES, how to read each value) for a model: made once
    per process from its metadata."""
    meta = model._meta
    fields = [f for f in meta.concrete_fields if with_pk or not f.primary_key]
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    table = connection.ops.quote_name(meta.db_table)
    readers = [
        (
            f,
            f.attname,
            # pre_save only where the field computes its value (auto_now...).
            type(f).pre_save is not models.Field.pre_save,
            _plain_types(f),
        )
        for f in fields
    ]
    return f"INSERT INTO {table} ({columns}) VALUES ", readers  # noqa: S608


def _insert_sql(rows: list[Any]) -> tuple[str, list[Any], list[Any]]:
    """(INSERT statement, its parameters, the fields written) for new rows of one model.

    A NULL, a boolean or an empty text of a plain field is written as itself, not as a
    parameter: most of a new row is such defaults, and a statement with few parameters is
    one the driver reads once (and the server prepares once, see prepared_cursor)."""
    model: type[Model] = type(rows[0])
    db = connections[DEFAULT_DB_ALIAS]  # the connection itself, not its per-call proxy
    # A primary key is written when the rows carry one (taken from its sequence beforehand,
    # so that rows of other tables in the same statement can name it).
    head, readers = _shape(model, rows[0].pk is not None)
    params: list[Any] = []
    values: list[str] = []
    for row in rows:
        marks: list[str] = []
        for field, attname, computed, plain in readers:
            value = field.pre_save(row, True) if computed else getattr(row, attname)
            kind = type(value)
            if kind not in plain or (kind is datetime and value.tzinfo is None):
                value = field.get_db_prep_save(value, db)
            elif value is None or value is True or value is False or value == "":
                marks.append(_LITERAL[value])
                continue
            marks.append("%s")
            params.append(value)
        values.append("(" + ", ".join(marks) + ")")
    return head + ", ".join(values), params, [r[0] for r in readers]


# The literals of _insert_sql, by value (True, False and "" differ as keys from 1 and 0).
_LITERAL: dict[Any, str] = {None: "NULL", True: "TRUE", False: "FALSE", "": "''"}


def insert_together(tables: list[list[Any]]) -> None:
    """Insert new rows of several tables (a list of rows per table) in one statement, each
    table's rows in the order given: one round trip instead of one per table.

    The rows are written as `bulk_create` writes them (no `save()`, no signals), with their
    fields' defaults and database preparation; their primary keys are not read back (rows
    that carry one, see `nextval_sql`, are written with it)."""
    written = [_insert_sql(rows)[:2] for rows in tables if rows]
    if not written:
        return
    if connection.vendor != "postgresql":
        # Data-modifying WITH queries are PostgreSQL's; elsewhere (SQLite: the demo without
        # DATABASE_URL) each table is its own statement, in the same transaction.
        with connection.cursor() as cursor:
            for statement, values in written:
                cursor.execute(statement, values)
        return
    statements = [statement for statement, _ in written]
    params = [value for _, values in written for value in values]
    # Every statement but the last runs as a data-modifying WITH query of the last one.
    *first, last = statements
    sql = "".join(
        ("WITH " if n == 0 else ", ") + f"w{n} AS ({statement})"
        for n, statement in enumerate(first)
    )
    with prepared_cursor() as cursor:
        cursor.execute(f"{sql} {last}".strip(), params)


def insert_new(row: Model, *, unique: str) -> bool:
    """Insert the row unless one with the same `unique` column exists: one statement (INSERT
    ... ON CONFLICT DO NOTHING), where get_or_create takes four (a read, a savepoint, the
    insert, its release). True, with the row's primary key set, when it was inserted."""
    statement, params, fields = _insert_sql([row])
    column = connection.ops.quote_name(next(f.column for f in fields if f.name == unique))
    pk = connection.ops.quote_name(row._meta.pk.column)
    with connection.cursor() as cursor:
        cursor.execute(f"{statement} ON CONFLICT ({column}) DO NOTHING RETURNING {pk}", params)
        found = cursor.fetchone()
    if found is None:
        return False
    row.pk = found[0]
    row._state.adding = False
    row._state.db = connection.alias
    return True


def nextval_sql(model: type[Model]) -> str:
    """SQL for a new primary key of `model` from its sequence (PostgreSQL): for rows written
    together by `insert_together` that name each other. The names are the model's own."""
    meta = model._meta

    def literal(name: str) -> str:
        return "'" + name.replace("'", "''") + "'"

    return f"nextval(pg_get_serial_sequence({literal(meta.db_table)}, {literal(meta.pk.column)}))"


class _PreparingCursor(psycopg.Cursor[Any]):
    """Binds parameters on the server and prepares each statement on first use: the
    connection keeps its most recent hundred prepared statements (psycopg's cache)."""

    def execute(self, query: Any, params: Any = None, **options: Any) -> _PreparingCursor:
        options["prepare"] = True
        return super().execute(query, params, **options)


@contextlib.contextmanager
def prepared_cursor() -> Iterator[CursorWrapper]:
    """A cursor for the statements run on every request or step (the intake's, the
    journal's): on PostgreSQL each is parsed and planned once per connection, then only
    executed. Otherwise, or with GATEHOUSE_DB_PREPARED off, an ordinary cursor. Django
    wraps it as usual: its errors, query log and execute wrappers apply."""
    if connection.vendor != "postgresql" or not settings.GATEHOUSE_PREPARED_STATEMENTS:
        with connection.cursor() as cursor:
            yield cursor
        return
    # What connection.cursor() does first: a persistent connection found broken (by the
    # health check, once per request) is replaced, not failed on.
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    connection.validate_thread_sharing()
    raw = _PreparingCursor(connection.connection)
    if connection.queries_logged:
        wrapped: CursorWrapper = _PreparedDebugWrapper(raw, connection)
    else:
        wrapped = connection.make_cursor(raw)  # type: ignore[arg-type]  # (stubs: the wrapper)
    with wrapped as cursor:
        yield cursor


class _PreparedDebugWrapper(CursorDebugWrapper):
    """Django's debug cursor (DEBUG, assertNumQueries), logging the statement as written: a
    prepared statement leaves the driver no query text for Django to read back."""

    def execute(self, sql: Any, params: Any = None) -> Any:
        with self.debug_sql(sql, params):
            return CursorWrapper.execute(self, sql, params)


def read_first(sql: str, params: list[Any]) -> tuple[Any, ...] | None:
    """The row of a read that opens a request's use of the database, on a prepared
    statement; the read is also the connection's health check (CONN_HEALTH_CHECKS).

    Django checks a persistent connection with a `SELECT 1` before a request's first
    statement. Here the read itself finds a broken connection, which is then replaced and
    the read made again: one round trip where there were two, for the intake API's every
    request. A read only (it may run twice), outside any transaction."""
    db: Any = connections[DEFAULT_DB_ALIAS]  # (the stubs lack the health check's fields)
    pending = (
        db.connection is not None
        and db.health_check_enabled
        and not db.health_check_done
        and not db.in_atomic_block
    )
    if pending:
        db.health_check_done = True  # this read is the check
    try:
        return _fetch_one(sql, params)
    except (OperationalError, InterfaceError):
        if not pending:
            raise
        db.close()  # broken while idle (a restart, a dropped socket): a new one
        return _fetch_one(sql, params)


def _fetch_one(sql: str, params: list[Any]) -> tuple[Any, ...] | None:
    with prepared_cursor() as cursor:
        cursor.execute(sql, params)
        row: tuple[Any, ...] | None = cursor.fetchone()
        return row
