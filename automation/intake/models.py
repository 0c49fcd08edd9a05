"""Where requests come in: customers, intake channels, the raw intake records and API tokens."""

from __future__ import annotations

import hashlib
from typing import Any

from django.db import models

from core.addresses import MAX_ADDRESS, mail_address_validator
from core.history import AppendOnly


class Customer(models.Model):
    """A known customer: what a reference number or a sender's domain is checked against."""

    reference = models.CharField(max_length=40, unique=True, help_text="e.g. CUST-10042")
    name = models.CharField(max_length=200)
    # A value of the catalogue's `tier` customer attribute (checked when customers are loaded).
    account_tier = models.CharField(max_length=60)
    email_domains = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["reference"]

    def __str__(self) -> str:
        return f"{self.reference} {self.name}"


class IntakeChannel(models.Model):
    """Where requests come from, and how runs from there are interpreted and versioned."""

    name = models.SlugField(max_length=100, unique=True)
    classifier = models.CharField(max_length=50, default="recorded")
    classifier_version = models.CharField(max_length=100, default="recorded-classifier-1")
    workflow_version = models.CharField(max_length=100)
    prompt_version = models.CharField(max_length=100)
    # Pinned policy version; empty means "the version active when the run is decided".
    policy_version = models.CharField(max_length=100, blank=True)
    max_classifier_attempts = models.PositiveSmallIntegerField(default=3)
    # E-mail is one request whichever way it arrives (the mailbox, the API): every channel
    # that takes real mail shares one identity scope for it (MAIL_SCOPE). A sandbox, such as a
    # classifier evaluation, keeps its mail to itself so it never meets, or waits for, real mail.
    shares_mail_identity = models.BooleanField(default=True)
    # Classifiers that read every run of the channel beside the live one, without acting
    # (shadow mode): their readings are stored for comparison, never decided on.
    shadow_classifiers = models.JSONField(default=list, blank=True)
    # Who an `email_reply` to a request of this channel is from, and where answers to it go:
    # unless the effect's own settings say (EmailReplyConfig), else the server's
    # DEFAULT_FROM_EMAIL and no Reply-To.
    reply_from = models.CharField(
        "replies from",
        max_length=MAX_ADDRESS,
        blank=True,
        validators=[mail_address_validator],
        help_text="e.g. Claims desk <claims@example.com>; empty: the server's address",
    )
    reply_to = models.CharField(
        "answers to replies go to",
        max_length=MAX_ADDRESS,
        blank=True,
        validators=[mail_address_validator],
        help_text="the Reply-To of a reply; empty: none",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name


# The identity scope of e-mail on every channel that shares mail identity. A JSON event's
# scope is its channel's name (what effect keys were always made of); a channel's name is a
# slug and "@" is no slug character, so the two kinds of scope never meet.
MAIL_SCOPE = "@mail"


class IntakeRecord(AppendOnly):
    """The raw request exactly as received, written before any validation. Never modified.

    A request over the size limit (`services.intake.message_limit`) is kept as a refused
    record: its size, the SHA-256 of all of it and only its first bytes (REFUSED_HEAD_BYTES),
    never the whole body.
    """

    channel = models.ForeignKey(IntakeChannel, on_delete=models.PROTECT)
    raw = models.BinaryField()
    content_type = models.CharField(max_length=200)
    source = models.CharField(max_length=200, help_text="who delivered it: API token, file")
    # Set only on a record kept after its admission failed: why it has no run.
    admission_error = models.TextField(blank=True, help_text="why no run was made, if none was")
    received_at = models.DateTimeField(auto_now_add=True)
    # The SHA-256 of `raw`, set on insert: how a folder read again knows which files it took
    # (services.mailbox), even a message that could not be read and so has no Message-ID.
    raw_sha256 = models.CharField(max_length=64, blank=True, editable=False)
    # Bytes of the request as it came: of all of it, also when only its head is kept.
    size = models.PositiveBigIntegerField(editable=False)
    # Over the size limit or a reading limit (automation.mail.MailLimits): `raw` is only its
    # first bytes, and no event was read from it; its run's checkpoint names the reason.
    refused = models.BooleanField(default=False, editable=False)

    class Meta:
        indexes = [
            # WHERE raw_sha256 = ... AND source = ... AND channel_id = ...: was this file
            # taken in before (services.mailbox); a digest names a few rows at most.
            models.Index(fields=["raw_sha256"], name="intake_raw_sha256_idx"),
        ]

    def __str__(self) -> str:
        return f"intake #{self.pk} via {self.channel_id}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self._state.adding:
            self.set_digest()
        super().save(*args, **kwargs)  # AppendOnly refuses writing over a stored record

    def set_digest(self) -> None:
        """Stamp `raw_sha256` and `size`: save() does; so does a writer that inserts the row
        itself. A refused record comes with both, taken from the whole request."""
        if not self.refused:
            self.raw_sha256 = self.digest(self.raw)
            self.size = len(self.raw)

    @staticmethod
    def digest(raw: bytes | memoryview) -> str:
        return hashlib.sha256(bytes(raw)).hexdigest()

    @property
    def text(self) -> str:
        return bytes(self.raw).decode("utf-8", errors="replace")


class ApiToken(models.Model):
    """A bearer token for an integrator; only its SHA-256 is stored."""

    name = models.CharField(max_length=100, unique=True)
    key_hash = models.CharField(max_length=64, unique=True)
    channel = models.ForeignKey(IntakeChannel, on_delete=models.PROTECT)
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name


class Mailbox(models.Model):
    """An IMAP folder a channel takes its mail from (`manage.py mailbox_watch <channel>`,
    automation/intake/imap.py), with what the watcher last saw of it.

    One mailbox per channel. Its secrets are never stored: `secret_variable` names the
    environment variable that holds the password (or, with OAuth2, the client secret), as a
    policy document names a secret.
    """

    class Security(models.TextChoices):
        TLS = "tls", "TLS (port 993)"
        STARTTLS = "starttls", "STARTTLS (port 143)"
        NONE = "none", "none (a server on this machine only)"

    class Auth(models.TextChoices):
        PASSWORD = "password", "password"
        XOAUTH2 = "xoauth2", "OAuth2 (XOAUTH2)"

    class AfterTaking(models.TextChoices):
        MOVE = "move", "move it to the Processed folder"
        FLAG = "flag", "flag it where it is"

    channel = models.OneToOneField(IntakeChannel, on_delete=models.PROTECT, related_name="mailbox")
    host = models.CharField(max_length=255)
    port = models.PositiveIntegerField(default=993)
    security = models.CharField(max_length=10, choices=Security.choices, default=Security.TLS)
    # A certificate authority to trust besides the system's (a company's own), as a file path.
    tls_ca_file = models.CharField(max_length=500, blank=True)
    username = models.CharField(max_length=255)
    auth = models.CharField(max_length=10, choices=Auth.choices, default=Auth.PASSWORD)
    secret_variable = models.CharField(
        max_length=100, help_text="the environment variable holding the password or secret"
    )
    # OAuth2: the token endpoint, the client and the scope. With a refresh token (Google
    # Workspace) the watcher asks for access with it; without one, as the client itself
    # (client credentials: Microsoft 365's app-only access).
    oauth_token_url = models.URLField(max_length=500, blank=True)
    oauth_client_id = models.CharField(max_length=255, blank=True)
    oauth_scope = models.CharField(max_length=500, blank=True)
    refresh_token_variable = models.CharField(max_length=100, blank=True)
    folder = models.CharField(max_length=255, default="INBOX")
    after_taking = models.CharField(
        max_length=10, choices=AfterTaking.choices, default=AfterTaking.MOVE
    )
    processed_folder = models.CharField(max_length=255, default="Processed")
    # Refused mail (too big, unreadable, invalid) goes here; empty: it is flagged in place.
    rejected_folder = models.CharField(max_length=255, default="Rejected", blank=True)
    # Where a copy of each reply is kept; empty: none is kept.
    sent_folder = models.CharField(max_length=255, blank=True)
    use_idle = models.BooleanField(default=True, help_text="wait with IDLE where the server can")
    poll_seconds = models.PositiveIntegerField(
        default=60, help_text="the longest wait between two looks at the folder"
    )
    # Defined by GATEHOUSE_MAILBOXES: the watcher writes the settings over these fields.
    from_settings = models.BooleanField(default=False, editable=False)

    # What the watcher saw: written by it, shown on the queues page and /metrics.
    status = models.CharField(max_length=20, default="never started", editable=False)
    watcher = models.CharField(max_length=200, blank=True, editable=False)
    started_at = models.DateTimeField(null=True, editable=False)
    last_contact_at = models.DateTimeField(null=True, editable=False)
    uidvalidity = models.BigIntegerField(null=True, editable=False)
    last_uid = models.BigIntegerField(default=0, editable=False)
    renumbered_at = models.DateTimeField(null=True, editable=False)
    day = models.DateField(null=True, editable=False)
    taken_today = models.PositiveIntegerField(default=0, editable=False)
    refused_today = models.PositiveIntegerField(default=0, editable=False)
    errors_today = models.PositiveIntegerField(default=0, editable=False)
    last_error = models.TextField(blank=True, editable=False)
    last_error_at = models.DateTimeField(null=True, editable=False)

    def __str__(self) -> str:
        return f"{self.username} at {self.host} ({self.folder})"
