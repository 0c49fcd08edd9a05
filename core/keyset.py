"""Keyset pagination by (time, id): a page costs the same on the first page and the thousandth.

OFFSET makes the database read and throw away every row before the page; a keyset page asks
the index for the rows after (or before) the last one shown, so it reads only what it shows.
The cursor in the address is the boundary row's time in microseconds and its id,
`<micros>.<id>`: digits and a dot, nothing to escape. A cursor that is not of that form, or
names a time outside what a datetime holds, is refused (the caller answers 400 or ignores it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, TypeVar

from django.db.models import Model, Q, QuerySet
from django.http import QueryDict

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# At most 18 digits each: the id fits a bigint and the time a datetime (checked below).
CURSOR_PATTERN = re.compile(r"\A(-?[0-9]{1,18})\.([0-9]{1,18})\Z")  # ASCII digits only

M = TypeVar("M", bound=Model)


class BadCursor(ValueError):
    """The cursor in the address names no row position."""


@dataclass(frozen=True)
class Cursor:
    at: datetime
    pk: int

    def __str__(self) -> str:
        delta = self.at - EPOCH
        micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
        return f"{micros}.{self.pk}"


def parse_cursor(text: str) -> Cursor:
    """The cursor written by str(Cursor); BadCursor for anything else."""
    match = CURSOR_PATTERN.match(text)
    if match is None:
        raise BadCursor("not a page cursor")
    try:
        at = EPOCH + timedelta(microseconds=int(match.group(1)))
    except OverflowError as exc:  # a time past year 9999
        raise BadCursor("not a page cursor") from exc
    return Cursor(at=at, pk=int(match.group(2)))


@dataclass(frozen=True)
class Page(Generic[M]):
    items: list[M]
    next: Cursor | None  # shows the rows after the last one here
    previous: Cursor | None  # shows the rows before the first one here


def keyset_page(
    rows: QuerySet[M],
    *,
    time_field: str,
    size: int,
    after: Cursor | None = None,
    before: Cursor | None = None,
    descending: bool = False,
) -> Page[M]:
    """One page of rows in (time, id) order, oldest first (newest first when `descending`):
    after a cursor, before one, or the first page. `after` is the side the next link goes to,
    in the order shown. One query: a row more than the page is read to know whether another
    follows. Either direction reads the same (time, id) index, forwards or backwards."""
    if before is not None:
        earlier = rows.filter(_beyond(time_field, before, later=descending))
        found = list(earlier.order_by(*_order(time_field, newest_first=not descending))[: size + 1])
        more_before = len(found) > size
        items = found[:size][::-1]
        return Page(
            items=items,
            next=_cursor(items[-1], time_field) if items else None,
            previous=_cursor(items[0], time_field) if more_before else None,
        )
    if after is not None:
        rows = rows.filter(_beyond(time_field, after, later=not descending))
    found = list(rows.order_by(*_order(time_field, newest_first=descending))[: size + 1])
    items = found[:size]
    return Page(
        items=items,
        next=_cursor(items[-1], time_field) if len(found) > size else None,
        previous=_cursor(items[0], time_field) if after is not None and items else None,
    )


def _beyond(time_field: str, cursor: Cursor, *, later: bool) -> Q:
    """The rows past the cursor's position: later in (time, id) order, or earlier."""
    op = "gt" if later else "lt"
    return Q(**{f"{time_field}__{op}": cursor.at}) | Q(
        **{time_field: cursor.at, f"pk__{op}": cursor.pk}
    )


def _order(time_field: str, *, newest_first: bool) -> tuple[str, str]:
    return (f"-{time_field}", "-pk") if newest_first else (time_field, "pk")


def _cursor(row: Any, time_field: str) -> Cursor | None:
    at = getattr(row, time_field)
    return Cursor(at=at, pk=row.pk) if at is not None else None


# The orders a keyset list is offered in, as its address says (`?order=newest`).
OLDEST, NEWEST = "oldest", "newest"
ORDERS = (OLDEST, NEWEST)


def order_of(query: QueryDict) -> str:
    """The order the address asks for; oldest first for anything else."""
    order = query.get("order", OLDEST)
    return order if order in ORDERS else OLDEST


def order_link(query: QueryDict, order: str) -> str:
    """The query string of the same list in another order: the same filters, the first page."""
    query = query.copy()
    query.pop("after", None)
    query.pop("before", None)
    query["order"] = order
    return "?" + query.urlencode()


def page_link(query: QueryDict, key: str, cursor: Cursor | None) -> str:
    """The query string of the next (`after`) or previous (`before`) page: the same filters,
    a new position; "" when there is no such page."""
    if cursor is None:
        return ""
    query = query.copy()
    query.pop("after", None)
    query.pop("before", None)
    query[key] = str(cursor)
    return "?" + query.urlencode()
