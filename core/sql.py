"""Writing rows in fewer round trips than the ORM's one statement per call.

Each helper writes new model instances the way `bulk_create` does (no `save()`, no
signals), with their fields' defaults and the database's preparation of every value.
Table and column names come from the models' own metadata; every value is a parameter,
but NULL, TRUE, FALSE and '' (see _insert_sql).
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

import psycopg
import psycopg.sql
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

M = TypeVar("M", bound=Model)

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
    one the driver reads once (and the server prepares once, see execute_prepared)."""
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
    if written:
        _write(written, _together([statement for statement, _ in written]))


def _write(written: list[tuple[str, list[Any]]], together: str) -> None:
    """INSERT statements with their parameters, as one statement (`together`, made by
    _together)."""
    execute_prepared(together, [value for _, values in written for value in values])


class _Plan:
    """How a new row of one model is written from some of its fields: the rest take their
    defaults as `Model(**fields)` would, read once from the model's metadata. Constant
    defaults are written in the statement itself; a time stamped on insert (auto_now,
    auto_now_add) is the row's `now`; any other callable default is called per row."""

    def __init__(self, model: type[Model], given: tuple[str, ...]) -> None:
        meta = model._meta
        db = connections[DEFAULT_DB_ALIAS]
        by_column: dict[str, str] = {}
        for name in given:
            given_field = meta.get_field(name)
            if not isinstance(given_field, models.Field) or not given_field.concrete:
                raise TypeError(f"{model.__name__}.{name} is not a column")
            by_column[given_field.attname] = name
        columns: list[str] = []
        marks: list[str] = []
        # How each column's value is found, by attname: a given field's ("given": its key,
        # and whether it is a related instance), the row's time ("now"), a default made for
        # each row ("fresh": an empty dict or list, a callable), or a constant default.
        self.given: list[tuple[str, str, bool]] = []
        self.stamped: list[str] = []
        self.fresh: list[tuple[str, models.Field[Any, Any]]] = []
        self.constants: dict[str, Any] = {}
        self.parameters: list[tuple[str, models.Field[Any, Any], tuple[type, ...]]] = []
        for f in meta.concrete_fields:
            name = by_column.get(f.attname, "")
            if not name and f.primary_key:
                continue  # taken from its sequence by the database
            columns.append(connection.ops.quote_name(f.column))
            literal = False
            if name:
                self.given.append((f.attname, name, name != f.attname))
            elif isinstance(f, models.DateTimeField) and (f.auto_now or f.auto_now_add):
                self.stamped.append(f.attname)
            elif type(f).pre_save is not models.Field.pre_save and not _stamps_nothing(f):
                raise TypeError(f"{model.__name__}.{f.name} computes its value: give it")
            elif f.has_default() and callable(f.default):
                self.fresh.append((f.attname, f))
                literal = f.default in (dict, list)  # the same value in every row
            else:
                self.constants[f.attname] = f.get_default()
                literal = True
            if literal:
                marks.append(_literal(f.get_db_prep_save(f.get_default(), db), db))
            else:
                marks.append("%s")
                self.parameters.append((f.attname, f, _plain_types(f)))
        self.model = model
        # The columns of an instance of the row (loaded), in the model's order.
        self.attnames = [
            f.attname for f in meta.concrete_fields if not f.primary_key or f.attname in by_column
        ]
        self.head = (
            f"INSERT INTO {connection.ops.quote_name(meta.db_table)} "  # noqa: S608
            f"({', '.join(columns)}) VALUES "
        )
        self.marks = f"({', '.join(marks)})"

    def sql(self, count: int) -> str:
        """The INSERT of `count` rows: one statement, so their ids follow their order."""
        return self.head + ", ".join([self.marks] * count)

    def row(self, fields: dict[str, Any], now: datetime) -> dict[str, Any]:
        """Every column's value (by attname) of the row written for these fields."""
        row = self.constants.copy()
        for attname, name, related in self.given:
            value = fields[name]
            row[attname] = value.pk if related and value is not None else value
        for attname in self.stamped:
            row[attname] = now
        for attname, f in self.fresh:
            row[attname] = f.get_default()
        return row

    def params(self, row: dict[str, Any]) -> list[Any]:
        db = connections[DEFAULT_DB_ALIAS]
        params: list[Any] = []
        for attname, f, plain in self.parameters:
            value = row[attname]
            if type(value) not in plain or (type(value) is datetime and value.tzinfo is None):
                value = f.get_db_prep_save(value, db)
            params.append(value)
        return params


def _stamps_nothing(field: models.Field[Any, Any]) -> bool:
    """A date or time field that is not stamped on save: its pre_save reads the value."""
    return isinstance(field, models.DateField | models.TimeField) and not (
        getattr(field, "auto_now", False) or getattr(field, "auto_now_add", False)
    )


def _literal(value: Any, db: Any) -> str:
    """A constant default as SQL: NULL, TRUE, FALSE, a number or a quoted text; anything
    else (JSON...) as the driver quotes it."""
    if value is None or value is True or value is False:
        return _LITERAL[value]
    if type(value) is int:
        return str(value)
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    db.ensure_connection()
    return psycopg.sql.Literal(value).as_string(db.connection)


@functools.cache
def _plan(model: type[Model], given: tuple[str, ...]) -> _Plan:
    return _Plan(model, given)


@functools.cache
def _statement(plans: tuple[tuple[_Plan, int], ...]) -> str:
    return _together([plan.sql(count) for plan, count in plans])


def _together(statements: list[str]) -> str:
    """INSERT statements as one: each but the last a data-modifying WITH query of the last."""
    *first, last = statements
    head = "".join(
        ("WITH " if n == 0 else ", ") + f"w{n} AS ({statement})"
        for n, statement in enumerate(first)
    )
    return f"{head} {last}".strip()


@dataclass(frozen=True)
class NewRow:
    """A row to insert, every column's value by attname (see new_rows)."""

    plan: _Plan
    values: dict[str, Any]


def new_rows(rows: list[tuple[type[Model], dict[str, Any]]], now: datetime) -> list[NewRow]:
    """New rows from the fields a `Model(**fields)` call would take (names or attnames), the
    others at their defaults, stamped (auto_now...) with `now`: to be written together by
    `insert_rows`, without making model instances (the intake API writes five rows on
    every request; `loaded` makes one of those that are wanted)."""
    rows_made = []
    for model, fields in rows:
        plan = _plan(model, tuple(fields))
        rows_made.append(NewRow(plan, plan.row(fields, now)))
    return rows_made


def insert_rows(rows: list[NewRow]) -> None:
    """Insert new rows in one statement, as `insert_together` writes them; rows of one model
    given one after the other, with the same fields, in the order given. Each shape of rows
    is one statement text, prepared once per connection. Nothing is read back; a row's
    primary key is written when its fields give it."""
    groups = [
        (plan, [row.values for row in same])
        for plan, same in itertools.groupby(rows, key=lambda row: row.plan)
    ]
    if groups:
        written = [
            (plan.sql(len(group)), [p for values in group for p in plan.params(values)])
            for plan, group in groups
        ]
        _write(written, _statement(tuple((plan, len(group)) for plan, group in groups)))


def loaded(model: type[M], row: NewRow) -> M:
    """The instance of a new row, as if read from the database once written (a column that
    is not written, such as a primary key from its sequence, is deferred)."""
    if row.plan.model is not model:
        raise TypeError(f"a row of {row.plan.model.__name__}, not of {model.__name__}")
    names = row.plan.attnames
    return model.from_db(DEFAULT_DB_ALIAS, names, [row.values[name] for name in names])


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


def from_row(model: type[M], values: tuple[Any, ...] | list[Any]) -> M:
    """An instance of `model` from a row of its concrete fields' columns, in their order,
    read by raw SQL: each value is converted as a queryset converts it (JSON is parsed...)."""
    names, converters = _reading(model)
    if converters:
        values = list(values)
        db = connections[DEFAULT_DB_ALIAS]
        for index, convert in converters:
            values[index] = convert(values[index], None, db)
    return model.from_db(DEFAULT_DB_ALIAS, names, values)


@functools.cache
def _reading(model: type[Model]) -> tuple[list[str], list[tuple[int, Any]]]:
    db = connections[DEFAULT_DB_ALIAS]
    fields = model._meta.concrete_fields
    converters = [
        (index, convert)
        for index, f in enumerate(fields)
        for convert in (
            *db.ops.get_db_converters(f.cached_col),
            *f.get_db_converters(db),  # type: ignore[attr-defined]  # (the stubs lack it)
        )
    ]
    return [f.attname for f in fields], converters


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


def _prepared_cursor() -> CursorWrapper:
    """A cursor for the statements run on every request or step (the intake's, the
    journal's): each is parsed and planned once per connection, then only executed. With
    GATEHOUSE_DB_PREPARED off, an ordinary cursor. Django wraps it as usual: its errors,
    query log and execute wrappers apply."""
    db: Any = connections[DEFAULT_DB_ALIAS]  # once: each `connection.x` is a lookup
    if not settings.GATEHOUSE_PREPARED_STATEMENTS:
        return db.cursor()  # type: ignore[no-any-return]
    # What connection.cursor() does first: a persistent connection found broken (by the
    # health check, once per request) is replaced, not failed on.
    db.close_if_health_check_failed()
    db.ensure_connection()
    db.validate_thread_sharing()
    raw = _PreparingCursor(db.connection)
    if db.queries_logged:
        return _PreparedDebugWrapper(raw, db)
    return db.make_cursor(raw)  # type: ignore[no-any-return]


def execute_prepared(sql: str, params: list[Any]) -> tuple[Any, ...] | None:
    """Run one statement on a prepared cursor (_prepared_cursor); its first row, if any."""
    cursor = _prepared_cursor()
    try:
        cursor.execute(sql, params)
        return cursor.fetchone() if cursor.description else None
    finally:
        cursor.close()


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
        return execute_prepared(sql, params)
    except (OperationalError, InterfaceError):
        if not pending:
            raise
        db.close()  # broken while idle (a restart, a dropped socket): a new one
        return execute_prepared(sql, params)
