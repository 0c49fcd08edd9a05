"""What intake lets a sender read back: an integrator's own runs, in the API's words, and
the first bytes of a stored request.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import BinaryField
from django.db.models.functions import Length, Substr

from automation.api_schemas import RunDetail, RunSummary
from automation.intake.models import IntakeChannel, IntakeRecord
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
