"""E-mail from files: single `.eml` files, directories of them, and maildirs.

Each message is stored and admitted on its own (its own transactions), so one bad file never
stops a batch: it is counted, named, and the batch goes on. A file is read in chunks within
the size limit (`intake.message_limit`): a larger one is never held whole, and is kept as a
refused record.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import mailbox
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from automation.intake.models import IntakeChannel, IntakeRecord
from automation.intake.services import (
    MAIL_TYPE,
    IntakeResult,
    Oversized,
    Readable,
    intake_refuse_oversized,
    intake_submit,
    message_limit,
    read_within,
)
from automation.schemas import storable
from core.codes import Outcome

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class MailSource:
    name: str  # what the summary and the intake record call it
    open: Callable[[], contextlib.AbstractContextManager[Readable]]  # its bytes, from the start

    def read(self) -> bytes | Oversized:
        """The message, or what a refused record keeps of it when it is over the limit."""
        with self.open() as stream:
            return read_within(stream, message_limit(MAIL_TYPE))


def _source(
    name: object, open_message: Callable[[], contextlib.AbstractContextManager[Readable]]
) -> MailSource:
    # A file name that is not UTF-8 reaches Python with lone surrogates in it (PEP 383): the
    # name is a label, stored and printed, so it is made storable; `open` keeps the real path.
    return MailSource(storable(str(name)), open_message)


def _opener(path: Path) -> Callable[[], contextlib.AbstractContextManager[Readable]]:
    return lambda: path.open("rb")


def _record_source(name: str) -> str:
    """The intake record's `source`, a display copy: a path longer than the column keeps its
    end, which names the file (the summary prints the whole name)."""
    label = f"file:{name}"
    limit = IntakeRecord._meta.get_field("source").max_length or len(label)
    return label if len(label) <= limit else f"file:…{name[-(limit - 6) :]}"


def _is_maildir(path: Path) -> bool:
    return all((path / part).is_dir() for part in ("cur", "new", "tmp"))


def mail_sources(paths: list[Path]) -> list[MailSource]:
    """Every message under the given paths, in a stable order. Raises for a missing path."""
    sources: list[MailSource] = []
    for path in paths:
        if not path.exists():
            raise FileNotFoundError(f"{path}: no such file or directory")
        if path.is_file():
            sources.append(_source(path, _opener(path)))
        elif _is_maildir(path):
            sources.extend(_maildir(path))
        else:
            for child in sorted(path.rglob("*")):
                # A broken link is listed too: it is reported unreadable, not silently skipped.
                if child.suffix.lower() == ".eml" and (child.is_file() or child.is_symlink()):
                    sources.append(_source(child, _opener(child)))
                elif child.is_dir() and _is_maildir(child):
                    sources.extend(_maildir(child))
    return sources


def _maildir(path: Path) -> Iterator[MailSource]:
    box = mailbox.Maildir(path, factory=None, create=False)
    for key in sorted(box.keys()):
        yield _source(f"{path}#{key}", functools.partial(box.get_file, key))


@dataclass
class MailBatch:
    read: int = 0
    new_runs: int = 0
    replays: int = 0
    conflicts: int = 0
    invalid: int = 0
    unreadable: int = 0
    errors: int = 0
    taken_before: int = 0  # this file with these bytes was taken in on an earlier read
    stopped: bool = False  # asked to stop before the last message
    failures: list[tuple[str, str]] = field(default_factory=list)  # (source, why)
    results: list[tuple[str, IntakeResult]] = field(default_factory=list)

    def count(self, name: str, result: IntakeResult) -> None:
        self.results.append((name, result))
        if result.code == Outcome.IDEMPOTENT_REPLAY:
            self.replays += 1
        elif result.code == Outcome.IDEMPOTENCY_CONFLICT:
            self.conflicts += 1
            self.failures.append((name, "Message-ID already used for a different message"))
        elif result.code == Outcome.INVALID_EVENT:
            self.invalid += 1
            reason = "; ".join(f"{p.field} {p.message}" for p in result.problems)
            self.failures.append((name, reason))
        else:
            self.new_runs += 1

    def summary(self) -> str:
        return (
            f"read {self.read}: {self.new_runs} new runs, {self.replays} replays, "
            f"{self.conflicts} conflicts, {self.invalid} invalid, {self.unreadable} unreadable"
            + (f", {self.errors} failed" if self.errors else "")
            + (f", {self.taken_before} taken in before" if self.taken_before else "")
            + (" (stopped early)" if self.stopped else "")
        )


def mail_intake(
    *,
    channel: IntakeChannel,
    sources: list[MailSource],
    progress: Callable[[int, int], None] | None = None,
    stop: Callable[[], bool] = lambda: False,
) -> MailBatch:
    """Store and admit each message; the raw bytes are stored before anything reads them.

    `stop` is asked between messages (never inside one), so a stopped batch leaves every
    message it started fully taken in.
    """
    batch = MailBatch()
    for index, source in enumerate(sources, start=1):
        if stop():
            batch.stopped = True
            break
        _take_in(batch, channel, source)
        if progress is not None:
            progress(index, len(sources))
    return batch


def _take_in(batch: MailBatch, channel: IntakeChannel, source: MailSource) -> None:
    try:
        raw = source.read()
    except OSError as exc:
        batch.unreadable += 1
        batch.failures.append((source.name, f"could not be read: {exc}"))
        return
    batch.read += 1
    label = _record_source(source.name)
    digest = raw.sha256 if isinstance(raw, Oversized) else hashlib.sha256(raw).hexdigest()
    if _taken_before(channel=channel, source=label, digest=digest):
        batch.taken_before += 1
        return
    try:
        result = _submit(channel, raw, label)
    except Exception as exc:  # one message never stops the batch
        logger.exception("intake of %s failed", source.name)
        batch.errors += 1
        batch.failures.append((source.name, f"failed: {type(exc).__name__}: {exc}"))
        return
    batch.count(source.name, result)


def _submit(channel: IntakeChannel, raw: bytes | Oversized, label: str) -> IntakeResult:
    if isinstance(raw, Oversized):
        return intake_refuse_oversized(
            channel=channel, request=raw, content_type=MAIL_TYPE, source=label
        )
    return intake_submit(channel=channel, raw=raw, content_type=MAIL_TYPE, source=label)


def _taken_before(*, channel: IntakeChannel, source: str, digest: str) -> bool:
    """Whether this file, with these exact bytes, was taken in through this channel before.

    A folder read again (a schedule over a maildir, every start of the demo) meets the files
    it took last time. The Message-ID cannot tell: a message that could not be read has none
    and would fail once more, as a new invalid run, on every read; and a replay answered again
    is one more record and audit event each time. So a file is passed over when its bytes were
    stored from the same place before. The same bytes in another file (a redelivery) are still
    taken in and answered as a replay, and a record kept after a failed admission (no policy
    yet) does not count: that message is taken in again.
    """
    return IntakeRecord.objects.filter(
        raw_sha256=digest,  # intake_raw_sha256_idx (of the whole message, even if refused)
        source=source,
        channel=channel,
        admission_error="",
    ).exists()
