"""A mailbox on a real IMAP server (Debian's Dovecot on 127.0.0.1, tests/imapserver.py), watched
by the real command (`manage.py mailbox_watch`) in a process of its own: mail taken within
seconds through IDLE, each message exactly once, a crash between storing and telling the
server, bad mail set aside, the server restarting, and a folder renumbered."""

from __future__ import annotations

import email
import email.policy
import json
import os
import resource
import signal
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from email.message import EmailMessage
from email.utils import make_msgid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import parse_qs

import pytest
from django.db import connection
from imapclient.exceptions import LoginError

from accounts.roles import roles_ensure
from automation.intake.imap import REFUSED, TAKEN, MailboxWatcher
from automation.intake.services import channel_get_or_create
from automation.mail import parse_message
from automation.models import Effect, IntakeChannel, IntakeRecord, Mailbox, Run, State
from core.codes import MailRefusal, Outcome
from tests.automation.intake.test_mail_budget import MEMORY_LIMIT, bomb
from tests.catalogues import activate_effects, email_reply_effect
from tests.conftest import Pipeline
from tests.database import database_url
from tests.imapserver import USER, CuttingProxy, Dovecot, dovecot, dovecot_available
from tests.mailserver import send_through, smtp_server
from worker.dispatch import inline

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not dovecot_available(), reason="Dovecot (dovecot-imapd) is not installed"),
]

REPO = Path(__file__).resolve().parents[3]
CHANNEL = "support"
SECRET = "SUPPORT_IMAP_PASSWORD"
REPLY = {
    "en": {
        "subject": "Re: {{ run.subject }}",
        "body": "Hello,\n\nwe have your request {{ run.event_id }}.\n",
    }
}


def mail(n: int, *, subject: str = "", body: str = "", size: int = 0) -> bytes:
    message = EmailMessage()
    message["From"] = f"Customer {n} <customer{n}@northwind.example>"
    message["To"] = "support@shop.example"
    message["Subject"] = subject or f"Quote for {n + 10} seats, request {n}"
    message["Message-ID"] = make_msgid(f"m{n}", domain="northwind.example")
    text = body or f"Hello,\n\nplease send a quote for {n + 10} seats of the team plan.\n"
    if size:
        text += "x" * size
    message.set_content(text)
    return message.as_bytes(policy=email.policy.SMTP)  # CRLF, as a server keeps it


@pytest.fixture
def server() -> Iterator[Dovecot]:
    with dovecot() as running:
        yield running


def settings_for(server: Dovecot, port: int | None = None, **overrides: Any) -> dict[str, Any]:
    return {
        CHANNEL: {
            "host": "127.0.0.1",
            "port": port or server.port,
            "security": "none",
            "username": server.user,
            "secret_variable": SECRET,
            **overrides,
        }
    }


class Watcher:
    """`manage.py mailbox_watch support` in a session of its own, against the test database."""

    def __init__(self, server: Dovecot, *, port: int | None = None, **options: Any) -> None:
        self.env_settings: dict[str, str] = options.pop("env", {})
        self.memory: int | None = options.pop("memory", None)  # its address space, in bytes
        self.settings = settings_for(server, port, **options)
        self.process: subprocess.Popen[bytes] | None = None
        self.log = Path(server.root) / f"watcher-{time.monotonic_ns()}.log"

    def start(self) -> Watcher:
        connection.close()  # the watcher uses its own session
        env = {
            **os.environ,
            "DATABASE_URL": database_url(),
            "GATEHOUSE_LOG_LEVEL": "INFO",
            "GATEHOUSE_MAILBOXES": json.dumps(self.settings),
            "GATEHOUSE_MAILBOX_BACKOFF_MAX": "2",
            SECRET: Dovecot.password,
            **self.env_settings,
        }
        self.process = subprocess.Popen(  # noqa: S603 - our own interpreter, fixed arguments
            [sys.executable, "manage.py", "mailbox_watch", CHANNEL],
            cwd=REPO,
            env=env,
            stdout=self.log.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=self._limit if self.memory else None,
        )
        return self

    def _limit(self) -> None:
        resource.setrlimit(resource.RLIMIT_AS, (self.memory, self.memory))

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        if self.alive():
            assert self.process is not None
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)

    def terminate(self) -> int:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=30)


@pytest.fixture
def watchers() -> Iterator[list[Watcher]]:
    started: list[Watcher] = []
    yield started
    for watcher in started:
        watcher.kill()


@pytest.fixture
def start(server: Dovecot, watchers: list[Watcher], policy: None) -> Callable[..., Watcher]:
    channel_get_or_create(name=CHANNEL)

    def start_watcher(**options: Any) -> Watcher:
        watcher = Watcher(server, **options).start()
        watchers.append(watcher)
        return watcher

    return start_watcher


def wait_for(condition: Callable[[], bool], timeout: float, what: str, watcher: Watcher) -> float:
    """Seconds until `condition` held; fails with the watcher's output after `timeout`."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout:
            raise AssertionError(
                f"timed out after {timeout} s waiting for {what}:\n{watcher.output()[-4000:]}"
            )
        time.sleep(0.05)
    return time.monotonic() - started


def status(value: str) -> Callable[[], bool]:
    return lambda: Mailbox.objects.filter(channel__name=CHANNEL, status=value).exists()


def runs_from_mailbox() -> int:
    return Run.objects.filter(intake__source__startswith="imap://").count()


def test_a_message_becomes_a_run_within_five_seconds_through_idle(
    server: Dovecot, start: Callable[..., Watcher]
) -> None:
    watcher = start()  # polls every 60 s: only IDLE can be this quick
    wait_for(status("idle"), 30, "the watcher to wait in IDLE", watcher)

    server.append(mail(1))
    seconds = wait_for(lambda: runs_from_mailbox() == 1, 5, "the run", watcher)

    run = Run.objects.get()
    assert run.intake.source.startswith(f"imap://{server.user}@127.0.0.1/INBOX;UIDVALIDITY=")
    assert seconds < 5
    wait_for(lambda: len(server.uids("Processed")) == 1, 5, "the move", watcher)
    assert server.uids("INBOX") == []
    box = Mailbox.objects.get()
    assert (box.taken_today, box.errors_today) == (1, 0)
    assert box.last_contact_at is not None and box.uidvalidity is not None
    # SIGTERM: it leaves IDLE, logs out and stops in order.
    assert watcher.terminate() == 0
    assert Mailbox.objects.get().status == "stopped"
    assert "stopped; 1 taken, 0 refused" in watcher.output()


def test_two_hundred_messages_at_once_become_two_hundred_runs_each_once(
    server: Dovecot, start: Callable[..., Watcher]
) -> None:
    watcher = start()
    wait_for(status("idle"), 30, "the watcher to wait in IDLE", watcher)

    server.append(*(mail(n) for n in range(200)))
    wait_for(lambda: len(server.uids("Processed")) == 200, 120, "200 messages taken", watcher)

    assert runs_from_mailbox() == 200
    assert IntakeRecord.objects.count() == 200
    assert Run.objects.values("event_id").distinct().count() == 200
    assert server.uids("INBOX") == []
    assert Mailbox.objects.get().taken_today == 200


def test_a_watcher_killed_between_storing_and_telling_makes_no_second_run(
    server: Dovecot, start: Callable[..., Watcher]
) -> None:
    killed: list[Watcher] = []
    proxy = CuttingProxy(server.port, b"UID MOVE", lambda: killed[0].kill())
    try:
        killed.append(start(port=proxy.port))
        wait_for(status("idle"), 30, "the watcher to wait in IDLE", killed[0])
        server.append(mail(1))
        assert proxy.fired.wait(15), killed[0].output()
    finally:
        proxy.close()
    # Stored, and the server never told: the message is still in the INBOX.
    assert not killed[0].alive()
    assert IntakeRecord.objects.count() == 1 and runs_from_mailbox() == 1
    assert len(server.uids("INBOX")) == 1

    again = start()
    wait_for(lambda: len(server.uids("Processed")) == 1, 30, "the message moved", again)

    assert runs_from_mailbox() == 1
    assert IntakeRecord.objects.count() == 1  # known by its bytes: not even stored again
    assert server.uids("INBOX") == []
    assert "0 taken, 0 refused, 1 taken before" in again.output()


def test_malformed_and_oversized_mail_is_refused_set_aside_and_the_watcher_goes_on(
    server: Dovecot, start: Callable[..., Watcher]
) -> None:
    limit = 200_000
    watcher = start(env={"GATEHOUSE_MAX_MESSAGE_BYTES": str(limit)})
    wait_for(status("idle"), 30, "the watcher to wait in IDLE", watcher)
    oversized = mail(1, size=3 * limit)  # read in 1 MiB chunks, kept as its head
    malformed = b"\x00\xff\xfe this is no message at all \r\n\r\n\x00"

    server.append(oversized, malformed, mail(2))
    wait_for(lambda: len(server.uids("Rejected")) == 2, 30, "two messages rejected", watcher)
    wait_for(lambda: len(server.uids("Processed")) == 1, 30, "the good one taken", watcher)

    refused = IntakeRecord.objects.get(refused=True)
    assert refused.size == len(oversized) and len(bytes(refused.raw)) == 64 * 1024
    assert "over the limit" in refused.runs.get().failure_detail
    invalid = IntakeRecord.objects.get(refused=False, runs__outcome=Outcome.INVALID_EVENT)
    assert b"this is no message at all" in bytes(invalid.raw)
    good = Run.objects.exclude(outcome=Outcome.INVALID_EVENT).get()
    assert "request 2" in good.intake.text
    assert watcher.alive()
    box = Mailbox.objects.get()
    assert (box.taken_today, box.refused_today) == (1, 2)
    # Set aside, each is marked refused too (for whoever looks in the folder).
    client = server.client(folder="Rejected")
    try:
        flags = client.get_flags(client.search("ALL"))
    finally:
        client.logout()
    assert all(REFUSED in f for f in flags.values()) and len(flags) == 2


def test_the_850_kb_message_is_refused_within_512_mb_and_the_watcher_goes_on(
    server: Dovecot, start: Callable[..., Watcher]
) -> None:
    # On code that parsed its header whole, the watcher grew past 20 GB reading it, and a
    # watcher killed mid-read read the same message again on restart.
    watcher = start(memory=MEMORY_LIMIT)
    wait_for(status("idle"), 30, "the watcher to wait in IDLE", watcher)

    server.append(bomb(), mail(2))
    wait_for(lambda: len(server.uids("Rejected")) == 1, 30, "the message rejected", watcher)
    wait_for(lambda: len(server.uids("Processed")) == 1, 30, "the good one taken", watcher)

    refused = IntakeRecord.objects.get(refused=True)
    assert (refused.size, len(bytes(refused.raw))) == (len(bomb()), 64 * 1024)
    checkpoint = refused.runs.get().checkpoints.get()
    assert checkpoint.data["refused"] == MailRefusal.HEADER_TOO_LONG
    assert "request 2" in Run.objects.exclude(outcome=Outcome.INVALID_EVENT).get().intake.text
    assert watcher.alive()
    assert watcher.terminate() == 0
    assert "1 taken, 1 refused" in watcher.output()


def test_the_server_restarting_mid_idle_is_survived_and_mail_meanwhile_is_taken(
    server: Dovecot, start: Callable[..., Watcher]
) -> None:
    watcher = start()
    wait_for(status("idle"), 30, "the watcher to wait in IDLE", watcher)
    server.append(mail(1))
    wait_for(lambda: runs_from_mailbox() == 1, 10, "the first run", watcher)
    wait_for(status("idle"), 30, "the watcher back in IDLE", watcher)

    server.stop()
    server.deliver_to_disk(mail(2), "1700000000.M1P1.test")  # arrives while it is down
    wait_for(status("reconnecting"), 30, "the watcher to see the server gone", watcher)
    server.start()

    wait_for(lambda: runs_from_mailbox() == 2, 30, "the mail that came meanwhile", watcher)
    assert watcher.alive()
    assert "connecting again" in watcher.output()
    assert Mailbox.objects.get().last_error != ""


def test_a_renumbered_folder_is_noticed_and_nothing_is_taken_twice(
    server: Dovecot, start: Callable[..., Watcher]
) -> None:
    first = start(after_taking="flag")  # the messages stay in the INBOX, flagged
    wait_for(status("idle"), 30, "the watcher to wait in IDLE", first)
    server.append(*(mail(n) for n in range(3)))
    wait_for(lambda: runs_from_mailbox() == 3, 30, "three runs", first)
    assert first.terminate() == 0
    before = Mailbox.objects.get().uidvalidity

    # A restore: new UIDVALIDITY, new UIDs, and the flags lost with the old indexes.
    server.renumber()
    client = server.client()
    try:
        client.remove_flags(client.search("ALL"), [TAKEN])
    finally:
        client.logout()
    server.append(mail(3))

    second = start(after_taking="flag")
    wait_for(lambda: runs_from_mailbox() == 4, 30, "the new message's run", second)
    wait_for(status("idle"), 30, "the watcher to wait in IDLE", second)

    box = Mailbox.objects.get()
    assert box.uidvalidity != before and box.renumbered_at is not None
    assert "renumbered INBOX" in second.output()
    assert IntakeRecord.objects.count() == 4  # the three known ones not stored again
    client = server.client()
    try:
        assert len(client.search(["KEYWORD", TAKEN.decode()])) == 4
    finally:
        client.logout()


def test_one_watcher_per_mailbox(server: Dovecot, start: Callable[..., Watcher]) -> None:
    first = start()
    wait_for(status("idle"), 30, "the watcher to wait in IDLE", first)
    second = start()
    assert second.process is not None
    assert second.process.wait(timeout=60) != 0
    assert "another watcher has the mailbox" in second.output()
    assert first.alive()


# --- in this process: one pass (`--once`), the reply in the thread, TLS and OAuth2 ---------------


def mailbox(server: Dovecot, channel: IntakeChannel, **fields: Any) -> Mailbox:
    values = {
        "host": "127.0.0.1",
        "port": server.port,
        "security": Mailbox.Security.NONE,
        "username": server.user,
        "secret_variable": SECRET,
        **fields,
    }
    return Mailbox.objects.create(channel=channel, **values)


@pytest.fixture
def password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SECRET, Dovecot.password)


def test_a_reply_goes_back_in_the_thread_and_a_copy_to_sent(
    server: Dovecot, policy: None, password: None, settings: Any
) -> None:
    roles_ensure()
    activate_effects({"create_follow_up": email_reply_effect(REPLY)})
    pipeline = Pipeline(channel_get_or_create(name=CHANNEL))
    box = mailbox(server, pipeline.channel, sent_folder="Sent")
    original = mail(7, subject="Quote request for 40 seats")
    server.append(original)

    with smtp_server() as outbox:
        send_through(settings, outbox)
        settings.DEFAULT_FROM_EMAIL = "Service <support@shop.example>"
        with pipeline.capture():
            done = MailboxWatcher(box).run_once()
        pipeline.drain()

    assert (done.found, done.taken) == (1, 1)
    run = Run.objects.get()
    assert run.state == State.COMPLETED and run.effect_name == "create_follow_up"
    (received,) = outbox.received
    sent_id = parse_message(original).message_id
    assert received.recipients == ["customer7@northwind.example"]
    assert received.message["In-Reply-To"] == f"<{sent_id}>"
    assert received.message["References"].split()[-1] == f"<{sent_id}>"
    assert received.message["Subject"] == "Re: Quote request for 40 seats"
    # The copy in Sent is the message that was sent, marked read.
    client = server.client(folder="Sent")
    try:
        copies = client.fetch(client.search("ALL"), ["BODY.PEEK[]", "FLAGS"])
    finally:
        client.logout()
    (copy,) = copies.values()
    kept = email.message_from_bytes(copy[b"BODY[]"], policy=email.policy.default)
    assert kept["Message-ID"] == received.message["Message-ID"]
    assert kept["In-Reply-To"] == f"<{sent_id}>"
    assert b"\\Seen" in copy[b"FLAGS"]
    assert Effect.objects.get().attempt_rows.get().detail.endswith("; copied to Sent")


def test_starttls_with_the_company_certificate_authority(policy: None, password: None) -> None:
    with dovecot(tls=True) as server:
        assert server.tls_ca is not None
        box = mailbox(
            server,
            channel_get_or_create(name=CHANNEL),
            security=Mailbox.Security.STARTTLS,
            tls_ca_file=str(server.tls_ca),
        )
        server.append(mail(1))
        with inline():
            done = MailboxWatcher(box).run_once()
        assert done.taken == 1 and runs_from_mailbox() == 1
        assert "TLS" in server.log()  # the session was encrypted: "TLS" in its login line

        box.tls_ca_file = ""  # the system's authorities do not know this certificate
        with pytest.raises(ssl.SSLCertVerificationError):
            MailboxWatcher(box).run_once()


class TokenEndpoint(BaseHTTPRequestHandler):
    """An OAuth2 provider on loopback: its token endpoint (client credentials or a refresh
    token) and the introspection Dovecot asks whether a token is good."""

    issued: ClassVar[dict[str, str]] = {}
    requests: ClassVar[list[dict[str, str]]] = []

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
        if self.path == "/token":
            self.requests.append(form)
            good = form.get("client_secret") == "client-secret" and (
                form.get("grant_type") == "client_credentials"
                or form.get("refresh_token") == "refresh-me"
            )
            if not good:
                return self._answer(400, {"error": "invalid_client"})
            token = f"token-{len(self.issued)}"
            self.issued[token] = USER
            return self._answer(200, {"access_token": token, "expires_in": 3600})
        user = self.issued.get(form.get("token", ""))
        self._answer(200, {"active": user is not None, "username": user or ""})

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def provider() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), TokenEndpoint)
    TokenEndpoint.issued.clear()
    TokenEndpoint.requests.clear()
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.parametrize("grant", ["client_credentials", "refresh_token"])
def test_xoauth2_with_a_token_from_the_provider(
    provider: str, policy: None, monkeypatch: pytest.MonkeyPatch, grant: str
) -> None:
    monkeypatch.setenv("SUPPORT_OAUTH_SECRET", "client-secret")
    monkeypatch.setenv("SUPPORT_REFRESH_TOKEN", "refresh-me")
    with dovecot(oauth_url=f"{provider}/introspect") as server:
        box = mailbox(
            server,
            channel_get_or_create(name=CHANNEL),
            auth=Mailbox.Auth.XOAUTH2,
            secret_variable="SUPPORT_OAUTH_SECRET",
            oauth_token_url=f"{provider}/token",
            oauth_client_id="gatehouse",
            oauth_scope="https://outlook.office365.com/.default",
            refresh_token_variable="SUPPORT_REFRESH_TOKEN" if grant == "refresh_token" else "",
        )
        server.append(mail(1))
        with inline():
            done = MailboxWatcher(box).run_once()
        assert done.taken == 1
        assert "method=XOAUTH2" in server.log()
    (asked,) = TokenEndpoint.requests
    assert asked["grant_type"] == grant
    assert (asked["client_id"], asked["scope"]) == (
        "gatehouse",
        "https://outlook.office365.com/.default",
    )


def test_a_password_that_is_not_set_is_named(server: Dovecot, policy: None) -> None:
    box = mailbox(server, channel_get_or_create(name=CHANNEL), secret_variable="NOT_SET_ANYWHERE")
    with pytest.raises(LoginError, match="NOT_SET_ANYWHERE"):
        MailboxWatcher(box).run_once()
