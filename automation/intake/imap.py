"""A mailbox on an IMAP server: its mail taken in as it arrives, nothing lost or taken twice.

`manage.py mailbox_watch <channel>` runs a `MailboxWatcher` for the channel's mailbox:

- It connects (TLS, STARTTLS, or plain to a server on this machine), logs in with a password or
  OAuth2 (XOAUTH2), selects the folder and takes every message not yet taken; then it waits
  with IDLE (or, where the server has none, polls) and takes what arrives. It looks again at
  least every `poll_seconds`, IDLE or not, and connects again with backoff when the server
  drops it.
- At least once from the server, exactly once into Gatehouse: a message's bytes are stored as
  an intake record (and its run made) in one transaction; only after that commit is the server
  told, by moving the message to the Processed folder or flagging it where it is. A crash
  between the two leaves the message untold; the next pass finds it, knows its bytes (the
  channel stored them before) and only tells the server. A redelivered copy with other bytes
  is answered by the Message-ID identity as a replay.
- UIDVALIDITY and the highest UID seen are kept. A folder the server renumbered (a restored
  or migrated mailbox) is logged and noted on the mailbox; nothing is taken twice, because
  what was taken is known by its bytes, not by its UID.
- Bad mail never stops the mailbox: a message over the size limit is kept as a refused record
  (its head, size and hash; read in chunks, never whole), unreadable or invalid mail as an
  invalid run, and either goes to the Rejected folder. A server error on one message leaves it
  for the next pass.
- Its progress (last contact, messages taken and refused today, errors) is on the mailbox's
  row, shown on the queues page and in /metrics.

`sent_copy` keeps a copy of a reply in the mailbox's Sent folder (automation/effects/smtp.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx
from django.db import models, transaction
from django.utils import timezone
from imapclient import IMAPClient
from imapclient.exceptions import IMAPClientAbortError, IMAPClientError, LoginError
from pydantic import BaseModel, ConfigDict, Field

from automation.conf import setting
from automation.intake.models import IntakeChannel, IntakeRecord, Mailbox
from automation.intake.services import (
    MAIL_TYPE,
    READ_CHUNK_BYTES,
    IntakeResult,
    Oversized,
    channel_get_or_create,
    intake_refuse_oversized,
    intake_submit,
    message_limit,
    read_within,
)
from core.backoff import backoff_delay
from core.codes import Outcome
from core.egress import send_request

logger = logging.getLogger("gatehouse.mailbox")

# The keywords a flagged message carries: taken, and (besides) refused.
TAKEN = b"$GatehouseTaken"
REFUSED = b"$GatehouseRefused"
# Seconds a socket waits on the server before the connection counts as lost.
SOCKET_TIMEOUT = 60.0
# The longest IDLE before it is renewed (RFC 2177: servers may drop one after 30 minutes).
IDLE_RENEW_SECONDS = 25 * 60
# Seconds before the first reconnection; each failure in a row doubles it (core.backoff).
RECONNECT_BASE = 1.0
# Seconds between two writes of the watcher's progress while nothing happens.
HEARTBEAT_SECONDS = 5.0
# Messages whose sizes are asked for at once.
SIZE_BATCH = 200


class MailboxNotConfigured(LookupError):
    pass


class ConnectionLost(Exception):
    """The server went away (closed, said BYE, stopped answering): connect again."""


# --- configuration ----------------------------------------------------------------------------


class MailboxSettings(BaseModel):
    """One mailbox of GATEHOUSE_MAILBOXES (config/settings.py): the Mailbox model's fields."""

    model_config = ConfigDict(extra="forbid")

    host: str = Field(min_length=1)
    port: int | None = Field(default=None, ge=1, le=65535)
    security: Mailbox.Security = Mailbox.Security.TLS
    tls_ca_file: str = ""
    username: str = Field(min_length=1)
    auth: Mailbox.Auth = Mailbox.Auth.PASSWORD
    secret_variable: str = Field(min_length=1, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    oauth_token_url: str = ""
    oauth_client_id: str = ""
    oauth_scope: str = ""
    refresh_token_variable: str = ""
    folder: str = "INBOX"
    after_taking: Mailbox.AfterTaking = Mailbox.AfterTaking.MOVE
    processed_folder: str = "Processed"
    rejected_folder: str = "Rejected"
    sent_folder: str = ""
    use_idle: bool = True
    poll_seconds: int = Field(default=60, ge=1, le=3600)

    def fields(self) -> dict[str, Any]:
        values = self.model_dump()
        if values["port"] is None:
            values["port"] = 993 if self.security == Mailbox.Security.TLS else 143
        return values


def mailbox_for(channel_name: str) -> Mailbox:
    """The channel's mailbox: from GATEHOUSE_MAILBOXES (written over its row, so the settings
    hold) or else as set up in the console or the admin. Raises MailboxNotConfigured, or
    ValueError for settings that do not hold."""
    configured = setting("MAILBOXES").get(channel_name)
    if configured is not None:
        values = MailboxSettings.model_validate(configured).fields()
        channel = channel_get_or_create(name=channel_name)
        mailbox, _ = Mailbox.objects.update_or_create(
            channel=channel, defaults={**values, "from_settings": True}
        )
        return mailbox
    found = Mailbox.objects.select_related("channel").filter(channel__name=channel_name).first()
    if found is None:
        raise MailboxNotConfigured(
            f"no mailbox is set up for the channel {channel_name!r}: add one in the console "
            "(Setup, Intake channels), in the admin (Mailboxes) or in GATEHOUSE_MAILBOXES"
        )
    return found


def _secret(variable: str, what: str) -> str:
    value = os.environ.get(variable, "")
    if not value:
        raise LoginError(f"the environment variable {variable} ({what}) is not set")
    return value


# --- connecting -------------------------------------------------------------------------------


@dataclass
class _Token:
    value: str
    until: float


_tokens: dict[int, _Token] = {}
_tokens_lock = threading.Lock()


def oauth_access_token(mailbox: Mailbox) -> str:
    """An OAuth2 access token for the mailbox, from its token endpoint (kept until a minute
    before it runs out); with no endpoint, the token in `secret_variable` itself."""
    if not mailbox.oauth_token_url:
        return _secret(mailbox.secret_variable, "the OAuth2 access token")
    with _tokens_lock:
        cached = _tokens.get(mailbox.pk)
        if cached is not None and cached.until > time.monotonic():
            return cached.value
    form = {"client_id": mailbox.oauth_client_id}
    if mailbox.secret_variable:
        form["client_secret"] = _secret(mailbox.secret_variable, "the OAuth2 client secret")
    if mailbox.refresh_token_variable:
        form["grant_type"] = "refresh_token"
        form["refresh_token"] = _secret(mailbox.refresh_token_variable, "the refresh token")
    else:
        form["grant_type"] = "client_credentials"
    if mailbox.oauth_scope:
        form["scope"] = mailbox.oauth_scope
    try:
        response = send_request("POST", mailbox.oauth_token_url, data=form, timeout=30)
    except httpx.HTTPError as exc:
        raise ConnectionLost(f"the token endpoint did not answer: {exc}") from exc
    if response.status_code != 200:
        # The endpoint's error code and description say what is wrong (never the secret).
        raise LoginError(
            f"the token endpoint refused: HTTP {response.status_code} {response.text[:300]}"
        )
    body = response.json()
    token = str(body.get("access_token") or "")
    if not token:
        raise LoginError("the token endpoint's answer has no access_token")
    lifetime = float(body.get("expires_in") or 3600)
    with _tokens_lock:
        _tokens[mailbox.pk] = _Token(token, time.monotonic() + max(lifetime - 60, 0))
    return token


def _forget_token(mailbox: Mailbox) -> None:
    with _tokens_lock:
        _tokens.pop(mailbox.pk, None)


def _tls_context(mailbox: Mailbox) -> ssl.SSLContext:
    context = ssl.create_default_context()
    if mailbox.tls_ca_file:
        context.load_verify_locations(cafile=mailbox.tls_ca_file)
    return context


def connect(mailbox: Mailbox) -> IMAPClient:
    """A client logged in to the mailbox's server (the folder not yet selected)."""
    secure = mailbox.security
    try:
        client = IMAPClient(
            mailbox.host,
            port=mailbox.port,
            ssl=secure == Mailbox.Security.TLS,
            ssl_context=_tls_context(mailbox) if secure == Mailbox.Security.TLS else None,
            timeout=SOCKET_TIMEOUT,
        )
    except (OSError, IMAPClientError) as exc:
        raise ConnectionLost(f"could not connect to {mailbox.host}:{mailbox.port}: {exc}") from exc
    try:
        if secure == Mailbox.Security.STARTTLS:
            client.starttls(_tls_context(mailbox))
        if mailbox.auth == Mailbox.Auth.XOAUTH2:
            try:
                client.oauth2_login(mailbox.username, oauth_access_token(mailbox))
            except LoginError:
                _forget_token(mailbox)  # a token revoked early: the next try asks anew
                raise
        else:
            client.login(mailbox.username, _secret(mailbox.secret_variable, "the password"))
    except BaseException:
        with contextlib.suppress(Exception):
            client.shutdown()
        raise
    return client


# --- reading a message ------------------------------------------------------------------------


class _MessageStream:
    """A message on the server read in chunks (partial fetches), for `read_within`: one over
    the size limit is hashed as it goes by and never held whole."""

    def __init__(self, client: IMAPClient, uid: int) -> None:
        self.client, self.uid, self.offset, self.done = client, uid, 0, False

    def read(self, size: int = -1, /) -> bytes:
        if self.done:
            return b""
        length = READ_CHUNK_BYTES if size is None or size < 0 else size
        answer = self.client.fetch([self.uid], [f"BODY.PEEK[]<{self.offset}.{length}>"])
        data = answer.get(self.uid)
        if data is None:
            raise _Gone()
        chunk = next((bytes(v) for k, v in data.items() if k.startswith(b"BODY[")), b"")
        self.offset += len(chunk)
        self.done = len(chunk) < length
        return chunk


class _Gone(Exception):
    """The message was removed from the folder while it was being read (by a person, or
    another client): there is nothing to take."""


# --- the watcher ------------------------------------------------------------------------------


@dataclass
class Pass:
    """What one look at the folder did."""

    found: int = 0
    taken: int = 0  # stored: new runs, replays, conflicts
    refused: int = 0  # stored as refused or invalid, and set aside
    known: int = 0  # taken before (its bytes stored): the server was only told
    errors: int = 0

    def add(self, other: Pass) -> None:
        for name in ("found", "taken", "refused", "known", "errors"):
            setattr(self, name, getattr(self, name) + getattr(other, name))


@dataclass
class MailboxWatcher:
    mailbox: Mailbox
    stop: threading.Event = field(default_factory=threading.Event)
    sleep: Callable[[float], bool] | None = None  # waits, or returns True when asked to stop
    totals: Pass = field(default_factory=Pass)
    _contact: float = 0.0
    _unflushed: Pass = field(default_factory=Pass)
    _folders: set[str] = field(default_factory=set)

    # -- the loop --------------------------------------------------------------------------

    def run(self) -> None:
        """Watch until asked to stop: connect, take, wait; connect again after a loss."""
        self._note(status="starting", started_at=timezone.now(), watcher=_watcher_name())
        failures = 0
        while not self.stop.is_set():
            try:
                client = connect(self.mailbox)
            except (ConnectionLost, IMAPClientError, OSError) as exc:
                failures += 1
                self._lost(exc, failures)
                continue
            try:
                failures = 0
                self._watch(client)
            # Lost, or the folder or a command refused (IMAPClientError): try again later.
            # A database error is not caught: the command stops and its supervisor restarts
            # it, with the mailbox's lock taken anew.
            except (ConnectionLost, IMAPClientError, OSError) as exc:
                failures += 1
                self._lost(exc, failures)
            finally:
                with contextlib.suppress(Exception):
                    client.logout()
                with contextlib.suppress(Exception):
                    client.shutdown()
        self._flush()
        self._note(status="stopped")
        logger.info("mailbox %s: stopped; %s", self.name, self._summary(self.totals))

    def run_once(self) -> Pass:
        """One pass over the folder (`mailbox_watch --once`): connect, take, leave."""
        client = connect(self.mailbox)
        try:
            return self.take_new(client)
        finally:
            with contextlib.suppress(Exception):
                client.logout()
            self._flush()

    @property
    def name(self) -> str:
        return self.mailbox.channel.name

    def _watch(self, client: IMAPClient) -> None:
        idle = self.mailbox.use_idle and client.has_capability("IDLE")
        self._status("connected")
        logger.info(
            "mailbox %s: connected to %s:%s (%s)",
            self.name,
            self.mailbox.host,
            self.mailbox.port,
            "IDLE" if idle else f"polling every {self.mailbox.poll_seconds} s",
        )
        while not self.stop.is_set():
            self.take_new(client)
            if self.stop.is_set():
                return
            if idle:
                self._idle(client)
            else:
                self._poll(client)

    def _lost(self, exc: BaseException, failures: int) -> None:
        wait = reconnect_delay(failures)
        text = f"{type(exc).__name__}: {exc}"
        logger.warning(
            "mailbox %s: %s; connecting again in %.0f s (failure %d)",
            self.name,
            text,
            wait,
            failures,
        )
        self._error(text, status="reconnecting")
        self._wait(wait)

    def _wait(self, seconds: float) -> bool:
        """Sleep, unless asked to stop first; True when asked to stop."""
        if self.sleep is not None:
            return self.sleep(seconds)
        return self.stop.wait(seconds)

    def _idle(self, client: IMAPClient) -> None:
        """Wait in IDLE until the folder changes, the poll interval passes or a stop is asked.
        The connection lost meanwhile is raised (ConnectionLost or the client's error)."""
        limit = min(float(self.mailbox.poll_seconds), IDLE_RENEW_SECONDS)
        client.idle()
        self._status("idle")  # waiting in IDLE: from now on, new mail is announced
        deadline = time.monotonic() + limit
        try:
            while not self.stop.is_set() and time.monotonic() < deadline:
                started = time.monotonic()
                responses = client.idle_check(timeout=1)
                if any(_says_bye(r) for r in responses):
                    raise ConnectionLost("the server ended the session")
                if any(_new_mail(r) for r in responses):
                    return
                if not responses and time.monotonic() - started < 0.5:
                    # Readable at once, yet nothing to read: the server closed the connection.
                    raise ConnectionLost("the server closed the connection")
                self._heartbeat()
        finally:
            with contextlib.suppress(ConnectionLost):
                self._idle_done(client)

    def _idle_done(self, client: IMAPClient) -> None:
        try:
            client.idle_done()
        except (IMAPClientAbortError, OSError) as exc:
            raise ConnectionLost(f"the server closed the connection ({exc})") from exc

    def _poll(self, client: IMAPClient) -> None:
        self._status("polling")
        deadline = time.monotonic() + self.mailbox.poll_seconds
        while not self.stop.is_set() and time.monotonic() < deadline:
            if self._wait(min(1.0, max(deadline - time.monotonic(), 0))):
                return
            if time.monotonic() - self._contact >= HEARTBEAT_SECONDS:
                client.noop()  # a dropped connection shows here, not an hour later
                self._heartbeat()

    # -- one pass ---------------------------------------------------------------------------

    def take_new(self, client: IMAPClient) -> Pass:
        """Take every message of the folder not taken yet, oldest first."""
        selected = client.select_folder(self.mailbox.folder)
        self._check_uidvalidity(int(selected[b"UIDVALIDITY"]))
        if self.mailbox.after_taking == Mailbox.AfterTaking.FLAG:
            uids = client.search(["UNKEYWORD", TAKEN.decode(), "UNDELETED"])
        else:
            uids = client.search(["UNDELETED"])
        done = Pass(found=len(uids))
        for start in range(0, len(uids), SIZE_BATCH):
            if self.stop.is_set():
                break
            batch = sorted(uids)[start : start + SIZE_BATCH]
            for uid in batch:
                if self.stop.is_set():  # between messages, never inside one
                    break
                done.add(self._take_one(client, uid))
                self._heartbeat()
        if uids:
            highest = max(uids)
            if highest > self.mailbox.last_uid:
                self._note(last_uid=highest)
            logger.info("mailbox %s: %s", self.name, self._summary(done))
        self.totals.add(done)
        self._unflushed.add(done)
        self._flush()
        return done

    def _take_one(self, client: IMAPClient, uid: int) -> Pass:
        source = self._source(uid)
        try:
            raw = read_within(_MessageStream(client, uid), message_limit(MAIL_TYPE))
        except _Gone:
            return Pass()
        except IMAPClientAbortError:
            raise
        except IMAPClientError as exc:  # this message could not be fetched: the next pass
            self._error(f"{source}: could not be read: {exc}")
            return Pass(errors=1)
        digest = raw.sha256 if isinstance(raw, Oversized) else hashlib.sha256(raw).hexdigest()
        refused = False
        if _taken_before(channel=self.mailbox.channel, digest=digest):
            outcome = Pass(known=1)
            refused = _refused_before(channel=self.mailbox.channel, digest=digest)
        else:
            try:
                result = _store(self.mailbox.channel, raw, source)
            except Exception as exc:  # nothing told: the message stays for the next pass
                logger.exception("mailbox %s: %s could not be stored", self.name, source)
                self._error(f"{source}: could not be stored: {type(exc).__name__}: {exc}")
                return Pass(errors=1)
            refused = result.code == Outcome.INVALID_EVENT
            outcome = Pass(refused=1) if refused else Pass(taken=1)
            if refused:
                why = "; ".join(f"{p.field} {p.message}" for p in result.problems)
                logger.info("mailbox %s: %s refused: %s", self.name, source, why)
        # The record is committed: now, and only now, the server is told.
        try:
            self._tell(client, uid, refused=refused)
        except IMAPClientAbortError:
            raise
        except IMAPClientError as exc:  # taken; it will be known by its bytes next time
            self._error(f"{source}: taken, but the server was not told: {exc}")
            outcome.errors += 1
        return outcome

    def _source(self, uid: int) -> str:
        """The intake record's `source`: the message's IMAP URL (RFC 5092), which finds it."""
        box = self.mailbox
        label = (
            f"imap://{box.username}@{box.host}/{box.folder};"
            f"UIDVALIDITY={box.uidvalidity}/;UID={uid}"
        )
        limit = IntakeRecord._meta.get_field("source").max_length or len(label)
        return label if len(label) <= limit else f"imap:…{label[-(limit - 6) :]}"

    def _tell(self, client: IMAPClient, uid: int, *, refused: bool) -> None:
        box = self.mailbox
        if refused:  # marked for whoever looks in the folder; a move keeps the mark
            client.add_flags([uid], [REFUSED])
        if refused and box.rejected_folder:
            self._move(client, uid, box.rejected_folder)
        elif box.after_taking == Mailbox.AfterTaking.MOVE:
            self._move(client, uid, box.processed_folder)
        else:
            client.add_flags([uid], [TAKEN])

    def _move(self, client: IMAPClient, uid: int, folder: str) -> None:
        if folder not in self._folders:
            if not client.folder_exists(folder):
                with contextlib.suppress(IMAPClientError):  # made meanwhile by another client
                    client.create_folder(folder)
            self._folders.add(folder)
        if client.has_capability("MOVE"):
            client.move([uid], folder)
            return
        client.copy([uid], folder)
        client.add_flags([uid], [TAKEN])  # taken, whether or not it can be expunged now
        client.delete_messages([uid])
        if client.has_capability("UIDPLUS"):
            client.uid_expunge([uid])
        # Without UIDPLUS only a folder-wide EXPUNGE would remove it, which would remove
        # other clients' deleted mail too: it stays, deleted, and is passed over.

    def _check_uidvalidity(self, uidvalidity: int) -> None:
        known = self.mailbox.uidvalidity
        if known == uidvalidity:
            return
        if known is None:
            self._note(uidvalidity=uidvalidity)
            return
        logger.warning(
            "mailbox %s: the server renumbered %s (UIDVALIDITY %s, was %s): its messages are "
            "known by their bytes, so none is taken twice",
            self.name,
            self.mailbox.folder,
            uidvalidity,
            known,
        )
        self._folders.clear()
        self._note(uidvalidity=uidvalidity, last_uid=0, renumbered_at=timezone.now())

    # -- progress ---------------------------------------------------------------------------

    def _heartbeat(self) -> None:
        if time.monotonic() - self._contact >= HEARTBEAT_SECONDS:
            self._flush()

    def _flush(self) -> None:
        """Write the counts since the last write and the time of contact to the row."""
        done, self._unflushed = self._unflushed, Pass()
        now = timezone.now()
        today = timezone.localdate(now)
        with transaction.atomic(durable=True):
            row = Mailbox.objects.select_for_update().get(pk=self.mailbox.pk)
            if row.day != today:
                row.day, row.taken_today, row.refused_today, row.errors_today = today, 0, 0, 0
            row.taken_today += done.taken
            row.refused_today += done.refused
            row.errors_today += done.errors
            row.last_contact_at = now
            row.save(
                update_fields=[
                    "day",
                    "taken_today",
                    "refused_today",
                    "errors_today",
                    "last_contact_at",
                ]
            )
        self._contact = time.monotonic()

    def _status(self, status: str) -> None:
        if self.mailbox.status != status:
            self._note(status=status)

    def _note(self, **values: Any) -> None:
        for name, value in values.items():
            setattr(self.mailbox, name, value)
        Mailbox.objects.filter(pk=self.mailbox.pk).update(**values)

    def _error(self, text: str, *, status: str | None = None) -> None:
        self._unflushed.errors += 1
        values: dict[str, Any] = {"last_error": text[:2000], "last_error_at": timezone.now()}
        if status is not None:
            values["status"] = status
        self._note(**values)
        self._flush()

    @staticmethod
    def _summary(done: Pass) -> str:
        return (
            f"{done.taken} taken, {done.refused} refused, {done.known} taken before, "
            f"{done.errors} errors"
        )


def _says_bye(response: Any) -> bool:
    return isinstance(response, tuple) and len(response) > 0 and response[0] == b"BYE"


def _new_mail(response: Any) -> bool:
    return isinstance(response, tuple) and len(response) > 1 and response[1] == b"EXISTS"


def reconnect_delay(failures: int) -> float:
    """Seconds before connecting again after `failures` failures in a row: core.backoff's
    rule from RECONNECT_BASE seconds, up to GATEHOUSE_MAILBOX_BACKOFF_MAX."""
    cap = float(setting("MAILBOX_BACKOFF_MAX_SECONDS"))
    return backoff_delay(failures - 1, base=RECONNECT_BASE, cap=cap)


def _watcher_name() -> str:
    return f"{socket.gethostname()} pid {os.getpid()}"


def _store(channel: IntakeChannel, raw: bytes | Oversized, source: str) -> IntakeResult:
    if isinstance(raw, Oversized):
        return intake_refuse_oversized(
            channel=channel, request=raw, content_type=MAIL_TYPE, source=source
        )
    return intake_submit(channel=channel, raw=raw, content_type=MAIL_TYPE, source=source)


def _taken_before(*, channel: IntakeChannel, digest: str) -> bool:
    """Whether these exact bytes were stored through this channel before (a record kept
    after a failed admission does not count: that message is taken again)."""
    return IntakeRecord.objects.filter(
        raw_sha256=digest, channel=channel, admission_error=""
    ).exists()  # intake_raw_sha256_idx


def _refused_before(*, channel: IntakeChannel, digest: str) -> bool:
    return IntakeRecord.objects.filter(
        models.Q(refused=True) | models.Q(runs__outcome=Outcome.INVALID_EVENT),
        raw_sha256=digest,
        channel=channel,
        admission_error="",
    ).exists()


# --- the watcher's exclusive hold on its mailbox ------------------------------------------------


@contextlib.contextmanager
def watching(mailbox: Mailbox) -> Iterator[bool]:
    """Hold the mailbox for this process while the block runs: True if held, False if
    another watcher has it. A session advisory lock in PostgreSQL: it goes with the process,
    so a watcher killed outright frees its mailbox at once."""
    from django.db import connection

    key = _lock_key(mailbox)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [key])
        held = bool(cursor.fetchone()[0])
    try:
        yield held
    finally:
        if held:
            with contextlib.suppress(Exception), connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [key])


def _lock_key(mailbox: Mailbox) -> int:
    digest = hashlib.sha256(f"gatehouse-mailbox:{mailbox.pk}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


# --- a copy of a reply in the Sent folder --------------------------------------------------------


def sent_copy(channel_id: int, message: bytes, when: datetime | None = None) -> str:
    """Append a sent reply to the Sent folder of the channel's mailbox, if it has one: what
    happened, in words ('' when there is no such folder). A failure is said, never raised:
    the reply was sent either way."""
    box = Mailbox.objects.filter(channel_id=channel_id).exclude(sent_folder="").first()
    if box is None:
        return ""
    try:
        client = connect(box)
        try:
            try:
                client.append(box.sent_folder, message, flags=[b"\\Seen"], msg_time=when)
            except IMAPClientError as exc:
                if "TRYCREATE" not in str(exc):  # the server's word that the folder is missing
                    raise
                client.create_folder(box.sent_folder)
                client.append(box.sent_folder, message, flags=[b"\\Seen"], msg_time=when)
        finally:
            with contextlib.suppress(Exception):
                client.logout()
    except (ConnectionLost, IMAPClientError, OSError) as exc:
        logger.warning("mailbox %s: a reply was not copied to %s: %s", box, box.sent_folder, exc)
        return f"not copied to {box.sent_folder}: {type(exc).__name__}: {exc}"
    return f"copied to {box.sent_folder}"
