"""Writing rows in fewer round trips than the ORM's one statement per call.

Each helper writes new model instances the way `bulk_create` does (no `save()`, no
signals), with their fields' defaults and the database's preparation of every value.
Table and column names come from the models' own metadata; every value is a parameter.
"""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.db.models import Model


def _insert_sql(rows: list[Any]) -> tuple[str, list[Any], list[Any]]:
    """(INSERT statement, its parameters, the fields written) for new rows of one model."""
    meta = rows[0]._meta
    fields = [f for f in meta.concrete_fields if not f.primary_key]
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    row_sql = "(" + ", ".join(["%s"] * len(fields)) + ")"
    params: list[Any] = []
    for row in rows:
        params.extend(f.get_db_prep_save(f.pre_save(row, True), connection) for f in fields)
    values = ", ".join([row_sql] * len(rows))
    table = connection.ops.quote_name(meta.db_table)
    return f"INSERT INTO {table} ({columns}) VALUES {values}", params, fields  # noqa: S608


def insert_together(tables: list[list[Any]]) -> None:
    """Insert new rows of several tables (a list of rows per table) in one statement, each
    table's rows in the order given: one round trip instead of one per table.

    The rows are written as `bulk_create` writes them (no `save()`, no signals), with their
    fields' defaults and database preparation; their primary keys are not read back."""
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
    with connection.cursor() as cursor:
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
