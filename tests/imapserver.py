"""A real IMAP server on 127.0.0.1 for the mailbox tests: Debian's Dovecot, run in the
foreground from a configuration written into a throwaway folder (never /etc/dovecot), with
one user, a Maildir, and optionally STARTTLS (a self-signed certificate made for the test)
and XOAUTH2 (tokens checked against a local HTTP endpoint the test runs).

`.ci/run` installs `dovecot-imapd` when it is missing, as it does Chromium.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from imapclient import IMAPClient

DOVECOT = shutil.which("dovecot") or "/usr/sbin/dovecot"
USER, PASSWORD = "support@shop.example", "not-a-real-secret"


def dovecot_available() -> bool:
    return Path(DOVECOT).is_file() and os.access(DOVECOT, os.X_OK)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _mail_owner() -> pwd.struct_passwd:
    """Who owns the mail: this user, or, for root (Dovecot refuses root's mail), nobody."""
    if os.getuid() != 0:
        return pwd.getpwuid(os.getuid())
    return pwd.getpwnam("nobody")


@dataclass
class Dovecot:
    root: Path
    port: int
    user: str = USER
    password: str = PASSWORD
    tls_ca: Path | None = None
    oauth_url: str = ""
    process: subprocess.Popen[bytes] | None = None
    owner: pwd.struct_passwd = field(default_factory=_mail_owner)

    @property
    def maildir(self) -> Path:
        return self.root / "home" / self.user / "Maildir"

    @property
    def config(self) -> Path:
        return self.root / "dovecot.conf"

    def write_config(self) -> None:
        run_as = pwd.getpwuid(os.getuid()).pw_name
        root_run = os.getuid() == 0
        (self.root / "passwd").write_text(f"{self.user}:{{PLAIN}}{self.password}\n")
        for folder in (self.root / "run", self.root / "home" / self.user):
            folder.mkdir(parents=True, exist_ok=True)
        if root_run:
            shutil.chown(self.root / "home" / self.user, self.owner.pw_uid, self.owner.pw_gid)
            shutil.chown(self.root / "home", self.owner.pw_uid, self.owner.pw_gid)
        ssl = "no"
        if self.tls_ca is not None:
            ssl = f"yes\nssl_cert = <{self.root / 'cert.pem'}\nssl_key = <{self.root / 'key.pem'}"
        oauth = ""
        mechanisms = "plain login"
        if self.oauth_url:
            mechanisms += " xoauth2 oauthbearer"
            (self.root / "oauth2.conf").write_text(
                "introspection_mode = post\n"
                f"introspection_url = {self.oauth_url}\n"
                "username_attribute = username\n"
                "active_attribute = active\nactive_value = true\n"
                "force_introspection = yes\n"
            )
            oauth = (
                "passdb {\n  driver = oauth2\n  mechanisms = xoauth2 oauthbearer\n"
                f"  args = {self.root / 'oauth2.conf'}\n}}\n"
            )
        chroot = "" if root_run else "  chroot =\n"
        self.config.write_text(
            f"""
base_dir = {self.root / "run"}
state_dir = {self.root / "state"}
log_path = {self.root / "dovecot.log"}
info_log_path = {self.root / "dovecot.log"}
protocols = imap
listen = 127.0.0.1
ssl = {ssl}
disable_plaintext_auth = no
auth_mechanisms = {mechanisms}
default_internal_user = {"dovecot" if root_run else run_as}
default_internal_group = {"dovecot" if root_run else run_as}
default_login_user = {"dovenull" if root_run else run_as}
first_valid_uid = 1
mail_location = maildir:~/Maildir
mail_uid = {self.owner.pw_uid}
mail_gid = {self.owner.pw_gid}
{oauth}passdb {{
  driver = passwd-file
  args = scheme=PLAIN username_format=%u {self.root / "passwd"}
}}
userdb {{
  driver = static
  args = home={self.root / "home"}/%u
}}
namespace inbox {{
  inbox = yes
  separator = /
}}
service imap-login {{
  inet_listener imap {{
    address = 127.0.0.1
    port = {self.port}
  }}
  inet_listener imaps {{
    port = 0
  }}
{chroot}}}
service anvil {{
{chroot}}}
service stats {{
  unix_listener stats-reader {{
    mode = 0666
  }}
  unix_listener stats-writer {{
    mode = 0666
  }}
}}
"""
        )

    def start(self) -> None:
        self.process = subprocess.Popen(  # noqa: S603 - Debian's dovecot, our configuration
            [DOVECOT, "-F", "-c", str(self.config)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"dovecot exited {self.process.returncode}: {self.log()}")
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=1) as probe,
            ):
                if probe.recv(100).startswith(b"* OK"):
                    return
            time.sleep(0.1)
        raise RuntimeError(f"dovecot did not answer on port {self.port}: {self.log()}")

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=5)
        self.process = None

    def log(self) -> str:
        path = self.root / "dovecot.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def client(self, *, folder: str = "INBOX") -> IMAPClient:
        """A client logged in as the test's user (the test's own hands on the mailbox)."""
        client = IMAPClient("127.0.0.1", port=self.port, ssl=False, timeout=15)
        client.login(self.user, self.password)
        if folder:
            client.select_folder(folder)
        return client

    def append(self, *messages: bytes, folder: str = "INBOX") -> None:
        client = self.client(folder="")
        try:
            for message in messages:
                client.append(folder, message)
        finally:
            client.logout()

    def uids(self, folder: str = "INBOX") -> list[int]:
        client = self.client(folder="")
        try:
            if not client.folder_exists(folder):
                return []
            client.select_folder(folder, readonly=True)
            return sorted(client.search("ALL"))
        finally:
            client.logout()

    def deliver_to_disk(self, message: bytes, name: str) -> None:
        """Put a message in the Maildir's `new/` directly, as a local delivery agent would
        while the IMAP server is down."""
        new = self.maildir / "new"
        new.mkdir(parents=True, exist_ok=True)
        path = new / name
        path.write_bytes(message)
        if os.getuid() == 0:
            shutil.chown(path, self.owner.pw_uid, self.owner.pw_gid)

    def renumber(self) -> None:
        """Make the server give the INBOX a new UIDVALIDITY and new UIDs, as a restored or
        migrated mailbox does: its UID list and indexes are removed while it is stopped."""
        was_running = self.process is not None
        self.stop()
        for path in self.maildir.glob("dovecot*"):
            if path.is_file():
                path.unlink()
        time.sleep(1.1)  # a new UIDVALIDITY is the time in seconds
        if was_running:
            self.start()


def _self_signed(root: Path) -> Path:
    subprocess.run(  # noqa: S603 - a throwaway certificate for loopback
        [  # noqa: S607
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
            "-keyout", str(root / "key.pem"), "-out", str(root / "cert.pem"),
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return root / "cert.pem"


@contextlib.contextmanager
def dovecot(*, tls: bool = False, oauth_url: str = "") -> Iterator[Dovecot]:
    """A Dovecot on a free loopback port for the duration of the block, in a folder of its
    own (Dovecot's users must be able to enter it: pytest's are private to the test's user),
    removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix="gatehouse-imap-"))
    root.chmod(0o755)
    server = Dovecot(root=root, port=free_port(), oauth_url=oauth_url)
    try:
        if tls:
            server.tls_ca = _self_signed(root)
        server.write_config()
        server.start()
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


class CuttingProxy:
    """A TCP relay between a client and the IMAP server that, once armed, calls `cut` the
    moment the client sends a command matching `trigger` (before the server sees it) and
    closes that connection: what a crash between two commands looks like from the server."""

    def __init__(self, server_port: int, trigger: bytes, cut: Callable[[], None]) -> None:
        self.server_port, self.trigger, self.cut = server_port, trigger, cut
        self.armed = True
        self.fired = threading.Event()
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.port = int(self.listener.getsockname()[1])
        self.closing = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closing:
            try:
                downstream, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.server_port), timeout=10)
            for source, target, watch in (
                (downstream, upstream, True),
                (upstream, downstream, False),
            ):
                threading.Thread(
                    target=self._pipe, args=(source, target, watch), daemon=True
                ).start()

    def _pipe(self, source: socket.socket, target: socket.socket, watch: bool) -> None:
        source.settimeout(None)
        try:
            while chunk := source.recv(65536):
                if watch and self.armed and self.trigger in chunk:
                    self.armed = False
                    self.cut()
                    self.fired.set()
                    break
                target.sendall(chunk)
        except OSError:
            pass
        finally:
            for end in (source, target):
                with contextlib.suppress(OSError):
                    end.close()

    def close(self) -> None:
        self.closing = True
        self.listener.close()
