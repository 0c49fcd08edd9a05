"""Intake: store the raw request first, then validate, fingerprint and claim its identity."""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, transaction
from django.db.models import Model
from django.utils import timezone
from pydantic import BaseModel, ValidationError

from audit.models import AuditAction, AuditEvent
from automation.classifiers import classifier_versions
from automation.conf import setting
from automation.intake.models import MAIL_SCOPE, ApiToken, IntakeChannel, IntakeRecord
from automation.mail import MessageOverBudget, parse_message
from automation.runs.journal import (
    Stage,
    audit_fields,
    journal,
    record_audit,
    record_transition,
    write_row,
)
from automation.runs.models import Run, StageName, StageOutcome, StageRecord, State
from automation.runs.payloads import facts_of, policy_for, policy_known
from automation.runs.runlog import log_admission, logs_intake
from automation.runs.sending import ADVANCE_RUN_TASK
from automation.schemas import (
    FieldProblem,
    IntakeEvent,
    MailEvent,
    fingerprint,
    intake_contract,
    is_mail,
    read_json,
    storable,
    storage_problems,
    validation_problems,
)
from core.codes import MailRefusal, Outcome
from policy.catalogue import Catalogue, reference_catalogue
from policy.evaluation import check_request_allowed
from policy.models import PolicyVersion
from policy.services import policy_business, policy_get
from worker.dispatch import Priority, enqueue_after_commit

logger = logging.getLogger(__name__)

# --- integrators ------------------------------------------------------------------------


def api_token_create(*, name: str, channel: IntakeChannel) -> tuple[ApiToken, str]:
    """Issue a bearer token. The plain key is returned once; only its SHA-256 is stored."""
    key = secrets.token_urlsafe(32)
    token = ApiToken.objects.create(
        name=name, channel=channel, key_hash=hashlib.sha256(key.encode()).hexdigest()
    )
    return token, key


def api_tokens_revoke(*, token_ids: list[int], user: User) -> int:
    """Switch tokens off (they are never deleted: runs name the token they came through).

    Only those who manage integrators' tokens (ops leads) may: a revoked token stops a
    partner's whole intake."""
    if not user.has_perm("automation.change_apitoken"):
        raise PermissionDenied("you may not revoke API tokens")
    with transaction.atomic(durable=True):
        revoked = ApiToken.objects.filter(pk__in=token_ids, is_active=True)
        names = list(revoked.values_list("name", flat=True))
        count = revoked.update(is_active=False)
        for name in names:
            record_audit(None, AuditAction.API_TOKEN_REVOKED, actor=user, token=name)
        return count


def api_token_find(*, key: str) -> ApiToken | None:
    """The active token with this key, with its channel; None for an unknown or revoked key
    (only the key's SHA-256 is stored)."""
    digest = hashlib.sha256(key.encode()).hexdigest()
    tokens = ApiToken.objects.filter(key_hash=digest, is_active=True)
    return tokens.select_related("channel").first()


@transaction.atomic(durable=True)
def channel_get_or_create(*, name: str, classifier: str = "") -> IntakeChannel:
    """A channel stamped with its configured classifier, workflow and prompt versions.

    The classifier is the one named for this channel in CHANNEL_CLASSIFIERS, else the
    default. When the setting names another classifier than the channel has, the channel
    follows the setting (recorded): runs already made keep the versions they were read with.
    """
    configured = setting("CHANNEL_CLASSIFIERS").get(name, "")
    classifier = classifier or configured or setting("DEFAULT_CLASSIFIER")
    stamp = _classifier_stamp(classifier)
    channel, created = IntakeChannel.objects.get_or_create(
        name=name,
        defaults={
            **stamp,
            "workflow_version": setting("WORKFLOW_VERSION"),
            "max_classifier_attempts": setting("CLASSIFIER_MAX_ATTEMPTS"),
        },
    )
    if configured and not created:
        _channel_follow(
            channel, stamp if configured == classifier else _classifier_stamp(configured)
        )
    return channel


def _classifier_stamp(classifier: str) -> dict[str, str]:
    version, prompt_version = classifier_versions(classifier)
    return {
        "classifier": classifier,
        "classifier_version": version,
        "prompt_version": prompt_version,
    }


def _channel_follow(channel: IntakeChannel, stamp: dict[str, str]) -> None:
    if all(getattr(channel, key) == value for key, value in stamp.items()):
        return
    before = channel.classifier_version
    for key, value in stamp.items():
        setattr(channel, key, value)
    channel.save(update_fields=list(stamp))
    record_audit(
        None,
        AuditAction.CHANNEL_CLASSIFIER_CHANGED,
        channel=channel.name,
        before=before,
        after=channel.classifier_version,
    )


# --- intake ------------------------------------------------------------------------------


@dataclass(frozen=True)
class IntakeResult:
    code: str  # accepted, idempotent_replay, idempotency_conflict, invalid_event, unsupported
    intake: IntakeRecord
    run: Run | None
    problems: list[FieldProblem] = field(default_factory=list)
    malformed: bool = False  # the body was not JSON at all


# --- the size limit ------------------------------------------------------------------------

# What a refused record keeps of a request over the limit: enough to see what it was.
REFUSED_HEAD_BYTES = 64 * 1024
READ_CHUNK_BYTES = 1024 * 1024


def message_limit(content_type: str) -> int:
    """The largest request taken in, in bytes, whichever way it comes (the API, files,
    folders, maildirs): GATEHOUSE_MAX_MESSAGE_BYTES for an e-mail message,
    GATEHOUSE_MAX_EVENT_BYTES for anything else (a JSON event)."""
    return setting("MAX_MESSAGE_BYTES" if content_type == MAIL_TYPE else "MAX_EVENT_BYTES")


@dataclass(frozen=True)
class Oversized:
    """A request over the limit, read without keeping it: its size, the SHA-256 of all of
    it, and its first bytes."""

    size: int
    sha256: str
    head: bytes


class Readable(Protocol):
    """What a request is read from in chunks: a file, a maildir's message, a socket."""

    def read(self, size: int = -1, /) -> bytes: ...


def read_within(stream: Readable, limit: int) -> bytes | Oversized:
    """Read a request from `stream`: its bytes when it is within `limit`; else what a
    refused record keeps of it. Memory stays within the limit and a chunk: the part past
    the limit is hashed and counted as it goes by, never held."""
    digest = hashlib.sha256()
    kept: list[bytes] | None = []
    head = b""
    size = 0
    while chunk := stream.read(READ_CHUNK_BYTES):
        digest.update(chunk)
        size += len(chunk)
        if kept is None:
            continue
        kept.append(chunk)
        if size > limit:
            head, kept = _head(kept), None
    if kept is not None:
        return b"".join(kept)
    return Oversized(size, digest.hexdigest(), head)


def _head(chunks: list[bytes]) -> bytes:
    """The first REFUSED_HEAD_BYTES of the chunks, joining no more of them than it takes."""
    taken: list[bytes] = []
    length = 0
    for chunk in chunks:
        if length >= REFUSED_HEAD_BYTES:
            break
        taken.append(chunk[: REFUSED_HEAD_BYTES - length])
        length += len(taken[-1])
    return b"".join(taken)


def _oversized(raw: bytes) -> Oversized:
    return Oversized(len(raw), IntakeRecord.digest(raw), raw[:REFUSED_HEAD_BYTES])


@transaction.atomic(durable=True)
def intake_refuse_oversized(
    *,
    channel: IntakeChannel,
    request: Oversized,
    content_type: str,
    source: str,
    over_budget: MessageOverBudget | None = None,
) -> IntakeResult:
    """Keep a request over the size limit, or a message over a reading limit (`over_budget`),
    as a refused record (its size, its hash, its first bytes; never the whole body) with an
    `invalid_event` run that says why, its reason code on the run's checkpoint."""
    return _refuse(channel, request, content_type, source, over_budget)


def _refuse(
    channel: IntakeChannel,
    request: Oversized,
    content_type: str,
    source: str,
    over_budget: MessageOverBudget | None = None,
) -> IntakeResult:
    """intake_refuse_oversized in the caller's transaction."""
    intake = IntakeRecord.objects.create(
        channel=channel,
        raw=request.head,
        raw_sha256=request.sha256,
        size=request.size,
        refused=True,
        content_type=content_type,
        source=source,
    )
    kept = f"only its size, its SHA-256 and its first {_bytes(len(intake.raw))} are kept"
    if over_budget is not None:
        reason = over_budget.code
        problem = FieldProblem(field="message", message=f"{over_budget}: it was not read; {kept}")
    else:
        reason = MailRefusal.TOO_LARGE
        limit = message_limit(content_type)
        what = "an e-mail message" if content_type == MAIL_TYPE else "a request"
        problem = FieldProblem(
            field="message" if content_type == MAIL_TYPE else "body",
            message=(
                f"is {_bytes(intake.size)}, over the limit of {_bytes(limit)} for {what}: it "
                f"was not read; {kept}"
            ),
        )
    # Named by its content, like a message that cannot be read: the same bytes, one name.
    run = _create_invalid_run(intake, f"sha256:{intake.raw_sha256}", [problem], refused=reason)
    return log_admission(IntakeResult(Outcome.INVALID_EVENT, intake, run, [problem]))


def _bytes(count: int) -> str:
    """A size in words: '27.0 MiB (28,311,552 bytes)'."""
    for unit, scale in (("MiB", 1024**2), ("KiB", 1024)):
        if count >= scale:
            return f"{count / scale:.1f} {unit} ({count:,} bytes)"
    return f"{count:,} bytes"


def intake_submit(
    *, channel: IntakeChannel, raw: bytes, content_type: str, source: str
) -> IntakeResult:
    """Store the raw request first, then admit it. Bad input loses nothing and runs nothing.

    One transaction: the raw record, the run, its history and its first message commit
    together, written by the ORM (intake_admit). If the admission fails unexpectedly, that
    transaction is gone with it: the raw record is then stored on its own (for whoever
    investigates) before the error goes on. A request over the size limit is kept as a
    refused record, unread.
    """
    if len(raw) > message_limit(content_type):
        return intake_refuse_oversized(
            channel=channel, request=_oversized(raw), content_type=content_type, source=source
        )
    record = {"channel": channel, "raw": raw, "content_type": content_type, "source": source}
    try:
        # Read once: it says what the event is held to, and then decides its run.
        policy = _deciding_version(channel)
        business = policy.parsed.business if policy is not None else reference_catalogue()
        parsed = _parse_event(raw, content_type, business)
        with transaction.atomic(durable=True):
            intake = IntakeRecord.objects.create(**record)
            return intake_admit(intake=intake, parsed=parsed, policy=policy)
    except MessageOverBudget as exc:  # raised by the parse, before anything was written
        return intake_refuse_oversized(
            channel=channel,
            request=_oversized(raw),
            content_type=content_type,
            source=source,
            over_budget=exc,
        )
    except Exception as exc:
        _keep_raw(record, exc)
        raise


def intake_submit_in_transaction(
    *, channel: IntakeChannel, raw: bytes, content_type: str, source: str
) -> IntakeResult:
    """intake_submit inside the caller's transaction: for a dry run that rolls back everything
    it did (the classifier evaluation). A failure is the caller's to handle."""
    if len(raw) > message_limit(content_type):
        return _refuse(channel, _oversized(raw), content_type, source)
    try:
        parsed = _parse_event(raw, content_type, channel_business(channel))
    except MessageOverBudget as exc:
        return _refuse(channel, _oversized(raw), content_type, source, exc)
    record = IntakeRecord.objects.create(
        channel=channel, raw=raw, content_type=content_type, source=source
    )
    return intake_admit(intake=record, parsed=parsed)


def _keep_raw(record: dict[str, Any], error: Exception) -> None:
    """Keep the request that made no run, saying why: a record is never left unexplained."""
    try:
        IntakeRecord.objects.create(**record, admission_error=_why_not_admitted(error))
    except Exception:  # the store itself is failing: the original error is the one to see
        logger.exception("intake: the raw request could not be kept after a failure")


def _why_not_admitted(error: Exception) -> str:
    if isinstance(error, PolicyVersion.DoesNotExist):
        return (
            "no policy version is active (or the channel's pinned one is missing): nothing "
            "was decided; the request can be sent again once `load_policy` has run"
        )
    # The first line: a database error goes on to quote the statement and its values.
    first_line = next(iter(str(error).splitlines()), "")
    return storable(f"{type(error).__name__}: {first_line}")[:1000]


MAIL_TYPE = "message/rfc822"


# (the event if valid, the data as read, the problems found)
Parsed = tuple[IntakeEvent | MailEvent | None, Any, list[FieldProblem]]


def _deciding_version(channel: IntakeChannel) -> PolicyVersion | None:
    """The version that decides for the channel now (its document left unread: see
    policy_get); None while there is none."""
    try:
        return policy_get(name=channel.policy_version or None, document=False)
    except PolicyVersion.DoesNotExist:
        return None


def channel_business(channel: IntakeChannel) -> Catalogue:
    """The catalogue of the version that decides for the channel now: what its requests are
    held to. With no version to decide (none active yet), the reference catalogue: the run
    is then refused for want of a policy, whatever it says."""
    return policy_business(name=channel.policy_version or None)


def _parse_event(raw: bytes, content_type: str, business: Catalogue) -> Parsed:
    if content_type == MAIL_TYPE:
        return _parse_mail(raw)
    data, unreadable = read_json(raw)
    if unreadable is not None:
        return None, None, [unreadable]
    if not isinstance(data, dict):
        return None, data, [FieldProblem(field="body", message="must be a JSON object")]
    return _validated(intake_contract(business), data)


Event = TypeVar("Event", bound=BaseModel)


def _validated(
    contract: type[Event], data: dict[str, Any]
) -> tuple[Event | None, Any, list[FieldProblem]]:
    """The event, if it meets its contract and the database can store every key and text of
    it; otherwise every problem found, the unstorable ones first (a field is named once)."""
    problems = storage_problems(data)
    try:
        event = contract.model_validate(data)
    except ValidationError as exc:
        named = {problem.field for problem in problems}
        more = [problem for problem in validation_problems(exc) if problem.field not in named]
        return None, data, [*problems, *more]
    return (None, data, problems) if problems else (event, data, [])


def _parse_mail(raw: bytes) -> tuple[MailEvent | None, Any, list[FieldProblem]]:
    """An e-mail read into its event. A message that cannot be read names why; one over a
    reading limit raises MessageOverBudget (the caller keeps it as a refused record)."""
    try:
        parsed = parse_message(raw)
    except MessageOverBudget:
        raise
    except Exception as exc:  # the email package itself failed on input it does not expect
        event_id = f"sha256:{hashlib.sha256(raw).hexdigest()}"
        problem = FieldProblem(field="message", message=f"could not be parsed: {exc}")
        return None, {"event_id": event_id}, [problem]
    data = parsed.event()
    if parsed.problems:
        problems = [FieldProblem(field=name, message=text) for name, text in parsed.problems]
        return None, data, [*storage_problems(data), *problems]
    return _validated(MailEvent, data)


@logs_intake
def intake_admit(
    *, intake: IntakeRecord, parsed: Parsed | None = None, policy: PolicyVersion | None = None
) -> IntakeResult:
    """Validate, normalize, fingerprint and claim the event identity for one intake record, in
    the caller's transaction (`parsed`: its raw request read already; `policy`: the version
    deciding for its channel, read already)."""
    event, data, problems = parsed or _parse_event(
        bytes(intake.raw), intake.content_type, channel_business(intake.channel)
    )
    if event is None:
        event_id = data.get("event_id") if isinstance(data, dict) else None
        run = _create_invalid_run(intake, storable(str(event_id or ""))[:200], problems)
        return IntakeResult(Outcome.INVALID_EVENT, intake, run, problems, data is None)
    normalized = event.normalized()
    # Identity is the normalized event id: " evt-1 " and "evt-1" are one event.
    # The unique index arbitrates; no read first (a duplicate is the rare case).
    event_id = normalized["event_id"]
    try:
        run = _create_run(intake, normalized, policy=policy)
    except IntegrityError:
        # The event was taken, earlier or by a submission that committed first: answer as a
        # duplicate (the run's savepoint was rolled back; the intake record stays).
        owner = _identity_owner(_identity_scope(intake.channel, intake.content_type), event_id)
        if owner is None:
            raise
        return _answer_duplicate(intake, owner, fingerprint(normalized))
    code = "accepted" if run.state == State.RECEIVED else run.outcome
    return IntakeResult(code, intake, run)


def _identity_scope(channel: IntakeChannel, content_type: str) -> str:
    """Where an event id names one request: an e-mail's Message-ID (or content hash) names it
    on every path that takes mail; a JSON event's id is the integrator's, so per channel."""
    if content_type == MAIL_TYPE and channel.shares_mail_identity:
        return MAIL_SCOPE
    return channel.name


def _identity_owner(scope: str, event_id: str) -> Run | None:
    return Run.objects.filter(
        identity_scope=scope, event_id=event_id, claims_identity=True, replay_of__isnull=True
    ).first()


def _new_run(intake: IntakeRecord, event_id: str) -> Run:
    return Run(intake=intake, **_run_fields(intake.channel, intake.content_type, event_id))


def _run_fields(channel: IntakeChannel, content_type: str, event_id: str) -> dict[str, Any]:
    """The fields every new run starts with: its channel, identity and versions."""
    return {
        "channel": channel,
        "event_id": event_id,
        "identity_scope": _identity_scope(channel, content_type),
        "workflow_version": channel.workflow_version,
        "classifier_version": channel.classifier_version,
        "prompt_version": channel.prompt_version,
    }


def _create_invalid_run(
    intake: IntakeRecord, event_id: str, problems: list[FieldProblem], refused: str = ""
) -> Run:
    run = _new_run(intake, event_id)
    run.save()
    detail = json.dumps([p.model_dump() for p in problems])
    checkpoint: dict[str, Any] = {"problems": json.loads(detail)}
    if refused:  # kept unread: why, as a code
        checkpoint["refused"] = refused
    record_transition(
        run,
        run.fail,
        stage=Stage(StageName.INTAKE),
        stage_outcome=StageOutcome.INVALID_EVENT,
        checkpoint=checkpoint,
        outcome=Outcome.INVALID_EVENT,
        field=problems[0].field,
        detail=detail,
        finished_at=timezone.now(),
    )
    return run


# A savepoint: when the unique index refuses the run (the event is taken), only the run is
# rolled back and the caller's transaction goes on to answer with the duplicate.
@transaction.atomic
def _create_run(
    intake: IntakeRecord,
    normalized: dict[str, Any],
    replay_of: Run | None = None,
    policy: PolicyVersion | None = None,
) -> Run:
    """Create the run at `received` owning (scope, event id); the unique index arbitrates.

    A replay is a new run of the same stored input, linked to the original; it does not own
    the event identity (the original keeps it) but keeps its scope, so it reaches the same
    effect key.
    """
    stage = Stage(StageName.INTAKE)
    run = _received_run(intake, normalized, replay_of)
    if policy is not None:
        policy_known(run, policy)
    if is_mail(normalized):
        _thread_link(run, normalized)
    run.dispatched_at = timezone.now()  # its first message is sent with it, below
    run.save()
    # A new run has no history yet: its rows are written together, its first checkpoint is 1.
    with journal(run, last_sequence=0):
        _record_received(stage, run, intake)
        if replay_of is None and is_mail(normalized):
            _thread_adopt(run)
        allowed = check_request_allowed(policy_for(run).parsed, facts_of(run))
        if not allowed.passed:
            rules = [allowed.as_dict()]
            record_transition(
                run,
                run.fail,
                checkpoint={"rules": rules},
                outcome=Outcome.UNSUPPORTED_REQUEST,
                field="requested_action",
                detail=allowed.text,
                rules=rules,
                finished_at=timezone.now(),
            )
            return run
    # A person's replay is awaited; a batch of replays goes to `bulk` (recovery.batch_step).
    priority = Priority.URGENT if replay_of is not None else Priority.LIVE
    enqueue_after_commit(ADVANCE_RUN_TASK, run.pk, priority=priority)
    return run


def _received_run(
    intake: IntakeRecord, normalized: dict[str, Any], replay_of: Run | None = None
) -> Run:
    """The run of a normalized event at `received`, not yet written."""
    fields = _received_fields(intake.channel, intake.content_type, normalized, replay_of)
    return Run(intake=intake, **fields)


def _received_fields(
    channel: IntakeChannel,
    content_type: str,
    normalized: dict[str, Any],
    replay_of: Run | None = None,
) -> dict[str, Any]:
    """The fields of a run at `received` (but its intake record): a first submission owns its
    event id; a replay does not (the original keeps it) but keeps its scope, so it reaches
    the same effect key."""
    fields = _run_fields(channel, content_type, normalized["event_id"])
    fields.update(
        claims_identity=replay_of is None,
        replay_of=replay_of,
        normalized=normalized,
        fingerprint=fingerprint(normalized),
    )
    if replay_of is not None:
        fields["identity_scope"] = replay_of.identity_scope
    return fields


def _record_received(stage: Stage, run: Run, intake: IntakeRecord) -> None:
    """Write the history a received run starts with, in its journal."""
    for model, fields in _received_history(stage, run, intake):
        write_row(run, model(**fields))


def _received_history(
    stage: Stage, run: Run, intake: IntakeRecord
) -> list[tuple[type[Model], dict[str, Any]]]:
    """The rows of the history a received run starts with: the intake stage, accepted, and
    its audit row."""
    audit = audit_fields(run, AuditAction.RUN_RECEIVED, intake=intake)
    return [
        (StageRecord, {"run": run, **stage.fields(StageOutcome.ACCEPTED)}),
        (AuditEvent, {**audit, "data": {"fingerprint": run.fingerprint}}),
    ]


def _thread_link(run: Run, normalized: dict[str, Any]) -> None:
    """Link a reply to the run of the nearest earlier message of its thread that we have."""
    thread: list[str] = normalized.get("thread") or []
    if not thread:
        return
    # The event keeps References then In-Reply-To: the last id is the message answered.
    run.reply_to_event_id = thread[-1]
    # In the run's scope, not its channel: a reply links to its thread whichever path
    # brought either message.
    known = dict(
        Run.objects.filter(
            identity_scope=run.identity_scope,
            event_id__in=thread,
            claims_identity=True,
            replay_of__isnull=True,
        ).values_list("event_id", "pk")
    )
    for message_id in reversed(thread):
        if message_id in known:
            run.thread_parent_id = known[message_id]
            return


def _thread_adopt(run: Run) -> None:
    """Replies that arrived before this message was seen are linked to it now."""
    replies = Run.objects.filter(
        identity_scope=run.identity_scope,
        reply_to_event_id=run.event_id,
        thread_parent__isnull=True,
    ).exclude(pk=run.pk)
    reply_ids = list(replies.values_list("pk", flat=True))
    Run.objects.filter(pk__in=reply_ids).update(thread_parent=run)
    for reply_id in reply_ids:
        record_audit(run, AuditAction.RUN_THREAD_LINKED, reply=reply_id)


def intake_replay(*, original: Run) -> Run:
    """A new run from the original's stored raw input (caller records who and why)."""
    event, _, problems = _parse_event(
        bytes(original.intake.raw),
        original.intake.content_type,
        channel_business(original.intake.channel),
    )
    if event is None:
        raise ValueError(f"run {original.pk} has no valid input to replay: {problems[0].message}")
    return _create_run(original.intake, event.normalized(), replay_of=original)


def _answer_duplicate(intake: IntakeRecord, owner: Run, new_fingerprint: str) -> IntakeResult:
    same = owner.fingerprint == new_fingerprint
    code = Outcome.IDEMPOTENT_REPLAY if same else Outcome.IDEMPOTENCY_CONFLICT
    # Recorded against the intake record; the existing run is not touched.
    action = (
        AuditAction.INTAKE_IDEMPOTENT_REPLAY if same else AuditAction.INTAKE_IDEMPOTENCY_CONFLICT
    )
    record_audit(None, action, intake=intake, existing_run=owner.pk, fingerprint=new_fingerprint)
    problems = (
        []
        if same
        else [FieldProblem(field="event_id", message="was already used for different content")]
    )
    return IntakeResult(code, intake, owner, problems)
