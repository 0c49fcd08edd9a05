"""The one way mail leaves the building, in the shape of healthchecks' e-mail module and
Zulip's `send_email`: a message is built from templates, or from text prepared elsewhere, and
sent over the connection of the settings' EMAIL_BACKEND.

- `render(name, context)` reads `<name>.subject.txt` and `<name>.txt`, and `<name>.html` when
  there is one, through Django's template engine: core imports no app, the app that owns a
  message keeps its templates (notifications/templates/notifications/...). A text template
  starts with `{% autoescape off %}`, as Django's own password-reset mail does: the engine
  escapes for HTML, and a name with an apostrophe is not `&#x27;` in a plain-text mail. The
  subject is one line, whatever its template's layout.
- `message(...)` builds the message: From, To, Reply-To, and Message-ID, In-Reply-To and
  References as arguments (a caller that must send the same message twice gives the same
  Message-ID), plus any other header.
- `send(message)` opens the connection first (connect, STARTTLS, log in: nothing is sent
  yet), so a caller can tell "never reached the server" (`NotConnected`, nothing was sent)
  from a failure while the message was being taken, which is raised as it comes.

Development sends to files (config/dev_settings.py) and the tests to memory unless a test
points EMAIL_BACKEND at its own loopback SMTP server (tests/mailserver.py); production sends
over SMTP with Django's EMAIL_* settings (docs/operating.md).
"""

from __future__ import annotations

import smtplib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.core.mail import EmailMultiAlternatives, get_connection
from django.template import TemplateDoesNotExist
from django.template.loader import render_to_string

# What `message` builds and `send` sends: the modules that build mail name this type, never
# django.core.mail's classes.
Message = EmailMultiAlternatives


@dataclass(frozen=True)
class Text:
    """A message's words: its subject, its plain text and, if any, its HTML."""

    subject: str
    body: str
    html: str | None = None


class NotConnected(Exception):
    """The mail server could not be reached, or refused the login: nothing was sent."""


def one_line(text: str) -> str:
    """`text` on one line, without control characters: a line break in a header is refused
    by the mail library (and a name from outside may carry one)."""
    return " ".join("".join(c if c.isprintable() else " " for c in text).split())


def render(name: str, context: Mapping[str, Any]) -> Text:
    """The subject, text and HTML of the templates `<name>.subject.txt`, `<name>.txt` and
    (optional) `<name>.html`."""
    values = dict(context)
    subject = one_line(render_to_string(f"{name}.subject.txt", values))
    body = render_to_string(f"{name}.txt", values)
    try:
        html: str | None = render_to_string(f"{name}.html", values)
    except TemplateDoesNotExist:
        html = None
    return Text(subject, body, html)


def message(
    text: Text,
    *,
    to: Sequence[str],
    from_email: str | None = None,
    reply_to: Sequence[str] = (),
    message_id: str | None = None,
    in_reply_to: str | None = None,
    references: Sequence[str] = (),
    headers: Mapping[str, str] | None = None,
) -> Message:
    """The message to send: `text` from `from_email` (DEFAULT_FROM_EMAIL when None) to `to`.
    Message ids are given with their angle brackets (`<key@domain>`); with no `message_id`
    the backend makes one."""
    said = dict(headers or {})
    if message_id:
        said["Message-ID"] = message_id
    if in_reply_to:
        said["In-Reply-To"] = in_reply_to
    if references:
        said["References"] = " ".join(references)
    built = EmailMultiAlternatives(
        subject=one_line(text.subject),
        body=text.body,
        from_email=from_email,
        to=list(to),
        reply_to=list(reply_to) or None,
        headers=said,
    )
    if text.html is not None:
        built.attach_alternative(text.html, "text/html")
    return built


def send(built: Message) -> None:
    """Send one message over the EMAIL_BACKEND's connection. Raises NotConnected (from the
    cause) when the connection cannot be opened; anything sending raises after that, as it
    comes (the server may or may not have taken the message)."""
    connection = get_connection()
    try:
        connection.open()
    except (smtplib.SMTPException, OSError) as exc:
        raise NotConnected(f"{type(exc).__name__}: {exc}") from exc
    try:
        connection.send_messages([built])
    finally:
        connection.close()


def send_templated(
    name: str, context: Mapping[str, Any], *, to: Sequence[str], **options: Any
) -> None:
    """Render the templates `name` and send the message (`options` as `message` takes them)."""
    send(message(render(name, context), to=to, **options))
