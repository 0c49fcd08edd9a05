"""Reads behind the approval pages. Visibility is decided here, once, for every page."""

from __future__ import annotations

import functools
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.apps import apps
from django.contrib.auth.models import AnonymousUser, Group, User
from django.db import connection
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.db.models.expressions import RawSQL
from django.db.models.fields.json import KeyTextTransform, KeyTransform
from django.utils import timezone
from django.utils.timesince import timesince, timeuntil

from approvals.models import ApprovalDecision, ApprovalRequest, ApprovalStatus, Delegation
from audit.models import APPROVAL_ACTIONS, NOT_A_HAND, AuditAction, AuditEvent
from core.inputs import FIRST_MOMENT, LAST_MOMENT
from core.keyset import Cursor, keyset_page

# Rows on one inbox page (keyset pages follow): enough to work through, quick to draw.
INBOX_LIMIT = 50
SCOPES = ("mine", "groups", "all")


def user_groups(user: User) -> set[str]:
    """The groups whose requests this person may see and decide: their own, and those of
    whoever delegated their approvals to them for now (one query)."""
    return set(_group_names(user).values_list("name", flat=True))


def delegations() -> QuerySet[Delegation]:
    """Every delegation whose window lies inside the calendar, which is every one given since
    delegation_give bounds it. One stored before (ending in year 10000 in UTC, or starting
    before year 1) cannot be read back by psycopg: left out here, in the database's own
    filter, it is in force for nobody instead of failing every page and task that reads it."""
    return Delegation.objects.filter(starts_at__gte=FIRST_MOMENT, ends_at__lte=LAST_MOMENT)


def delegations_now(*, now: datetime | None = None) -> QuerySet[Delegation]:
    now = now or timezone.now()
    return delegations().filter(
        starts_at__lte=now, ends_at__gt=now, ended_early_at__isnull=True, delegator__is_active=True
    )


def delegators_of(user: User) -> QuerySet[Any]:
    """Who this person decides for now, as a subquery of user ids (delegation_delegate_idx)."""
    return delegations_now().filter(delegate=user).values("delegator")


def sees_everything(user: User | AnonymousUser) -> bool:
    return user.is_superuser or user.has_perm("approvals.view_all_approvalrequests")


def visible_requests(
    user: User, *, groups: Collection[str] | None = None
) -> QuerySet[ApprovalRequest]:
    """Requests routed (or escalated) to one of the user's groups; all for auditors and leads.
    `groups` (user_groups, when the caller has read them) spares the filter its subquery."""
    requests = ApprovalRequest.objects.all()
    if sees_everything(user):
        return requests
    return requests.filter(_routed_to(_groups_of(user, groups)))


def sla_state(request: ApprovalRequest, now: datetime) -> str:
    return sla_of(request.escalate_at, now, escalated=request.escalated_at is not None)


def sla_of(due_at: datetime, now: datetime, *, escalated: bool = False) -> str:
    """due, overdue or escalated: where something waiting stands against its deadline."""
    if escalated:
        return "escalated"
    return "overdue" if now >= due_at else "due"


def sla_when(due_at: datetime, now: datetime) -> str:
    """How far the deadline is, in one unit: "in 5 hours", or "by 2 days" once past it."""
    if now < due_at:
        return f"in {timeuntil(due_at, now, depth=1)}"
    return f"by {timesince(due_at, now, depth=1)}"


# --- separation of duties -----------------------------------------------------------------
#
# Whoever acted on a run by hand (corrected, retried, resumed, replayed, re-decided, resolved,
# nudged it, imported its checkpoint), or on any run it was replayed from, never counts as its
# approver. Derived at decision time from the audit trail, where every such action is recorded
# with its actor: a replay, a late correction or an action on an ancestor is always seen, not
# only what was known when the request opened. Claiming or assigning a queue item only says who
# looks at a run (as in the reports) and leaves no audit row. Deciding an approval
# (APPROVAL_ACTIONS) is not acting on the run: an approver of an earlier request may decide.
# Nor is a comment on the run's thread (NOT_A_HAND): an approver may ask a question first.


def run_lineages(run_ids: Iterable[int]) -> dict[int, set[int]]:
    """Each run with every run it was replayed from (the whole replay_of chain), in one query.

    A recursive query, so a long chain of replays costs no more round trips than a short one.
    UNION (not UNION ALL) drops repeated rows, so even a corrupt cycle ends.
    """
    wanted = sorted(set(run_ids))
    if not wanted:
        return {}
    run = apps.get_model("automation", "Run")  # by name: approvals does not import automation
    quote = connection.ops.quote_name
    table, pk = quote(run._meta.db_table), quote(run._meta.pk.column)
    parent = quote(run._meta.get_field("replay_of").column)
    placeholders = ", ".join(["%s"] * len(wanted))
    sql = (
        f"WITH RECURSIVE lineage (start_id, run_id, parent_id) AS ("  # noqa: S608 - names only
        f" SELECT {pk}, {pk}, {parent} FROM {table} WHERE {pk} IN ({placeholders})"
        f" UNION SELECT lineage.start_id, r.{pk}, r.{parent} FROM {table} r"
        f" JOIN lineage ON r.{pk} = lineage.parent_id"
        f") SELECT start_id, run_id FROM lineage"
    )
    lineages: dict[int, set[int]] = {run_id: {run_id} for run_id in wanted}
    with connection.cursor() as cursor:
        cursor.execute(sql, wanted)
        for start_id, run_id in cursor.fetchall():
            lineages[start_id].add(run_id)
    return lineages


def _hand_actions(run_ids: Collection[int]) -> QuerySet[AuditEvent]:
    """Audit rows of people acting on these runs, decisions on their approvals and
    comments aside."""
    return (
        AuditEvent.objects.filter(run_id__in=run_ids, actor__isnull=False)
        .exclude(action__startswith=APPROVAL_ACTIONS)
        .exclude(action=NOT_A_HAND)
    )


def run_conflicted_user_ids(run_id: int) -> set[int]:
    """Everyone who acted by hand on this run or on any run it was replayed from."""
    lineage = run_lineages([run_id])[run_id]
    return set(_hand_actions(lineage).values_list("actor_id", flat=True).distinct())


def conflicted_user_ids(request: ApprovalRequest) -> set[int]:
    """Who may not approve this request: the recorded actors, and those named when it opened."""
    named = {int(pk) for pk in request.evidence.get("conflicted_user_ids", [])}
    return run_conflicted_user_ids(request.run_id) | named


def conflicted_request_ids(user: User, requests: Collection[ApprovalRequest]) -> set[int]:
    """Which of these requests the user may not approve, in two queries for any number."""
    lineages = run_lineages(r.run_id for r in requests)
    runs = set().union(*lineages.values()) if lineages else set()
    acted = set(_hand_actions(runs).filter(actor=user).values_list("run_id", flat=True))
    return {
        r.pk
        for r in requests
        if lineages[r.run_id] & acted or user.pk in r.evidence.get("conflicted_user_ids", [])
    }


def acted_runs_sql(user: User) -> RawSQL:
    """The ids of the runs this user acted on by hand, and of every replay descended from
    them: the runs whose requests the user may not approve (the rule of run_lineages seen
    from the other end, so it can sit in a WHERE clause).

    Reads the user's own hand actions from audit_hand_action_idx, whose condition the WHERE
    clause repeats (actor and run set, neither a decision nor a comment), and walks up from
    the replays only (replay_of_id IS NOT NULL: a few runs, through its index) to find those
    descended from an acted run. Walking down from the acted runs instead would make
    PostgreSQL join every run to find their replays. UNION drops repeated rows, so even a
    corrupt cycle ends."""
    run = apps.get_model("automation", "Run")
    quote = connection.ops.quote_name
    runs, audit = quote(run._meta.db_table), quote(AuditEvent._meta.db_table)
    sql = (
        f"WITH RECURSIVE acted (id) AS ("  # noqa: S608 - names only, values are parameters
        f" SELECT run_id FROM {audit} WHERE actor_id = %s"
        f" AND run_id IS NOT NULL AND NOT (action LIKE %s) AND action <> %s"
        f"), chain (id, ancestor) AS ("
        f" SELECT id, replay_of_id FROM {runs} WHERE replay_of_id IS NOT NULL"
        f" UNION SELECT chain.id, r.replay_of_id FROM chain"
        f" JOIN {runs} r ON r.id = chain.ancestor WHERE r.replay_of_id IS NOT NULL"
        f") SELECT id FROM acted"
        f" UNION SELECT id FROM chain WHERE ancestor IN (SELECT id FROM acted)"
    )
    return RawSQL(sql, (user.pk, APPROVAL_ACTIONS + "%", NOT_A_HAND))  # noqa: S611 - values are parameters


def decidable_by(
    user: User, requests: QuerySet[ApprovalRequest], *, groups: Collection[str] | None = None
) -> QuerySet[ApprovalRequest]:
    """The requests can_decide allows this user, as a filter the database applies: what the
    default inbox and its count in the navigation show, without reading a row per request."""
    if not user.has_perm("approvals.decide_approvalrequest"):
        return requests.none()
    already = ApprovalDecision.objects.filter(request=OuterRef("pk"), user=user, counted=True)
    requests = (
        requests.filter(status=ApprovalStatus.PENDING)
        .exclude(Exists(already))
        .exclude(evidence__contains={"conflicted_user_ids": [user.pk]})
        .exclude(run_id__in=acted_runs_sql(user))
    )
    if user.is_superuser:
        return requests
    return requests.filter(_routed_to(_groups_of(user, groups)))


def _groups_of(user: User, groups: Collection[str] | None) -> Collection[str] | QuerySet[Any]:
    """The names a filter matches: those given, in order (a list the planner sees), else the
    subquery."""
    return sorted(groups) if groups is not None else _group_names(user)


def _group_names(user: User) -> QuerySet[Any]:
    """The user's group names, with those of whoever they decide for now (a delegation), as a
    subquery: filters on it cost no query of their own."""
    return (
        Group.objects.filter(Q(user=user) | Q(user__in=delegators_of(user)))
        .values("name")
        .distinct()
    )


def _routed_to(groups: Collection[str] | QuerySet[Any]) -> Q:
    return Q(group__in=groups) | Q(escalate_to__in=groups, escalated_at__isnull=False)


def can_decide(
    user: User,
    request: ApprovalRequest,
    *,
    conflicted: bool | None = None,
    groups: Collection[str] | None = None,
) -> bool:
    """Whether the decide buttons make sense for this user (the service has the last word).

    `conflicted` and `groups` are passed by callers that worked them out for many requests at
    once (the groups are one query: asked once per page, not once per row).
    """
    if not request.is_pending or not user.has_perm("approvals.decide_approvalrequest"):
        return False
    if conflicted is None:
        conflicted = bool(conflicted_request_ids(user, [request]))
    if conflicted:
        return False
    if any(d.user_id == user.pk and d.counted for d in request.decisions.all()):
        return False
    if user.is_superuser:
        return True
    groups = user_groups(user) if groups is None else groups
    return bool(set(groups) & set(request.visible_groups()))


@dataclass(frozen=True)
class NotYours:
    """Why this person may not decide this pending request: the first of the service's checks
    that applies to them (console/refusals.py says it in words)."""

    NO_PERMISSION = "no_permission"  # their role reads approvals and decides none
    OTHER_GROUP = "other_group"  # routed (and not escalated) to a group they are not in
    ACTED = "acted"  # they acted by hand on this run, or on a run it replays
    DECIDED = "decided"  # their approval is counted; another approver is needed

    why: str
    at: datetime | None = None  # when they acted or decided
    action: str = ""  # ACTED: the audit action they took ('' when named only at opening)
    run_id: int | None = None  # ACTED: the run they took it on


def not_yours(user: User, request: ApprovalRequest) -> NotYours | None:
    """Why the user may not decide this pending request, or None when they may (or it is
    decided already): the reasons in the order approval_decide checks them."""
    if not request.is_pending:
        return None
    if not user.has_perm("approvals.decide_approvalrequest"):
        return NotYours(NotYours.NO_PERMISSION)
    if not user.is_superuser and not user_groups(user) & set(request.visible_groups()):
        return NotYours(NotYours.OTHER_GROUP)
    acted = _first_hand_action(user, request)
    if acted is not None:
        return acted
    mine = [d for d in request.decisions.all() if d.user_id == user.pk and d.counted]
    if mine:
        return NotYours(NotYours.DECIDED, at=mine[0].created_at)
    return None


def _first_hand_action(user: User, request: ApprovalRequest) -> NotYours | None:
    """The user's first action by hand on the request's run or a run it replays."""
    lineage = run_lineages([request.run_id])[request.run_id]
    first = _hand_actions(lineage).filter(actor=user).order_by("created_at", "pk").first()
    if first is not None:
        return NotYours(NotYours.ACTED, first.created_at, first.action, first.run_id)
    if user.pk in request.evidence.get("conflicted_user_ids", []):
        return NotYours(NotYours.ACTED)
    return None


@dataclass(frozen=True)
class InboxRow:
    request: ApprovalRequest
    age: timedelta
    sla: str
    sla_when: str
    can_decide: bool
    # The rule that asked for a person (its text and id), and the reader's reason code: the
    # rule's sentence is the reason, the code only a note beside it.
    reason: str
    reason_rule: str
    reason_code: str
    amount: str | None
    approvals_given: int
    subject: str
    sender: str  # the customer's name when known, else who sent it
    routed_to: str  # the group that decides it now
    bulk: bool = False  # this person may decide it with others, from the inbox


def _reason_rule(request: ApprovalRequest) -> dict[str, Any] | None:
    """The rule that asked for a person: the first one that did not pass (an amount over its
    limit, a risk signal), else the effect's own approval rule."""
    rules = [r for r in request.evidence.get("rules") or [] if isinstance(r, dict)]
    refusing = [r for r in rules if not r.get("passed")]
    return next(iter(refusing or rules), None)


def _amount(request: ApprovalRequest) -> str | None:
    fields = (request.evidence.get("classification") or {}).get("fields") or {}
    amount = request.effect_payload.get("amount") or (fields.get("amount") or {}).get("value")
    return str(amount) if amount else None


def pending_for(user: User, *, groups: Collection[str] | None = None) -> QuerySet[ApprovalRequest]:
    return visible_requests(user, groups=groups).filter(status=ApprovalStatus.PENDING)


@dataclass(frozen=True)
class InboxPage:
    rows: list[InboxRow]
    next: Cursor | None
    previous: Cursor | None


def inbox_requests(
    *,
    user: User,
    scope: str,
    overdue_only: bool,
    now: datetime,
    groups: Collection[str] | None = None,
) -> QuerySet[ApprovalRequest]:
    """The pending requests an inbox scope shows, as one filter (approval_inbox_idx).
    `groups`: the user's, when the caller has read them (user_groups)."""
    if scope == "mine":
        # decidable_by keeps only pending requests routed to the user's groups (a superuser's:
        # all), what the visibility filter would add again.
        requests = decidable_by(user, ApprovalRequest.objects.all(), groups=groups)
    else:
        requests = pending_for(user, groups=groups)
        if scope == "groups" and sees_everything(user) and not user.is_superuser:
            requests = requests.filter(_routed_to(_groups_of(user, groups)))
    if overdue_only:
        requests = requests.filter(escalate_at__lte=now)
    return requests


# What a row shows of its run's request, read by the database from the JSON: the run's
# large documents (the whole message, the reading, the rules) are never loaded for a list.
RUN_DOCUMENTS = ("normalized", "classification", "enrichment", "rules", "signals_reviewed")


def run_list_columns(prefix: str = "") -> dict[str, KeyTextTransform]:
    """A run's subject and sender and its customer's name, as annotations (list_subject,
    list_sender, list_sender_name, list_customer); `prefix` is the path to the run (`run__`
    from an approval request)."""
    normalized, enrichment = f"{prefix}normalized", f"{prefix}enrichment"
    return {
        "list_subject": KeyTextTransform("subject", normalized),
        "list_sender": KeyTextTransform("sender", normalized),
        "list_sender_name": KeyTextTransform("sender_name", normalized),
        "list_customer": KeyTextTransform("name", KeyTransform("customer", enrichment)),
    }


def inbox_page(
    *,
    user: User,
    scope: str,
    overdue_only: bool,
    now: datetime,
    after: Cursor | None = None,
    before: Cursor | None = None,
    newest_first: bool = False,
) -> InboxPage:
    """One page of pending requests, oldest first (or newest first), by keyset on
    (created_at, id) over approval_pending_idx, read backwards for newest first. A fixed
    number of queries whatever the number of rows."""
    groups = user_groups(user)
    requests = inbox_requests(
        user=user, scope=scope, overdue_only=overdue_only, now=now, groups=groups
    )
    requests = (
        requests.select_related("run")
        .defer(*(f"run__{name}" for name in _run_unlisted()))
        .annotate(**run_list_columns("run__"))
        .prefetch_related("decisions")
    )
    page = keyset_page(
        requests,
        time_field="created_at",
        size=INBOX_LIMIT,
        after=after,
        before=before,
        descending=newest_first,
    )
    # "mine" is decidable_by: its filter already left out every request this user may not
    # decide (separation of duties included), so there is nothing to look up again.
    conflicted = set() if scope == "mine" else conflicted_request_ids(user, page.items)
    rows = [_row(user, r, now, r.pk in conflicted, groups) for r in page.items]
    return InboxPage(rows=rows, next=page.next, previous=page.previous)


# What an inbox row shows of its run besides run_list_columns: the rest is never read.
RUN_LISTED = frozenset({"id", "event_id", "route", "state"})


@functools.cache
def _run_unlisted() -> tuple[str, ...]:
    run = ApprovalRequest._meta.get_field("run").related_model
    return tuple(f.name for f in run._meta.concrete_fields if f.name not in RUN_LISTED)  # type: ignore[union-attr]


def inbox(*, user: User, scope: str, overdue_only: bool, now: datetime) -> list[InboxRow]:
    """The first page of the inbox."""
    return inbox_page(user=user, scope=scope, overdue_only=overdue_only, now=now).rows


def _row(
    user: User, request: ApprovalRequest, now: datetime, conflicted: bool, groups: set[str]
) -> InboxRow:
    rule = _reason_rule(request)
    decidable = can_decide(user, request, conflicted=conflicted, groups=groups)
    return InboxRow(
        request=request,
        age=now - request.created_at,
        sla=sla_state(request, now),
        sla_when=sla_when(request.escalate_at, now),
        can_decide=decidable,
        bulk=decidable and bulk_allowed(request),
        reason=str(rule.get("text") or "") if rule else "",
        reason_rule=str(rule.get("rule_id") or "") if rule else "",
        reason_code=str(request.evidence.get("reason_code") or ""),
        amount=_amount(request),
        approvals_given=sum(1 for d in request.decisions.all() if d.counted and d.approve),
        subject=_listed(request, "list_subject") or str(request.effect_payload.get("subject", "")),
        sender=list_sender(request),
        routed_to=request.escalate_to if request.escalated_at else request.group,
    )


def bulk_allowed(request: ApprovalRequest) -> bool:
    """Whether the request may be decided with others from the inbox: policy allows it for
    its effect, it needs one approver, and no risk signal sent it to a person."""
    return (
        bool(request.evidence.get("bulk"))
        and request.required_approvals == 1
        and not any(
            isinstance(r, dict) and str(r.get("rule_id", "")).startswith("signal.")
            for r in request.evidence.get("rules") or []
        )
    )


def list_sender(row: Any) -> str:
    """Who a listed request is from, by run_list_columns: the customer's name when known,
    else the sender's name or address ("" for an event that names neither)."""
    names = ("list_customer", "list_sender_name", "list_sender")
    return next((_listed(row, name) for name in names if _listed(row, name)), "")


def _listed(row: Any, name: str) -> str:
    """An annotation of run_list_columns: "" when the key is missing or null."""
    return str(getattr(row, name, None) or "")


def default_scope(user: User) -> str:
    """Deciders start with what is theirs to decide; readers with everything they may see."""
    return "mine" if user.has_perm("approvals.decide_approvalrequest") else "all"


def inbox_count(user: User, now: datetime, *, limit: int | None = None) -> int:
    """How many requests the default inbox holds (all its pages): the same filter as the
    page, counted by the database in one query, so the navigation and the page agree. With
    `limit`, the count stops there (the database stops reading at that many rows)."""
    scope = default_scope(user)
    requests = inbox_requests(user=user, scope=scope, overdue_only=False, now=now)
    return (requests[:limit] if limit is not None else requests).count()


def request_for(user: User, request_id: int) -> ApprovalRequest | None:
    return (
        visible_requests(user)
        .select_related("run", "run__intake", "run__channel", "assignee")
        .prefetch_related("decisions__user", "decisions__on_behalf_of")
        .filter(pk=request_id)
        .first()
    )


def highlight(text: str, phrases: list[str]) -> list[tuple[str, bool]]:
    """Split text into (piece, highlighted) so a template can mark sources, escaped as usual."""
    wanted = sorted({p for p in phrases if p and p in text}, key=len, reverse=True)
    if not wanted:
        return [(text, False)]
    pattern = re.compile("|".join(re.escape(p) for p in wanted))
    pieces: list[tuple[str, bool]] = []
    position = 0
    for match in pattern.finditer(text):
        if match.start() > position:
            pieces.append((text[position : match.start()], False))
        pieces.append((match.group(0), True))
        position = match.end()
    if position < len(text):
        pieces.append((text[position:], False))
    return pieces


def evidence(request: ApprovalRequest) -> dict[str, Any]:
    """What the evidence page shows, read from the request's snapshot and its run."""
    run = request.run
    classification = request.evidence.get("classification") or {}
    fields = classification.get("fields") or {}
    sources = [f.get("source") or "" for f in fields.values()]
    normalized = run.normalized or {}
    attachments = []
    for attachment in normalized.get("attachments") or []:
        text = highlight(attachment.get("text", ""), sources) if attachment.get("text") else []
        marked = {**attachment, "marked": any(flag for _, flag in text)}
        attachments.append((marked, text))
    enrichment = run.enrichment or {}
    customer = enrichment.get("customer") or {}
    return {
        # What the request is about, for its title: the subject, else the customer, else the
        # request's own id.
        "title_subject": normalized.get("subject") or customer.get("name") or run.event_id,
        "mail": normalized if normalized.get("source") == "email" else None,
        "attachments": attachments,
        "customer": enrichment.get("customer"),
        "customer_matched_by": enrichment.get("customer_matched_by"),
        "account_tier": enrichment.get("account_tier"),
        "fields": sorted(fields.items()),
        "subject": highlight(normalized.get("subject", ""), sources),
        "body": highlight(normalized.get("body", ""), sources),
        "classification": classification,
        "required_by": request.evidence.get("rules") or [],
        "all_rules": run.rules,
        "versions": request.evidence.get("versions") or {},
        "stages": list(run.stages.all()),
        "history": list(run.audit_events.select_related("actor")),
        "decisions": list(request.decisions.all()),
        "earlier_requests": list(
            run.approvals.exclude(pk=request.pk).prefetch_related("decisions__user")
        ),
    }


def assignable_people(request: ApprovalRequest) -> list[User]:
    """Who a lead may give the request to: the active members of its groups who did not act
    on its run (two queries)."""
    conflicted = conflicted_user_ids(request)
    people = (
        User.objects.filter(is_active=True, groups__name__in=request.visible_groups())
        .exclude(pk__in=conflicted)
        .distinct()
        .order_by("username")
    )
    return list(people[:200])


# --- a person's own work --------------------------------------------------------------------


def my_approvals(user: User) -> QuerySet[ApprovalRequest]:
    """The pending requests given to this person, and those waiting for their groups that
    nobody holds (one held by a colleague is theirs to decide)."""
    return ApprovalRequest.objects.filter(status=ApprovalStatus.PENDING).filter(
        Q(assignee=user) | (Q(assignee__isnull=True) & _routed_to(_group_names(user)))
    )


def my_decisions(user: User) -> QuerySet[ApprovalDecision]:
    """What this person decided, with the binding they saw (approval_decision_user_idx)."""
    return ApprovalDecision.objects.filter(user=user).select_related("request", "request__run")


def delegates_for(user: User) -> list[User]:
    """Who this person may let decide their approvals: anyone else active who decides
    approvals (by a role group's permission)."""
    deciders = Group.objects.filter(permissions__codename="decide_approvalrequest")
    return list(
        User.objects.filter(is_active=True, groups__in=deciders)
        .exclude(pk=user.pk)
        .distinct()
        .order_by("username")[:500]
    )


def delegations_touching(request: ApprovalRequest) -> list[Delegation]:
    """The delegations in force now from members of the request's groups: shown on it."""
    return list(
        delegations_now()
        .filter(delegator__groups__name__in=request.visible_groups())
        .select_related("delegator", "delegate")
        .distinct()
    )


@dataclass(frozen=True)
class SentBack:
    """Who sent a run's request back, and why: what the run shows while it waits for a
    correction."""

    by: str
    reason: str
    request_id: int


def sent_back(run_id: int) -> SentBack | None:
    """The run's latest request when it was sent back (None otherwise), with who did it."""
    request = ApprovalRequest.objects.filter(run_id=run_id).order_by("-created_at", "-pk").first()
    if request is None or request.status != ApprovalStatus.SENT_BACK:
        return None
    event = (
        AuditEvent.objects.filter(approval=request, action=AuditAction.APPROVAL_SENT_BACK)
        .order_by("-created_at")
        .first()
    )
    by = event.actor_label if event is not None else ""
    return SentBack(by=by, reason=request.status_reason, request_id=request.pk)
