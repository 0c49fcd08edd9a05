"""What intake lets a sender read back: an integrator's own runs, in the API's words, and
the first bytes of a stored request; what staff see of the mailboxes' watchers; and the
customer list.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta

from django.db.models import BinaryField, Q, TextField
from django.db.models.functions import Cast, Length, Substr
from django.utils import timezone

from automation.api_schemas import RunDetail, RunSummary
from automation.intake.models import Customer, IntakeChannel, IntakeRecord, Mailbox
from automation.runs.models import Run

# What an integrator's token may read: the runs taken in through its own channel, and no
# other. E-mail identity is wider than that on purpose (one Message-ID, one request, on every
# path), so a message the mailbox already took in is answered to the API as a duplicate that
# names the existing run: its id, state and outcome, enough to know the request is in hand.
# Its detail (what was read from the message, the rules, the failure, the versions) stays
# with the channel that took it in: a Message-ID is no secret (every recipient of a thread
# knows it), and neither it nor a copy of the message makes a token a reader of what another
# path received.


def run_for_channel(*, run_id: int, channel: IntakeChannel) -> Run | None:
    return Run.objects.filter(pk=run_id, channel=channel).first()


def channel_may_read(*, run: Run, channel: IntakeChannel) -> bool:
    """The rule of run_for_channel, for a run already in hand."""
    return run.channel_id == channel.pk


def run_summary(run: Run, *, run_page: str, readable: bool = True) -> RunSummary:
    """What the API says of a run; the addresses of its detail and of its page in the console
    only to those who may read it."""
    summary: RunSummary = {
        "id": run.pk,
        "event_id": run.event_id,
        "state": run.state,
        "outcome": run.outcome or None,
    }
    if readable:
        summary["url"] = f"/api/v1/runs/{run.pk}"
        summary["links"] = {"run_page": run_page}
    return summary


def run_detail(run: Run, *, run_page: str) -> RunDetail:
    stages = run.stages.order_by("started_at", "pk")
    return {
        **run_summary(run, run_page=run_page),
        "failure": {"field": run.failure_field, "detail": run.failure_detail}
        if run.failure_field or run.failure_detail
        else None,
        "fingerprint": run.fingerprint,
        "versions": {
            "workflow": run.workflow_version,
            "classifier": run.classifier_version,
            "prompt": run.prompt_version,
            "policy": run.policy_version or None,
        },
        "classification": run.classification,
        "route": run.route or None,
        "effect": run.effect_name or None,
        "rules": run.rules,
        "created_at": run.created_at.isoformat(),
        "finished_at": run.finished_at.isoformat() if run.finished_at else None,
        "stages": [
            {
                "stage": stage.stage,
                "attempt": stage.attempt,
                "started_at": stage.started_at.isoformat(),
                "duration_ms": stage.duration_ms,
                "outcome": stage.outcome,
                "error_class": stage.error_class,
            }
            for stage in stages
        ],
        "checkpoints": run.checkpoints.count(),
    }


# --- exception queues and the run page ---------------------------------------------------


# --- the raw input ------------------------------------------------------------------------

RAW_PREVIEW_BYTES = 64 * 1024


@dataclass(frozen=True)
class RawPreview:
    """The first bytes of an intake record, read without loading the rest, and what they
    are part of: `stored` bytes kept of a request of `size` bytes (fewer when refused)."""

    intake: IntakeRecord  # without `raw`
    head: bytes
    stored: int

    @property
    def text(self) -> str:
        return self.head.decode("utf-8", errors="replace")

    @property
    def cut(self) -> bool:
        return len(self.head) < self.stored


def raw_preview(*, intake_id: int) -> RawPreview:
    """The first RAW_PREVIEW_BYTES of a record's stored bytes: a page shows those, however
    large the request (a download serves the rest)."""
    record = (
        IntakeRecord.objects.defer("raw")
        .annotate(
            head=Substr("raw", 1, RAW_PREVIEW_BYTES, output_field=BinaryField()),
            stored=Length("raw"),
        )
        .get(pk=intake_id)
    )
    return RawPreview(record, bytes(record.head), record.stored)


# --- the mailboxes' watchers ----------------------------------------------------------------

# What a watcher writes in Mailbox.status (automation.intake.imap.MailboxWatcher), in order.
WATCHER_STATUSES = (
    "never started",
    "starting",
    "connected",
    "idle",
    "polling",
    "reconnecting",
    "stopped",
)
# Statuses in which no watcher is at work, however recent its last write.
NOT_WATCHING = frozenset({"never started", "stopped"})
# A watching watcher writes its last contact every few seconds (imap.HEARTBEAT_SECONDS) and
# looks at the folder at least every poll_seconds; one silent for three of those, or for two
# minutes if that is longer (a reconnection's backoff, a slow pass), has stopped unannounced:
# killed, hung, or its machine gone.
SILENT_POLLS = 3
SILENT_AT_LEAST = timedelta(seconds=120)


@dataclass(frozen=True)
class MailboxView:
    """A mailbox as the queues page and /metrics show it. The day's counts are 0 when the
    watcher last counted on another day (it resets them at its next write)."""

    channel: str
    mailbox: str  # "username at host / folder"
    status: str  # one of WATCHER_STATUSES
    use_idle: bool
    poll_seconds: int
    last_contact_at: datetime | None
    alive: bool
    taken_today: int
    refused_today: int
    errors_today: int
    last_error: str
    last_error_at: datetime | None
    renumbered_at: datetime | None
    watcher: str


def silent_after(poll_seconds: int) -> timedelta:
    """How long a watcher may go without writing before it counts as not alive."""
    return max(SILENT_POLLS * timedelta(seconds=poll_seconds), SILENT_AT_LEAST)


def mailbox_is_alive(box: Mailbox, *, now: datetime) -> bool:
    if box.status in NOT_WATCHING or box.last_contact_at is None:
        return False
    return now - box.last_contact_at <= silent_after(box.poll_seconds)


def mailbox_view(box: Mailbox, *, now: datetime, today: date) -> MailboxView:
    counted = box.day == today
    return MailboxView(
        channel=box.channel.name,
        mailbox=f"{box.username} at {box.host} / {box.folder}",
        status=box.status,
        use_idle=box.use_idle,
        poll_seconds=box.poll_seconds,
        last_contact_at=box.last_contact_at,
        alive=mailbox_is_alive(box, now=now),
        taken_today=box.taken_today if counted else 0,
        refused_today=box.refused_today if counted else 0,
        errors_today=box.errors_today if counted else 0,
        last_error=box.last_error,
        last_error_at=box.last_error_at,
        renumbered_at=box.renumbered_at,
        watcher=box.watcher,
    )


def mailbox_views(*, now: datetime | None = None) -> list[MailboxView]:
    """Every mailbox with its watcher's progress, by channel name: one query (a row per
    mailbox, a mailbox per channel: a handful)."""
    now = now or timezone.now()
    today = timezone.localdate(now)
    boxes = Mailbox.objects.select_related("channel").order_by("channel__name")
    return [mailbox_view(box, now=now, today=today) for box in boxes]


def channels_for_setup() -> list[IntakeChannel]:
    """Every intake channel by name, with its mailbox if it has one (one query)."""
    return list(IntakeChannel.objects.select_related("mailbox").order_by("name")[:500])


# Customers shown on a page of the customer list.
CUSTOMERS_PAGE = 50


def customers_search(*, text: str, after: str = "") -> tuple[list[Customer], str | None]:
    """Customers whose reference, name or an e-mail domain holds `text`, by reference, the
    page after the reference `after`; and the reference to ask the next page after (None on
    the last). Keyset by the unique reference: a page reads only what it shows."""
    found = Customer.objects.order_by("reference")
    text = text.strip()
    if text:
        found = found.annotate(domains=Cast("email_domains", TextField())).filter(
            Q(reference__icontains=text) | Q(name__icontains=text) | Q(domains__icontains=text)
        )
    if after:
        found = found.filter(reference__gt=after)
    rows = list(found[: CUSTOMERS_PAGE + 1])
    more = len(rows) > CUSTOMERS_PAGE
    rows = rows[:CUSTOMERS_PAGE]
    return rows, rows[-1].reference if more else None
