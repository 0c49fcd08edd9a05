"""What the queues page and /metrics read of a mailbox (automation.intake.selectors): alive
while its watcher writes, the day's counts only for the day they were counted."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from automation.intake import imap
from automation.intake.selectors import WATCHER_STATUSES, mailbox_views, silent_after
from automation.models import Mailbox
from tests.mailboxes import make_mailbox

NOW = datetime(2026, 11, 30, 10, 42, tzinfo=UTC)

pytestmark = pytest.mark.django_db


def test_a_watcher_is_silent_after_three_polls_or_two_minutes_whichever_is_longer() -> None:
    assert silent_after(10) == timedelta(seconds=120)
    assert silent_after(60) == timedelta(seconds=180)
    assert silent_after(300) == timedelta(seconds=900)


@pytest.mark.parametrize(
    ("status", "ago", "alive"),
    [
        ("idle", 179, True),
        ("idle", 181, False),
        ("polling", 0, True),
        ("connected", 30, True),
        ("reconnecting", 30, True),
        ("starting", 30, True),
        ("stopped", 1, False),  # it said goodbye: however recent, no watcher is at work
        ("never started", 1, False),
    ],
)
def test_alive_is_a_recent_word_from_a_watcher_at_work(status: str, ago: int, alive: bool) -> None:
    make_mailbox("support", status=status, last_contact_at=NOW - timedelta(seconds=ago))

    (view,) = mailbox_views(now=NOW)

    assert view.alive is alive


def test_never_heard_from_is_not_alive() -> None:
    make_mailbox("support", status="starting")

    (view,) = mailbox_views(now=NOW)

    assert view.alive is False
    assert view.last_contact_at is None


def test_counts_of_another_day_read_as_zero() -> None:
    counts = {"taken_today": 4, "refused_today": 2, "errors_today": 1}
    make_mailbox("today", day=NOW.date(), **counts)
    make_mailbox("yesterday", day=NOW.date() - timedelta(days=1), **counts)
    make_mailbox("never")

    views = {view.channel: view for view in mailbox_views(now=NOW)}

    assert (views["today"].taken_today, views["today"].refused_today) == (4, 2)
    assert views["today"].errors_today == 1
    for name in ("yesterday", "never"):
        view = views[name]
        assert (view.taken_today, view.refused_today, view.errors_today) == (0, 0, 0), name


def test_every_mailbox_in_one_query_by_channel_name() -> None:
    for name in ("support", "billing", "alerts"):
        make_mailbox(name, watcher="gh-1 pid 42", renumbered_at=NOW)

    with CaptureQueriesContext(connection) as captured:
        views = mailbox_views(now=NOW)

    assert len(captured) == 1
    assert [view.channel for view in views] == ["alerts", "billing", "support"]
    assert views[0].mailbox == "alerts@example.com at imap.example.com / INBOX"
    assert views[0].watcher == "gh-1 pid 42"
    assert views[0].renumbered_at == NOW


def test_the_statuses_are_those_the_watcher_writes() -> None:
    source = Path(imap.__file__).read_text()
    written = set(re.findall(r'(?:status=|_status\()"([a-z ]+)"', source))

    assert written, "the watcher's statuses were not found in its source"
    assert written | {Mailbox._meta.get_field("status").default} == set(WATCHER_STATUSES)
