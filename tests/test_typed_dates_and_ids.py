"""Every form and query parameter of the console, given dates past the calendar and digits of
other scripts: a clear answer (a form error, a 4xx), never a 500, and no date outside the
calendar stored.

The pages are the access matrix's (tests/test_access_matrix.py): every URL pattern, walked
from the URL configuration and opened on the real objects it builds. Each page is read as
a superuser (who is shown every form), and each form on it, and each link with a query
string back into the site, is sent again once per field and hostile value: that field
replaced, the others as the page filled them in. A POST runs in a savepoint that is rolled
back, after checking that no date or time column of any table holds a value outside
core.inputs' bounds (year 10000 in UTC, which psycopg cannot read back, broke every page
that read the row).
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest
from django.apps import apps
from django.contrib.auth.models import Group, User
from django.db.models import DateField, DateTimeField, Q, QuerySet, Value
from django.test import Client

from accounts.roles import roles_ensure
from core.inputs import EARLIEST, FIRST_MOMENT, LAST_MOMENT, LATEST
from tests.conftest import Pipeline, rolled_back
from tests.test_access_matrix import (
    SUPERUSER,
    World,
    all_probes,
    build_world,
    refusals_unlogged,
)

# Dates past both ends of the calendar: with an offset that moves them past it in UTC, and a
# five-digit year; GATEHOUSE_WALK_ALL=1 adds year 0 and the last and first days a datetime
# holds, and sends every value to every field (`make test` sends each field one date and one
# digit of these, in turn: values_for).
WALK_ALL = bool(os.environ.get("GATEHOUSE_WALK_ALL"))
DATES = [
    "9999-12-31T23:59-14:00",
    "0001-01-01T00:00+14:00",
    "10000-01-01",
    *(["0000-01-01", "9999-12-31", "0001-01-01"] if WALK_ALL else []),
]
# Digits str.isdigit() takes: a superscript two (int() refuses it), a full-width five (int()
# reads it as 5) and, with GATEHOUSE_WALK_ALL, Arabic-Indic twelve (read as 12).
DIGITS = ["\u00b2", "\uff15", *(["\u0661\u0662"] if WALK_ALL else [])]
HOSTILE = DATES + DIGITS

# Pages whose forms are not the console's to send again: signing out ends the session the
# walk reads with; the admin's "view on site" only redirects.
SKIPPED = ("/accounts/logout/", "/admin/logout/", "/admin/r/")
NOT_SENT = {"csrfmiddlewaretoken"}
NUMBER = re.compile(r"(?<=[/-])[0-9]+(?=[/-])")


@dataclass
class Form:
    """A form as a browser sends it: each field with the value the page filled in (None:
    not sent unless replaced, as an unticked box)."""

    method: str
    action: str
    fields: dict[str, str | None] = field(default_factory=dict)
    chosen: set[str] = field(default_factory=set)  # boxes, options, buttons: nothing typed

    def key(self) -> tuple[str, str, frozenset[str]]:
        """The same form on another object (another request's claim button, the next row
        of a formset) is walked once."""
        return (self.method, NUMBER.sub("N", self.action), frozenset(self.walked()))

    def walked(self) -> list[str]:
        """The fields replaced in turn: one of each formset row's fields."""
        shapes = {NUMBER.sub("N", name): name for name in reversed(self.fields)}
        return [name for name in shapes.values() if name not in NOT_SENT]

    def data(self, name: str, value: str) -> dict[str, str]:
        sent = {n: v for n, v in self.fields.items() if v is not None and n not in NOT_SENT}
        return {**sent, name: value}


class _Forms(HTMLParser):
    """The forms on a page, and its links with a query string back into the site."""

    def __init__(self, page: str) -> None:
        super().__init__()
        self.page = page
        self.forms: list[Form] = []
        self.form: Form | None = None
        self.select: str | None = None
        self.textarea: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {name: value or "" for name, value in attrs}
        if tag == "form":
            action = found.get("action") or self.page
            self.form = Form(found.get("method", "get").upper(), action)
            self.forms.append(self.form)
        elif tag == "a" and "?" in found.get("href", ""):
            self._link(found["href"])
        elif self.form is not None:
            self._field(tag, found)

    def _link(self, href: str) -> None:
        parts = urlsplit(href)
        if parts.netloc or not parts.query:
            return
        fields: dict[str, str | None] = dict(parse_qsl(parts.query, keep_blank_values=True))
        self.forms.append(Form("GET", parts.path or self.page, fields))

    def _field(self, tag: str, found: dict[str, str]) -> None:
        assert self.form is not None
        name = found.get("name")
        if tag == "option" and self.select is not None:
            chosen = self.form.fields.get(self.select)
            if chosen is None or "selected" in found:
                self.form.fields[self.select] = found.get("value", "")
        if not name:
            return
        if tag == "input":
            kind = found.get("type", "text")
            if kind == "file":
                return
            ticked = kind not in ("checkbox", "radio") or "checked" in found
            if kind in ("checkbox", "radio", "submit"):
                self.form.chosen.add(name)
            if ticked or name not in self.form.fields:
                self.form.fields[name] = found.get("value", "on") if ticked else None
        elif tag == "select":
            self.select = name
            self.form.fields.setdefault(name, None)
            self.form.chosen.add(name)
        elif tag == "textarea":
            self.textarea = name
            self.form.fields[name] = ""
        elif tag == "button":
            self.form.fields.setdefault(name, found.get("value", ""))
            self.form.chosen.add(name)

    def handle_data(self, data: str) -> None:
        if self.form is not None and self.textarea is not None:
            self.form.fields[self.textarea] = (self.form.fields[self.textarea] or "") + data

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self.form = None
        elif tag == "select":
            self.select = None
        elif tag == "textarea":
            self.textarea = None


def forms_on(page: str, html: str) -> list[Form]:
    parser = _Forms(page)
    parser.feed(html)
    return [
        form
        for form in parser.forms
        if form.action.startswith("/") and not form.action.startswith(SKIPPED) and form.fields
    ]


def date_columns() -> Iterator[QuerySet[Any]]:
    """For each date or time column of every table: the rows holding a value outside the
    bounds, as the column's name (the value itself is never read: psycopg may not read it)."""
    for model in apps.get_models():
        if model._meta.proxy or not model._meta.managed:
            continue
        for column in model._meta.concrete_fields:
            if not isinstance(column, DateField):
                continue
            low, high = (
                (FIRST_MOMENT, LAST_MOMENT)
                if isinstance(column, DateTimeField)
                else (EARLIEST, LATEST)
            )
            outside = Q(**{f"{column.name}__lt": low}) | Q(**{f"{column.name}__gt": high})
            place = Value(f"{model._meta.label}.{column.name}")
            yield model._default_manager.filter(outside).order_by().values_list(place)


def dates_outside_the_calendar() -> list[str]:
    first, *others = date_columns()
    return sorted({place for (place,) in first.union(*others, all=True)})


class Walker:
    """A superuser's client; every request starts from the same session cookie."""

    def __init__(self, world: World) -> None:
        self.client = Client(raise_request_exception=False)
        self.client.force_login(world.users[SUPERUSER])
        self.cookies = SimpleCookie(self.client.cookies)

    def send(self, method: str, path: str, data: dict[str, str]) -> Any:
        self.client.cookies = SimpleCookie(self.cookies)
        if method == "GET":
            return self.client.get(path, data)
        return self.client.post(path, data)


def pages(world: World) -> list[str]:
    paths = {probe.path(world) for probe in all_probes() if "GET" in probe.methods}
    return sorted(path for path in paths if not path.startswith(SKIPPED))


def every_form(walker: Walker, world: World) -> list[Form]:
    found: dict[tuple[str, str, frozenset[str]], Form] = {}
    for path in pages(world):
        response = walker.send("GET", path, {})
        if response.status_code == 200 and "html" in response.get("Content-Type", ""):
            for form in forms_on(path, response.content.decode()):
                found.setdefault(form.key(), form)
    return list(found.values())


def values_for(form: Form, name: str) -> list[str]:
    """The hostile values a field is given: a field chosen, not typed into (a box, a list, a
    button), the digits only (a date there is simply no choice). With GATEHOUSE_WALK_ALL
    every value; otherwise one date and one digit, taken in turn from field to field so
    that every value is still sent, to some field of every kind of page (the walk costs a
    request per value and field, and the forms keep growing)."""
    if WALK_ALL:
        return DIGITS if name in form.chosen else HOSTILE
    turn = sum(map(ord, f"{form.action} {name}"))
    digit = DIGITS[turn % len(DIGITS)]
    return [digit] if name in form.chosen else [DATES[turn % len(DATES)], digit]


def problems_of(walker: Walker, form: Form) -> Iterator[str]:
    """Each field given its hostile values (values_for), one request each."""
    for name in form.walked():
        for value in values_for(form, name):
            writes = form.method == "POST"
            with rolled_back() if writes else contextlib.nullcontext():
                response = walker.send(form.method, form.action, form.data(name, value))
                stored = dates_outside_the_calendar() if writes and value in DATES else []
            where = f"{form.method} {form.action} {name}={value!r}"
            if response.status_code >= 500:
                yield f"{where}: {response.status_code}"
            if stored:
                yield f"{where}: stored {', '.join(stored)}"


def test_no_typed_date_or_number_breaks_a_page_or_is_stored(
    pipeline: Pipeline, settings: Any
) -> None:
    # Sessions in the cookie: every request starts again from the same one, whatever the
    # one before did to its session.
    settings.SESSION_ENGINE = "django.contrib.sessions.backends.signed_cookies"
    world = build_world(pipeline)
    walker = Walker(world)
    assert dates_outside_the_calendar() == []

    with refusals_unlogged():
        forms = every_form(walker, world)
        problems = [problem for form in forms for problem in problems_of(walker, form)]

    # The walk reached the forms people type dates and numbers into.
    actions = {form.action for form in forms}
    assert {"/me/delegation/", "/policy/new", "/reports/"} <= actions, sorted(actions)
    assert any(action.endswith("/simulate") for action in actions)
    assert not problems, f"{len(problems)} answers were wrong:\n" + "\n".join(problems)


@pytest.mark.django_db
@pytest.mark.parametrize("target", HOSTILE)
def test_a_page_to_go_back_to_that_is_no_path_goes_back_to_the_queue(target: str) -> None:
    """Found by the walk: redirect() reads a word that is no path as a URL's name (a 500)."""
    roles_ensure()
    lead = User.objects.create_user("lead")
    lead.groups.add(Group.objects.get(name="ops-leads"))
    client = Client(raise_request_exception=False)
    client.force_login(lead)

    answer = client.post("/ops/queues/retry_exhausted/claim", {"next": target})

    assert answer.status_code == 302
    assert answer["Location"] == "/ops/queues/retry_exhausted/"
