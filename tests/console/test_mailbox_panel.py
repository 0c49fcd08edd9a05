"""The queues page shows each mailbox's watcher: alive or not heard from, and the day's mail."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta

import pytest
import time_machine
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils.html import escape

from accounts.roles import roles_ensure
from automation.intake.selectors import WATCHER_STATUSES
from console.vocabulary import MAILBOX_STATUSES
from tests.html_rows import Row, rows
from tests.mailboxes import make_mailbox

T0 = datetime(2026, 11, 30, 10, 42, tzinfo=UTC)  # TIME_ZONE is UTC: the local day is T0's
TODAY = date(2026, 11, 30)
LONG_ERROR = (
    "ConnectionLost: could not connect to imap.example.com:993: [Errno 111] Connection "
    "refused; the server's address was tried again after the backoff and refused again"
)


@pytest.fixture
def lead(ops_lead: User) -> Client:
    roles_ensure()
    client = Client()
    client.force_login(ops_lead)
    return client


def page(client: Client) -> str:
    with time_machine.travel(T0, tick=False):
        response = client.get(reverse("queues:list"))
    assert response.status_code == 200
    return response.content.decode()


def mailbox_rows(html: str) -> dict[str, Row]:
    return {row.testid.removeprefix("mailbox-row-"): row for row in rows(html, "mailbox-row-")}


def row_tag(html: str, name: str) -> str:
    found = re.search(rf'<tr data-testid="mailbox-row-{name}"[^>]*>', html)
    assert found is not None, name
    return found.group(0)


def test_a_live_mailbox_and_one_not_heard_from_for_twenty_minutes(lead: Client) -> None:
    make_mailbox(
        "support",
        status="idle",
        last_contact_at=T0 - timedelta(seconds=4),
        day=TODAY,
        taken_today=12,
        refused_today=2,
        errors_today=1,
        last_error=LONG_ERROR,
        last_error_at=T0 - timedelta(hours=1),
    )
    make_mailbox("billing", status="idle", last_contact_at=T0 - timedelta(minutes=20), day=TODAY)

    html = page(lead)
    found = mailbox_rows(html)

    assert "<h2>Mailboxes</h2>" in html
    cells = [cell.text for cell in found["support"].cells]
    assert cells[:7] == [
        "support",
        "support@example.com at imap.example.com / INBOX",
        "Waiting for mail (IDLE)",
        "10:41:56",
        "12",
        "2",
        "1",
    ]
    assert "sla-overdue" not in row_tag(html, "support")
    # The last error cut short, the whole of it a click (or a hover) away, and when.
    said = escape(LONG_ERROR)
    assert f'<summary title="{said}">{escape(LONG_ERROR[:79])}…</summary>' in html
    assert f"<pre>{said}</pre>" in html
    assert cells[7].endswith("at 09:42:00")
    # Silent for 20 minutes, though its last word was "idle": a problem, said as one.
    assert found["billing"].cells[2].text == "Not heard from since 10:22"
    assert 'class="sla-overdue"' in row_tag(html, "billing")
    assert '<span class="badge overdue">Not heard from</span>' in html


def test_the_days_counts_start_again_on_a_new_day(lead: Client) -> None:
    make_mailbox(
        "support",
        status="polling",
        last_contact_at=T0 - timedelta(seconds=30),
        day=TODAY - timedelta(days=1),
        taken_today=7,
        refused_today=3,
        errors_today=5,
    )

    cells = mailbox_rows(page(lead))["support"].cells

    assert [cell.text for cell in cells[4:7]] == ["0", "0", "0"]
    assert cells[2].text == "Polling every 60 s"


def test_each_state_is_said_in_words_and_a_renumbered_folder_plainly(lead: Client) -> None:
    recent = T0 - timedelta(seconds=10)
    make_mailbox(
        "dropped",
        status="reconnecting",
        last_contact_at=recent,
        uidvalidity=1700000000,
        renumbered_at=datetime(2026, 11, 28, 8, 0, tzinfo=UTC),
    )
    make_mailbox("ended", status="stopped", last_contact_at=recent)
    make_mailbox("fresh")  # never started
    make_mailbox("booting", status="starting")
    make_mailbox("old", status="idle", last_contact_at=datetime(2026, 11, 27, 23, 5, tzinfo=UTC))

    html = page(lead)
    found = {name: row.cells[2].text for name, row in mailbox_rows(html).items()}

    assert found == {
        "booting": "Not heard from since it started",
        "dropped": "Reconnecting",
        "ended": "Stopped",
        "fresh": "Never started",
        "old": "Not heard from since 27 Nov 23:05",
    }
    assert "renumbered by the server on 28 Nov 2026" in mailbox_rows(html)["dropped"].text
    assert "UIDVALIDITY" not in html and "1700000000" not in html
    # Reconnecting is alive (it writes between tries), yet marked: no mail comes in meanwhile.
    assert "sla-overdue" not in row_tag(html, "dropped")
    assert '<span class="badge overdue"><span class="term"' in html
    for silent in ("ended", "fresh", "booting", "old"):
        assert 'class="sla-overdue"' in row_tag(html, silent), silent
    assert mailbox_rows(html)["fresh"].cells[3].text == "—"
    assert mailbox_rows(html)["old"].cells[3].text == "27 Nov 23:05:00"


def test_without_a_mailbox_there_is_no_mailboxes_panel(lead: Client) -> None:
    html = page(lead)

    assert "Mailboxes" not in html
    assert 'data-testid="mailboxes"' not in html


def queries(client: Client) -> int:
    page(client)  # sessions and permission caches warm, as in use
    with CaptureQueriesContext(connection) as captured:
        page(client)
    return len(captured)


def test_the_pages_queries_do_not_grow_with_the_mailboxes(lead: Client) -> None:
    make_mailbox("first", status="idle", last_contact_at=T0, day=TODAY, taken_today=1)
    one = queries(lead)
    for name in ("second", "third", "fourth"):
        make_mailbox(name, status="polling", last_contact_at=T0, day=TODAY, last_error="x")

    assert queries(lead) == one
    assert len(mailbox_rows(page(lead))) == 4


def test_every_status_a_watcher_writes_has_words() -> None:
    assert set(MAILBOX_STATUSES) == set(WATCHER_STATUSES)
    assert all(term.label and term.explanation for term in MAILBOX_STATUSES.values())
