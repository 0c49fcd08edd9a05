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
from aiosmtpd.smtp import AuthResult, LoginPassword


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


def _only(login: tuple[str, str]) -> Any:
    def authenticate(
        server: Any, session: Any, envelope: Any, mechanism: str, auth_data: Any
    ) -> AuthResult:
        given = (auth_data.login.decode(), auth_data.password.decode())
        # handled=False: the server answers itself (235, or 535 for a refusal).
        return AuthResult(
            success=isinstance(auth_data, LoginPassword) and given == login, handled=False
        )

    return authenticate


@contextlib.contextmanager
def smtp_server(*, login: tuple[str, str] | None = None) -> Iterator[Inbox]:
    """A server on a free loopback port for the duration of the block. With `login`, it takes
    mail only from that user and password (in the clear: loopback only)."""
    inbox = Inbox("127.0.0.1", free_port())
    options: dict[str, Any] = {}
    if login is not None:
        options.update(authenticator=_only(login), auth_required=True, auth_require_tls=False)
    controller = Controller(inbox, hostname=inbox.host, port=inbox.port, **options)
    controller.start()
    try:
        yield inbox
    finally:
        controller.stop()


SMTP_BACKEND = "django.core.mail.backends.smtp.EmailBackend"


def send_through(settings: Any, server: Inbox) -> None:
    """Point the settings' e-mail at `server`: core.mail sends over EMAIL_BACKEND, which the
    test runner sets to a memory one."""
    settings.EMAIL_BACKEND = SMTP_BACKEND
    settings.EMAIL_HOST, settings.EMAIL_PORT = server.host, server.port


@contextlib.contextmanager
def mail_through(
    settings: Any, *, base_url: str = "https://gatehouse.example.com"
) -> Iterator[Inbox]:
    """A server on a free loopback port that the settings' own e-mail backend sends through
    (the test runner swaps in a memory one), and the address notifications link to."""
    with smtp_server() as server:
        send_through(settings, server)
        settings.GATEHOUSE = {**settings.GATEHOUSE, "BASE_URL": base_url}
        yield server
