"""A real SMTP server on 127.0.0.1 (aiosmtpd) that keeps every message it accepts, and can be
told to refuse the next ones or to drop the connection after the data was sent."""

from __future__ import annotations

import contextlib
import email
import email.policy
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.message import EmailMessage
from typing import Any

from aiosmtpd.controller import Controller


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Received:
    sender: str
    recipients: list[str]
    message: EmailMessage


@dataclass
class Inbox:
    """What the server took in, and what it answers next."""

    host: str
    port: int
    received: list[Received] = field(default_factory=list)
    # The SMTP answer to the next DATA commands, e.g. "451 try later"; empty: accept.
    answers: list[str] = field(default_factory=list)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        if self.answers:
            return self.answers.pop(0)
        message = email.message_from_bytes(envelope.content, policy=email.policy.default)
        self.received.append(
            Received(envelope.mail_from, list(envelope.rcpt_tos), message)  # type: ignore[arg-type]
        )
        return "250 OK"


@contextlib.contextmanager
def smtp_server() -> Iterator[Inbox]:
    """A server on a free loopback port for the duration of the block."""
    inbox = Inbox("127.0.0.1", free_port())
    controller = Controller(inbox, hostname=inbox.host, port=inbox.port)
    controller.start()
    try:
        yield inbox
    finally:
        controller.stop()
