"""Replies to the sender, in the request's thread, by core.mail (the settings' EMAIL_BACKEND).

The message was rendered when the effect was written (the payload's `request`: recipient,
subject, body, language, and the thread it answers). Each attempt sends the same message
with `In-Reply-To` and `References` set and a `Message-ID` made from the effect's key, so a
resend after an attempt whose outcome is unknown is recognisably the same message. SMTP
servers do not deduplicate, so such an attempt holds the run for a person (who may send it
again, as the same message) instead of being sent again on its own.

The text is the business's: the catalogue's reply template, rendered in its sandbox when the
effect was written, is handed to core.mail as prepared text (not wrapped in a Django template
of its own: every attempt must send the bytes the effect recorded, and a second rendering
could only change them). In production the backend is SMTP and the server, its port, STARTTLS
and the credentials are Django's e-mail settings, from the environment (docs/operating.md):
EMAIL_HOST, EMAIL_PORT, EMAIL_USE_TLS, EMAIL_HOST_USER, EMAIL_HOST_PASSWORD. The From and
Reply-To were written into the message with it: the effect's `from_address` and `reply_to`,
else its intake channel's, else DEFAULT_FROM_EMAIL and no Reply-To.

A request taken from a mailbox (automation/intake/imap.py) whose `sent_folder` is set gets a
copy of its reply appended there over IMAP after it was sent.
"""

from __future__ import annotations

import smtplib

from django.conf import settings

from automation.effects.base import Delivery
from automation.effects.models import DeliveryResult, Effect
from automation.intake.imap import sent_copy
from core.addresses import mail_address_refusal
from core.mail import Message, NotConnected, Text, message, send
from policy.catalogue import EmailReplyConfig

SENT_KEPT = 20_000  # characters of the sent message kept on the effect


# Characters of the effect's key in a Message-ID (160 bits): the header then fits on one line.
MESSAGE_ID_KEY = 40


def sender(effect: Effect) -> str:
    """Who the reply is from: the address written into it with the effect (its catalogue
    settings', else its channel's), else the server's DEFAULT_FROM_EMAIL."""
    request = effect.payload.get("request") or {}
    return str(request.get("from") or settings.DEFAULT_FROM_EMAIL)


def message_id(effect: Effect) -> str:
    """The reply's Message-ID: the effect's key at the sender's domain, the same every time."""
    domain = sender(effect).rpartition("@")[2].strip(" >") or "localhost"
    return f"<{effect.idempotency_key[:MESSAGE_ID_KEY]}@{domain}>"


def reply_message(effect: Effect) -> Message:
    """The reply as core.mail builds it: the text the catalogue's template rendered when the
    effect was written, in the request's thread, with the effect's Message-ID."""
    request = effect.payload.get("request") or {}
    text = Text(str(request.get("subject") or ""), str(request.get("body") or ""))
    return message(
        text,
        to=[str(request.get("to") or "")],
        from_email=sender(effect),
        reply_to=[str(request["reply_to"])] if request.get("reply_to") else (),
        message_id=message_id(effect),
        in_reply_to=f"<{request['in_reply_to']}>" if request.get("in_reply_to") else None,
        references=[f"<{ref}>" for ref in request.get("references") or ()],
        headers={"Auto-Submitted": "auto-replied"},
    )


def _address_refusal(effect: Effect) -> str | None:
    """Why the reply's From or Reply-To is no address to send with (a line break in one
    would write a header of its own); None when both are."""
    request = effect.payload.get("request") or {}
    said = {"From": sender(effect), "Reply-To": str(request.get("reply_to") or "")}
    for header, address in said.items():
        refusal = mail_address_refusal(address) if address else None
        if refusal is not None:
            return f"the reply's {header} is not an address to send with: {refusal}"
    return None


def _code(exc: smtplib.SMTPException) -> int:
    if isinstance(exc, smtplib.SMTPRecipientsRefused):
        return min((code for code, _ in exc.recipients.values()), default=550)
    return int(getattr(exc, "smtp_code", 0) or 0)


class EmailReplyAdapter:
    local = False
    # An SMTP server cannot tell a repeat: after an unknown outcome a person decides.
    honours_idempotency_keys = False
    max_attempts = 6
    deadline_seconds = 3600.0

    def __init__(self, config: EmailReplyConfig) -> None:
        self.config = config

    def deliver(self, effect: Effect) -> Delivery:
        refusal = _address_refusal(effect)
        if refusal is not None:  # saved past its checks: never sent as it is
            return Delivery(DeliveryResult.REJECTED, detail=refusal)
        reply = reply_message(effect)
        if not reply.to or not reply.to[0]:
            return Delivery(DeliveryResult.REJECTED, detail="the request has no sender to reply to")
        try:
            send(reply)
        except NotConnected as exc:  # nothing was sent: trying again is safe
            cause = exc.__cause__ or exc
            return Delivery(
                DeliveryResult.RETRY, error_class=type(cause).__name__, detail=str(cause)
            )
        except (smtplib.SMTPServerDisconnected, TimeoutError) as exc:
            # The message may have been taken before the connection went.
            return Delivery(
                DeliveryResult.UNCERTAIN, error_class=type(exc).__name__, detail=str(exc)
            )
        except smtplib.SMTPException as exc:
            code = _code(exc)
            outcome = DeliveryResult.RETRY if 400 <= code < 500 else DeliveryResult.REJECTED
            return Delivery(outcome, status_code=code or None, error_class=type(exc).__name__)
        except OSError as exc:
            return Delivery(
                DeliveryResult.UNCERTAIN, error_class=type(exc).__name__, detail=str(exc)
            )
        sent = reply.message()
        # A request taken from a mailbox with a Sent folder: a copy is kept there, as a
        # person's mail client would. A failure to copy is said, never a failed delivery.
        copied = sent_copy(effect.run.channel_id, sent.as_bytes(linesep="\r\n"))
        return Delivery(
            DeliveryResult.DELIVERED,
            reference=message_id(effect)[:200],
            body=sent.as_string()[:SENT_KEPT],
            detail=f"sent to {reply.to[0]} as {message_id(effect)}"
            + (f"; {copied}" if copied else ""),
        )
