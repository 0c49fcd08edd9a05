"""Mailboxes in the admin: set up there, or from GATEHOUSE_MAILBOXES and then only shown; what
the watcher wrote is never edited, nor written over by a save."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from automation.models import IntakeChannel, Mailbox
from tests.mailboxes import make_mailbox

T0 = datetime(2026, 11, 30, 10, 42, tzinfo=UTC)
WARNING = "defined by the GATEHOUSE_MAILBOXES setting"


@pytest.fixture
def root(db: None) -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", "root@example.com", None))
    return client


def change_url(box: Mailbox) -> str:
    return reverse("admin:automation_mailbox_change", args=[box.pk])


def form_values(box: Mailbox, **changes: Any) -> dict[str, Any]:
    """What the change form posts back for an admin-defined mailbox, with `changes`."""
    values = {
        "host": box.host,
        "port": box.port,
        "security": box.security,
        "tls_ca_file": box.tls_ca_file,
        "username": box.username,
        "auth": box.auth,
        "secret_variable": box.secret_variable,
        "oauth_token_url": "",
        "oauth_client_id": "",
        "oauth_scope": "",
        "refresh_token_variable": "",
        "folder": box.folder,
        "after_taking": box.after_taking,
        "processed_folder": box.processed_folder,
        "rejected_folder": box.rejected_folder,
        "sent_folder": box.sent_folder,
        "use_idle": "on",
        "poll_seconds": box.poll_seconds,
        "_save": "Save",
    }
    return {**values, **changes}


def test_a_mailbox_from_the_settings_is_shown_read_only_with_a_warning(root: Client) -> None:
    box = make_mailbox("support", from_settings=True, status="idle", last_contact_at=T0)

    page = root.get(change_url(box)).content.decode()

    assert WARNING in page
    assert "written over at the watcher's next start" in page.replace("&#x27;", "'")
    for name in ("host", "username", "secret_variable", "folder", "poll_seconds", "status"):
        assert f'name="{name}"' not in page, name
    assert "imap.example.com" in page and "SUPPORT_IMAP_PASSWORD" in page
    for title in ("Server", "Sign-in", "Folders", "Watching", "Progress (written by the watcher)"):
        assert f">{title}</h2>" in page, title


def test_a_post_changes_nothing_of_a_mailbox_from_the_settings(root: Client) -> None:
    box = make_mailbox("support", from_settings=True)

    response = root.post(change_url(box), form_values(box, host="evil.example.net"))

    assert response.status_code == 302
    box.refresh_from_db()
    assert box.host == "imap.example.com"


def test_an_admin_mailbox_has_its_settings_editable_and_its_progress_read_only(
    root: Client,
) -> None:
    box = make_mailbox("support", status="polling", taken_today=3, day=T0.date())

    page = root.get(change_url(box)).content.decode()

    assert WARNING not in page
    for name in ("host", "port", "username", "secret_variable", "folder", "poll_seconds"):
        assert f'name="{name}"' in page, name
    for name in ("channel", "status", "taken_today", "last_contact_at", "uidvalidity"):
        assert f'name="{name}"' not in page, name
    assert "never the secret itself" in page


def test_a_save_keeps_what_the_watcher_wrote_meanwhile(root: Client) -> None:
    box = make_mailbox("support", status="idle", day=T0.date(), taken_today=3)
    root.get(change_url(box))
    # The watcher writes while the form is open.
    later = timezone.now()
    Mailbox.objects.filter(pk=box.pk).update(taken_today=4, last_contact_at=later)

    response = root.post(change_url(box), form_values(box, folder="Support", poll_seconds=30))

    assert response.status_code == 302, response.content.decode()[:2000]
    box.refresh_from_db()
    assert (box.folder, box.poll_seconds) == ("Support", 30)
    assert (box.taken_today, box.last_contact_at, box.status) == (4, later, "idle")


def test_the_add_form_saves_a_mailbox(root: Client, channel: IntakeChannel) -> None:
    page = root.get(reverse("admin:automation_mailbox_add")).content.decode()
    assert "Progress (written by the watcher)" not in page

    values = form_values(
        Mailbox(channel=channel),
        channel=channel.pk,
        host="imap.example.com",
        username="help@example.com",
        secret_variable="HELP_IMAP_PASSWORD",
        oauth_token_url="login.example.com/oauth2/token",
    )
    response = root.post(reverse("admin:automation_mailbox_add"), values)

    assert response.status_code == 302, response.content.decode()[:2000]
    box = Mailbox.objects.get(channel=channel)
    assert (box.host, box.port, box.folder) == ("imap.example.com", 993, "INBOX")
    assert box.secret_variable == "HELP_IMAP_PASSWORD"
    assert box.oauth_token_url == "https://login.example.com/oauth2/token"
    assert (box.status, box.from_settings) == ("never started", False)


@pytest.mark.parametrize("value", ["hunter2!", "my password", "1PASSWORD", "pass=word"])
def test_a_secret_in_place_of_a_variables_name_is_refused(
    root: Client, channel: IntakeChannel, value: str
) -> None:
    values = form_values(
        Mailbox(channel=channel),
        channel=channel.pk,
        host="imap.example.com",
        username="help@example.com",
        secret_variable=value,
    )
    response = root.post(reverse("admin:automation_mailbox_add"), values)

    assert response.status_code == 200
    assert "not its value" in response.content.decode().replace("&#x27;", "'")
    assert not Mailbox.objects.exists()


def test_the_list_shows_each_mailbox_and_todays_count(root: Client) -> None:
    make_mailbox("support", status="idle", day=timezone.localdate(), taken_today=5)
    yesterday = timezone.localdate() - timedelta(days=1)
    make_mailbox("billing", status="stopped", day=yesterday, taken_today=8)

    page = root.get(reverse("admin:automation_mailbox_changelist")).content.decode()

    assert "support@example.com" in page and "billing@example.com" in page
    assert "Waiting for mail (IDLE)" in page and "Stopped" in page
    assert '<td class="field-taken">5</td>' in page
    assert '<td class="field-taken">0</td>' in page
