"""Mailboxes as a watcher leaves them: a channel's mailbox with its progress written on the
row (as automation.intake.imap.MailboxWatcher writes it), for the pages and /metrics."""

from __future__ import annotations

from typing import Any

from automation.models import IntakeChannel, Mailbox


def make_mailbox(name: str, **progress: Any) -> Mailbox:
    """A mailbox of a new channel `name`, set up as in the admin; `progress` is what its
    watcher wrote (status, last_contact_at, day, taken_today...)."""
    channel = IntakeChannel.objects.create(
        name=name,
        classifier="recorded",
        classifier_version="recorded-classifier-1",
        workflow_version="workflow-1",
        prompt_version="prompt-1",
    )
    box = Mailbox.objects.create(
        channel=channel,
        host="imap.example.com",
        username=f"{name}@example.com",
        secret_variable=f"{name.upper().replace('-', '_')}_IMAP_PASSWORD",
    )
    if progress:
        # As the watcher writes it: an UPDATE of its own fields (imap.MailboxWatcher._note).
        Mailbox.objects.filter(pk=box.pk).update(**progress)
        box.refresh_from_db()
    return box
