"""Several small lists read in one round trip.

A detail page (the run page) shows a dozen short lists of child rows: each its own query
would make the page's query count grow with every list it shows. The lists are read as one
SELECT of json_agg subqueries, one per list, each in its queryset's own order, and every row
is rebuilt as a model instance from its columns (each field parses its JSON value back:
times, numbers, JSON).

Only plain querysets of one model (no select_related, no annotations, no values()): the
JSON row carries the model's own columns, nothing else.
"""

from __future__ import annotations

import json
from typing import Any

from django.db import connections
from django.db.models import Model, QuerySet


def read_lists(querysets: dict[str, QuerySet[Any]]) -> dict[str, list[Any]]:
    """Each queryset's rows, all read in one query."""
    if not querysets:
        return {}
    db = next(iter(querysets.values())).db
    connection = connections[db]
    selects: list[str] = []
    params: list[Any] = []
    for rows in querysets.values():
        sql, found = rows.query.sql_with_params()
        # The queryset's own compiled SQL; its values stay parameters.
        selects.append(f"(SELECT COALESCE(json_agg(t), '[]'::json) FROM ({sql}) t)")  # noqa: S608
        params.extend(found)
    with connection.cursor() as cursor:
        cursor.execute("SELECT " + ", ".join(selects), params)
        row = cursor.fetchone()
    return {
        name: [_instance(rows.model, db, values) for values in _json(found)]
        for (name, rows), found in zip(querysets.items(), row, strict=True)
    }


def _json(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, str):  # a driver that hands json back as text
        loaded: list[dict[str, Any]] = json.loads(value)
        return loaded
    return list(value)


def _instance(model: type[Model], db: str, values: dict[str, Any]) -> Model:
    fields = model._meta.concrete_fields
    parsed = [field.to_python(values[field.column]) for field in fields]
    return model.from_db(db, [field.attname for field in fields], parsed)
