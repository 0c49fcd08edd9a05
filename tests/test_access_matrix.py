"""Who may use which URL: every URL pattern, every role, GET and POST, against one table.

The URLs are walked from the URL configuration, the admin's model pages and its actions
included, so a new page has no row in EXPECTED until someone decides who may use it, and
the coverage test fails naming it. The roles are the six sample teams with the permissions
`roles_ensure()` gives them and the staff flag the demo gives them, people without a group
(staff or not), a superuser, nobody signed in, and the two machine credentials: an intake
API token and the metrics token.

Every POST runs in a savepoint that is rolled back, so what one role did (a revoked token,
a paused effect, a decision) never changes what the next one sees. POST bodies are
empty unless a page checks the caller only after validating the form (the decision page):
the question is whether the role gets through the access check, not whether the action
succeeds.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import urlsplit

import yaml
from axes.models import AccessAttempt, AccessFailureLog, AccessLog
from django.conf import settings
from django.contrib import admin
from django.contrib.auth.models import Group, User
from django.contrib.auth.tokens import default_token_generator
from django.contrib.contenttypes.models import ContentType
from django.contrib.messages import get_messages
from django.core.cache import cache
from django.db.models import Model
from django.http import HttpResponse
from django.shortcuts import resolve_url
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from django.utils import timezone
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode
from django_q.models import OrmQ, Schedule, Task
from django_q.signing import SignedPackage

from accounts.roles import roles_ensure
from approvals.models import ApprovalDecision, ApprovalRequest
from approvals.services import approval_decide, approval_escalate
from automation.effects.services import effect_pause, effect_resume
from automation.intake.services import api_token_create
from automation.models import (
    ApiToken,
    ClassifierModel,
    ClassifierPromotion,
    ClassifierTraining,
    Customer,
    EffectControl,
    IntakeChannel,
    LabelledSet,
    LabelledSetEvaluation,
    Outcome,
    QAReview,
    RecoveryBatch,
    Run,
    Simulation,
)
from automation.models import Task as TaskRow
from automation.recovery.services import batch_create
from automation.recovery.simulation import simulation_start
from console.exports import EXPORTS
from devtools.receiver.models import Delivery, Receipt
from policy.services import DEFAULTS_DIR, parse_policy_text, policy_version_activate
from policy.services import policy_version_create as policy_create
from tests.conftest import TIMEOUT, Pipeline, decision_for, make_event, rolled_back
from tests.mailboxes import make_mailbox

# --- outcomes -----------------------------------------------------------------------------

ALLOW = "allow"  # 2xx/3xx; 400/422 too: a validation answer means the role got in
DENY = "deny"  # 403 or 404 (a refusal of another kind, 401/405/login, also satisfies it)
LOGIN = "login"  # redirected to a login page, or 401 from a machine endpoint
NOT_ALLOWED = "not_allowed"  # 405: the method is refused before anyone is looked at
ANY = "any"  # any answer but a server error: for pages that guard nothing (signing out)

# What an observed outcome may be for each expected one.
SATISFIES = {
    ALLOW: {ALLOW},
    DENY: {DENY, LOGIN, NOT_ALLOWED},
    LOGIN: {LOGIN},
    NOT_ALLOWED: {NOT_ALLOWED},
    ANY: {ALLOW, DENY, LOGIN, NOT_ALLOWED},
}

# --- roles --------------------------------------------------------------------------------

SECURITY = "security-approvers"
FINANCE = "finance-approvers"
OPS = "ops-leads"
RECOVERY = "recovery-staff"
AUDITOR = "auditors"
ADMIN = "administrators"  # the sample team with the administrator role only
NO_GROUP = "no-group"  # an account in no group, not staff
STAFF_NO_GROUP = "staff-no-group"  # staff in no group: what a fresh admin-made account is
SUPERUSER = "superuser"
ANONYMOUS = "anonymous"
INTEGRATOR = "integrator"  # not signed in; sends an intake API token
SCRAPER = "scraper"  # not signed in; sends the metrics token

GROUPS = (SECURITY, FINANCE, OPS, RECOVERY, AUDITOR, ADMIN)
ROLES = (*GROUPS, NO_GROUP, STAFF_NO_GROUP, SUPERUSER, ANONYMOUS, INTEGRATOR, SCRAPER)
SIGNED_OUT = frozenset({ANONYMOUS, INTEGRATOR, SCRAPER})

Roles = frozenset[str]
NOBODY: Roles = frozenset()
SU: Roles = frozenset({SUPERUSER})
APPROVERS: Roles = frozenset({SECURITY, FINANCE})
# The runs at large (every view_ permission of the apps): not the approvers.
READERS: Roles = frozenset({OPS, RECOVERY, AUDITOR, SUPERUSER})
RECOVERERS: Roles = frozenset({OPS, RECOVERY, SUPERUSER})  # recover_run, work_queue
LEADS: Roles = frozenset({OPS, SUPERUSER})  # channels, tokens, effects, policy, corrections
REPORTERS: Roles = frozenset({OPS, AUDITOR, SUPERUSER})  # reports.view_reports
HAS_ROLE: Roles = APPROVERS | READERS
ADMINS: Roles = frozenset({ADMIN, SUPERUSER})  # accounts.manage_teams: teams and people
STAFF: Roles = frozenset({*GROUPS, STAFF_NO_GROUP, SUPERUSER})  # the demo makes every role staff
SIGNED_IN: Roles = STAFF | {NO_GROUP}
EVERYONE: Roles = SIGNED_IN | SIGNED_OUT

# --- the table ----------------------------------------------------------------------------

Outcomes = dict[str, str]  # role -> outcome
Row = dict[str, Outcomes]  # method -> role -> outcome


def who(allowed: Iterable[str], *, refused: str = DENY) -> Outcomes:
    """ALLOW for `allowed`; the others are refused, and asked to log in when signed out."""
    permitted = set(allowed)
    return {
        role: ALLOW if role in permitted else LOGIN if role in SIGNED_OUT else refused
        for role in ROLES
    }


def same(outcome: str) -> Outcomes:
    return dict.fromkeys(ROLES, outcome)


def page(allowed: Roles) -> Row:
    """A page that only reads: GET for `allowed`, POST refused for everyone."""
    return {"GET": who(allowed), "POST": same(NOT_ALLOWED)}


def action(allowed: Roles) -> Row:
    """A POST-only endpoint."""
    return {"GET": same(NOT_ALLOWED), "POST": who(allowed)}


def form(allowed: Roles) -> Row:
    """A page that is read (GET) and submitted (POST) by the same people."""
    return {"GET": who(allowed), "POST": who(allowed)}


def admin_view(allowed: Roles, *, post_for: Roles | None = None) -> Row:
    """An admin page. Whoever is not staff is sent to the admin's login."""
    return {"GET": who(allowed), "POST": who(allowed if post_for is None else post_for)}


def get_only(allowed: Roles, *, gate: Roles) -> Row:
    """A page without POST behind a gate (signed in, staff): past the gate, POST is a 405."""
    post = {role: NOT_ALLOWED if role in gate else out for role, out in who(()).items()}
    return {"GET": who(allowed), "POST": post}


def admin_model(
    app_label_model: str,
    *,
    view: Roles,
    add: Roles = NOBODY,
    change: Roles = NOBODY,
    delete: Roles = NOBODY,
    actions: dict[str, Roles] | None = None,
    variants: dict[str, Roles] | None = None,
) -> dict[str, Row]:
    """Every page and action of one ModelAdmin.

    `variants` names the objects opened (label -> who may see that object) when who may see
    a row depends on the row. Actions are POSTed to the changelist; delete_selected is the
    site-wide one and follows `delete`.
    """
    app, model = app_label_model.split(".")
    app_model = f"{app}_{model}"
    readers = view | change
    rows: dict[str, Row] = {
        f"admin:{app_model}_changelist": admin_view(readers),
        f"admin:{app_model}_add": admin_view(add),
    }
    for label, seen_by in (variants or {"": readers}).items():
        suffix = f"[{label}]" if label else ""
        rows |= {
            f"admin:{app_model}_change{suffix}": admin_view(seen_by, post_for=change & seen_by),
            f"admin:{app_model}_history{suffix}": admin_view(seen_by),
            f"admin:{app_model}_delete{suffix}": admin_view(delete & seen_by),
            # The old change URL redirects to the change page; followed to the end.
            f"admin/{app}/{model}/<path:object_id>/{suffix}": admin_view(seen_by),
        }
    for name, allowed in {"delete_selected": delete, **(actions or {})}.items():
        rows[f"admin:{app_model}_changelist[action={name}]"] = {"POST": who(allowed)}
    return rows


# Approval requests and their decisions are seen in the admin only by those who see every
# group's requests; approvers use the console, which shows their groups' requests only.
APPROVAL_OBJECTS = {"security": READERS, "finance": READERS}

EXPECTED: dict[str, Row] = {
    # --- accounts: signing in and out, passwords --------------------------------------------
    "login": form(EVERYONE),
    # Signing out ends on the login page, whoever asked.
    "logout": {"GET": same(NOT_ALLOWED), "POST": same(LOGIN)},
    "password_change": form(SIGNED_IN),
    "password_change_done": get_only(SIGNED_IN, gate=SIGNED_IN),
    "password_reset": form(EVERYONE),
    "password_reset_done": page(EVERYONE),
    "password_reset_confirm": form(EVERYONE),
    "password_reset_complete": page(EVERYONE),
    # Company sign-in (OpenID Connect): off unless configured, as here (tests/accounts/test_oidc.py
    # drives it against a real provider).
    "oidc_authentication_init": {"GET": same(DENY), "POST": same(DENY)},
    "oidc_authentication_callback": {"GET": same(DENY), "POST": same(DENY)},
    # --- console: home, queues, runs, recovery ---------------------------------------------
    "home": form(HAS_ROLE | ADMINS),  # a redirect to the role's start page
    "queues:list": page(READERS),
    "queues:queue": page(READERS),
    "queues:batch": page(READERS),
    "queues:batch_new": action(RECOVERERS),
    "queues:batch_start": action(RECOVERERS),
    "queues:claim_many": action(RECOVERERS),
    "queues:effect_control": action(LEADS),
    # An approver reads the run of a request routed to their group, and no other.
    "runs:run[held]": page(READERS),
    "runs:run[security]": page(READERS | {SECURITY}),
    "runs:run[finance]": page(READERS | {FINANCE}),
    # Commenting: whoever reads the run, an approver too (from the request's evidence page).
    # The thread: who works on runs writes there; an auditor reads it and writes nothing.
    "runs:comment[held]": action(RECOVERERS),
    "runs:comment[security]": action(RECOVERERS | {SECURITY}),
    "runs:comment[finance]": action(RECOVERERS | {FINANCE}),
    "about:run_states": page(SIGNED_IN),
    "me:notifications": form(SIGNED_IN),  # a person's own choice of how they hear of work
    "me:work": page(SIGNED_IN),  # a person's own work: everyone has a list, if empty
    "me:decided": page(SIGNED_IN),
    "me:delegation": form(SIGNED_IN),  # their own delegations; a refused one changes nothing
    # Their own notifications: everyone has a list, if empty; marking touches only their own.
    "me:notification_list": page(SIGNED_IN),
    "me:notification_read": action(SIGNED_IN),
    # The held runs of the routes their teams own: everyone has one, if empty.
    "me:team_queue": page(SIGNED_IN),
    # A team's tasks (here the security approvers' account review): everyone has a list, if
    # empty; a task is read by its team and whoever reads every run, worked by its team and
    # whoever works queues too (an auditor reads it only). Another team's task answers 404.
    "tasks:list": page(SIGNED_IN),
    "tasks:task": page(READERS | {SECURITY}),
    "tasks:comment": action(RECOVERERS | {SECURITY}),
    "tasks:action": action(RECOVERERS | {SECURITY}),
    "runs:raw": page(READERS),
    "runs:raw_download": page(READERS),
    "runs:correct": form(LEADS),
    "runs:queue_action": action(RECOVERERS),
    "runs:recover": action(RECOVERERS),
    "runs:preview": page(RECOVERERS),
    # --- console: policy ---------------------------------------------------------------------
    "policy:list": page(READERS),
    "policy:detail": page(READERS),
    "policy:new": form(LEADS),
    "policy:business": form(LEADS),  # request types, routes and effects, saved as a draft
    "policy:business_start": page(LEADS),  # from nothing or from a shipped starter
    "policy:simulate": action(LEADS),
    "policy:activate": form(LEADS),  # GET: the confirmation with its impact
    "policy:simulation": page(READERS),
    # --- console: customers: read like runs; added, changed and loaded by the ops leads ------
    "customers:list": page(READERS),
    "customers:new": form(LEADS),
    "customers:upload": form(LEADS),
    "customers:edit": form(LEADS),
    # --- console: approvals (a request routed to another group answers 404) ------------------
    "approvals:inbox": page(HAS_ROLE),
    "approvals:evidence[security]": page(READERS | {SECURITY}),
    "approvals:evidence[finance]": page(READERS | {FINANCE}),
    "approvals:evidence[escalated]": page(READERS | {SECURITY}),
    "approvals:raw[security]": page(READERS | {SECURITY}),
    "approvals:raw[finance]": page(READERS | {FINANCE}),
    "approvals:raw[escalated]": page(READERS | {SECURITY}),
    "approvals:raw_download[security]": page(READERS | {SECURITY}),
    "approvals:raw_download[finance]": page(READERS | {FINANCE}),
    "approvals:raw_download[escalated]": page(READERS | {SECURITY}),
    # Deciding: the group the request is routed to, ops leads once it is escalated to them.
    # QA samples: anyone signed in sees the samples of their own groups (the sample here is
    # the ops leads'); whoever reconciles (work_queue) reads every sample and reconciles.
    "quality:queue": page(SIGNED_IN),
    "quality:review": form(RECOVERERS),
    "quality:reconcile_queue": page(RECOVERERS),
    "quality:reconcile": action(RECOVERERS),
    # A channel's classifiers: read like runs; promoted and rolled back by who changes channels.
    "quality:channel": page(READERS),
    "quality:comparison": page(READERS),
    "quality:promote": action(LEADS),
    "quality:rollback": action(LEADS),
    "quality:reading": page(READERS),
    "quality:reading_upload": action(LEADS),
    "quality:reading_train": action(LEADS),
    "quality:reading_training": page(READERS),
    "quality:reading_set": page(READERS),
    "quality:reading_remove": action(LEADS),
    "quality:reading_evaluate": action(LEADS),
    "quality:reading_evaluation": page(READERS),
    "approvals:decide[security]": action(frozenset({SECURITY, SUPERUSER})),
    "approvals:decide[finance]": action(frozenset({FINANCE, SUPERUSER})),
    "approvals:decide[escalated]": action(frozenset({SECURITY, OPS, SUPERUSER})),
    # Several at once: whoever decides requests (each is then checked as one by one).
    "approvals:bulk": action(frozenset({SECURITY, FINANCE, OPS, SUPERUSER})),
    # Who works on a request: a member of its group takes it; a lead gives it or takes it back.
    "approvals:hand[claim]": action(frozenset({SECURITY, SUPERUSER})),
    "approvals:hand[assign]": action(frozenset({OPS, SUPERUSER})),
    "approvals:hand[release]": action(frozenset({OPS, SUPERUSER})),
    # --- console: setting up (what the install lacks, intake channels, mailboxes) -----------
    "setup:checklist": page(LEADS),
    "setup:channels": page(LEADS),
    "setup:channel_new": form(LEADS),
    "setup:channel_edit": form(LEADS),
    # A mailbox names an environment variable whose value its watcher sends to its host: as in
    # the admin, only a superuser sets one up or changes it.
    "setup:mailbox": form(SU),
    "setup:token_new": action(LEADS),
    "setup:token_revoke": action(LEADS),
    # --- console: teams and people, for administrators (no ops lead, unless given the role) ---
    "teams:list": page(ADMINS),
    "teams:new": form(ADMINS),
    "teams:team": page(ADMINS),
    "teams:roles": action(ADMINS),
    "teams:members": action(ADMINS),
    "teams:provider_groups": action(ADMINS),
    "teams:people": page(ADMINS),
    "teams:person_new": form(ADMINS),
    "teams:person": form(ADMINS),
    "teams:deactivate": action(ADMINS),
    # --- reports and metrics -----------------------------------------------------------------
    "reports:dashboard": page(REPORTERS),
    "reports:csv": page(REPORTERS),
    "metrics": page(REPORTERS | {SCRAPER}),
    # --- machine endpoints: the session does not count, the credential does ------------------
    "api:events": {"GET": same(NOT_ALLOWED), "POST": who({INTEGRATOR}, refused=LOGIN)},
    # The API's description is public, as any API's reference is.
    "api:openapi": {"GET": same(ALLOW), "POST": same(NOT_ALLOWED)},
    # The integrators' reference: the OpenAPI document as a page, public like the document.
    "integrators:api_reference": {"GET": same(ALLOW), "POST": same(NOT_ALLOWED)},
    "api:run[own-channel]": {"GET": who({INTEGRATOR}, refused=LOGIN), "POST": same(NOT_ALLOWED)},
    # Any other address under /api/: the API's JSON 404, whoever asks.
    "api_not_found": {"GET": same(DENY), "POST": same(DENY)},
    "api:run[other-channel]": {
        "GET": who((), refused=LOGIN) | {INTEGRATOR: DENY},
        "POST": same(NOT_ALLOWED),
    },
    # The demo receiver answers only a signed request (and nothing while it is switched off).
    "receiver:receive": {"GET": same(NOT_ALLOWED), "POST": same(DENY)},
    # --- admin: the site ---------------------------------------------------------------------
    "admin:index": admin_view(STAFF),
    "admin:login": form(EVERYONE),
    "admin:logout": {"GET": same(ANY), "POST": same(ANY)},
    "admin:password_change": admin_view(STAFF),
    "admin:password_change_done": get_only(STAFF, gate=STAFF),
    "admin:jsi18n": get_only(STAFF, gate=STAFF),
    # Searching a relation's target (here a run's channel) is for whoever may view the
    # target's admin, whether or not a form offers the search.
    "admin:autocomplete": get_only(READERS, gate=STAFF),
    "admin:view_on_site": admin_view(NOBODY),  # no model has a public page
    # Any other admin URL: 404, signed in or not.
    "admin/(?P<url>.*)$": {"GET": same(DENY), "POST": same(DENY)},
    "admin:app_list[auth]": admin_view(SU),
    "admin:app_list[django_q]": admin_view(SU),
    "admin:app_list[axes]": admin_view(SU),
    "admin:app_list[receiver]": admin_view(SU),
    "admin:app_list[audit]": admin_view(READERS),
    "admin:app_list[policy]": admin_view(READERS),
    "admin:app_list[automation]": admin_view(READERS),
    "admin:app_list[approvals]": admin_view(READERS),
    # Operations on a run's admin page: whoever holds the transition's permission
    # (recover_run); the others are refused before anything is looked at.
    "admin:automation_run_operation[reconsider]": {
        "GET": who(()) | dict.fromkeys(RECOVERERS, NOT_ALLOWED),
        "POST": who(RECOVERERS),
    },
    "admin:automation_run_operation[retry_effect]": {
        "GET": who(()) | dict.fromkeys(RECOVERERS, NOT_ALLOWED),
        "POST": who(RECOVERERS),
    },
    "admin:automation_run_operation[no-such-operation]": admin_view(NOBODY),
    # --- admin: people and the task queue, for the superuser only -----------------------------
    **admin_model("auth.user", view=SU, add=SU, change=SU, delete=SU),
    "admin:auth_user_password_change": admin_view(SU),
    **admin_model("auth.group", view=SU, add=SU, change=SU, delete=SU),
    **admin_model("django_q.schedule", view=SU, add=SU, change=SU, delete=SU),
    **admin_model("django_q.success", view=SU, change=SU, delete=SU, actions={"resubmit_task": SU}),
    **admin_model("django_q.failure", view=SU, change=SU, delete=SU, actions={"resubmit_task": SU}),
    **admin_model("django_q.ormq", view=SU, change=SU, delete=SU),
    # Failed logins and lockouts (django-axes): deleting an attempt unlocks an account.
    **admin_model("axes.accessattempt", view=SU, change=SU, delete=SU),
    **admin_model("axes.accesslog", view=SU, change=SU, delete=SU),
    **admin_model("axes.accessfailurelog", view=SU, change=SU, delete=SU),
    **admin_model("receiver.receipt", view=SU),
    **admin_model("receiver.delivery", view=SU),
    # --- admin: records, read-only for everyone -------------------------------------------
    **admin_model("audit.auditevent", view=READERS),
    **admin_model("policy.policyversion", view=READERS),
    **admin_model("approvals.approvalrequest", view=READERS, variants=APPROVAL_OBJECTS),
    **admin_model("approvals.approvaldecision", view=READERS, variants=APPROVAL_OBJECTS),
    **admin_model(
        "automation.run",
        view=READERS,
        # The actions check recover_run themselves; auditors see the run list, not them.
        actions={"retry_selected": RECOVERERS, "replay_selected": RECOVERERS},
    ),
    **admin_model("automation.intakerecord", view=READERS),
    **admin_model("automation.effect", view=READERS),
    **admin_model("automation.task", view=READERS),
    **admin_model("automation.classifiermodel", view=READERS),
    # --- admin: configuration ops leads change -------------------------------------------
    **admin_model("automation.intakechannel", view=READERS, add=SU, change=LEADS),
    # A mailbox names an environment variable whose value its watcher sends to its host:
    # only a superuser sets one up or changes it.
    **admin_model("automation.mailbox", view=READERS, add=SU, change=SU, delete=SU),
    # Tokens are issued by a command and only revoked here: never added or deleted.
    **admin_model("automation.apitoken", view=READERS, change=LEADS, actions={"revoke": LEADS}),
    **admin_model(
        "automation.effectcontrol",
        view=READERS,
        change=LEADS,
        actions={"pause": LEADS, "resume_slowly": LEADS, "resume": LEADS},
    ),
}

# --- the URLs, walked from the URL configuration ------------------------------------------


@dataclass(frozen=True)
class Pattern:
    key: str  # the URL name, or the route of an unnamed pattern
    route: str
    model: type[Model] | None  # the admin model this page belongs to


def url_patterns() -> list[Pattern]:
    found: dict[str, Pattern] = {}

    def walk(entries: Iterable[Any], prefix: str, namespace: str) -> None:
        for entry in entries:
            if isinstance(entry, URLResolver):
                inner = ":".join(filter(None, [namespace, entry.namespace or ""]))
                walk(entry.url_patterns, prefix + str(entry.pattern), inner)
                continue
            assert isinstance(entry, URLPattern)
            route = prefix + str(entry.pattern)
            name = f"{namespace}:{entry.name}" if namespace and entry.name else entry.name
            model_admin = getattr(entry.callback, "model_admin", None)
            model = model_admin.model if model_admin is not None else None
            # A name given twice (the login page overrides Django's): the first one answers.
            found.setdefault(name or route, Pattern(name or route, route, model))

    walk(get_resolver().url_patterns, "", "")
    return list(found.values())


# --- what each URL is opened with ---------------------------------------------------------

Kwargs = Callable[["World"], dict[str, Any]]


@dataclass
class World:
    """The real objects the URLs open, built through the services."""

    users: dict[str, User]
    api_key: str
    runs: dict[str, Run]
    requests: dict[str, ApprovalRequest]
    decisions: dict[str, ApprovalDecision]
    draft_policy: str
    simulation: Simulation
    batch: RecoveryBatch
    reset: tuple[str, str]
    objects: dict[type[Model], Model] = field(default_factory=dict)

    def first(self, model: type[Model]) -> Model:
        row = self.objects.get(model) or model._default_manager.order_by("pk").first()
        assert row is not None, f"no {model.__name__} to open: build one in build_world()"
        return row


def _run(run: str, **extra: Any) -> Kwargs:
    return lambda w: {"run_id": w.runs[run].pk, **extra}


def _request(name: str) -> Kwargs:
    return lambda w: {"request_id": w.requests[name].pk}


PER_REQUEST = {name: _request(name) for name in ("security", "finance", "escalated")}


def _task(w: World) -> int:
    """The task the approved account review (a record effect for the security approvers)
    keeps."""
    return TaskRow.objects.get(run=w.runs["security-done"]).pk


def _partner_token(w: World) -> dict[str, Any]:
    token = ApiToken.objects.select_related("channel").get(name="partner")
    return {"name": token.channel.name, "token_id": token.pk}


def _qa_review(w: World, run: str) -> int:
    return QAReview.objects.get(run=w.runs[run]).pk


# Arguments for the URLs that take some, by URL name: label -> kwargs. A label becomes part
# of the row's key ("approvals:evidence[finance]").
VARIANTS: dict[str, dict[str, Kwargs]] = {
    "password_reset_confirm": {"": lambda w: {"uidb64": w.reset[0], "token": w.reset[1]}},
    "queues:queue": {"": lambda w: {"name": w.runs["held"].queue}},
    "queues:batch_new": {"": lambda w: {"queue_name": w.runs["held"].queue}},
    "queues:batch": {"": lambda w: {"batch_id": w.batch.pk}},
    "queues:batch_start": {"": lambda w: {"batch_id": w.batch.pk}},
    "queues:claim_many": {"": lambda w: {"name": w.runs["held"].queue}},
    "queues:effect_control": {"": lambda w: {"name": "create_follow_up", "action": "pause"}},
    "runs:run": {name: _run(name) for name in ("held", "security", "finance")},
    "tasks:task": {"": lambda w: {"task_id": _task(w)}},
    "tasks:comment": {"": lambda w: {"task_id": _task(w)}},
    "tasks:action": {"": lambda w: {"task_id": _task(w), "action": "claim"}},
    "runs:comment": {name: _run(name) for name in ("held", "security", "finance")},
    "runs:raw": {"": _run("held")},
    "runs:raw_download": {"": _run("held")},
    "runs:correct": {"": _run("held")},
    "runs:queue_action": {"": _run("held", action="claim")},
    "runs:recover": {"": _run("held", action="retry")},
    "runs:preview": {"": _run("held", action="retry")},
    "policy:detail": {"": lambda w: {"name": w.draft_policy}},
    "policy:simulate": {"": lambda w: {"name": w.draft_policy}},
    "policy:activate": {"": lambda w: {"name": w.draft_policy}},
    "policy:simulation": {"": lambda w: {"simulation_id": w.simulation.pk}},
    "customers:edit": {"": lambda w: {"customer_id": w.first(Customer).pk}},
    "approvals:evidence": PER_REQUEST,
    "approvals:raw": PER_REQUEST,
    "approvals:raw_download": PER_REQUEST,
    "approvals:decide": PER_REQUEST,
    "approvals:hand": {
        "claim": lambda w: {**_request("security")(w), "action": "claim"},
        "assign": lambda w: {**_request("security")(w), "action": "assign"},
        "release": lambda w: {**_request("finance")(w), "action": "release"},
    },
    "reports:csv": {"": lambda w: {"panel": next(iter(EXPORTS))}},
    # The ops leads' team (no administrator is in it) and a person in no team.
    **{
        f"teams:{name}": {"": lambda w: {"name": OPS}}
        for name in ("team", "roles", "members", "provider_groups")
    },
    "teams:person": {"": lambda w: {"user_id": w.users[NO_GROUP].pk}},
    "teams:deactivate": {"": lambda w: {"user_id": w.users[NO_GROUP].pk}},
    "quality:review": {"": lambda w: {"review_id": _qa_review(w, "completed")}},
    "quality:reconcile": {"": lambda w: {"review_id": _qa_review(w, "other-channel")}},
    "quality:channel": {"": lambda w: {"name": SHADOWED}},
    "setup:channel_edit": {"": lambda w: {"name": SHADOWED}},
    "setup:mailbox": {"": lambda w: {"name": SHADOWED}},
    "setup:token_new": {"": lambda w: {"name": SHADOWED}},
    "setup:token_revoke": {"": lambda w: _partner_token(w)},
    "quality:comparison": {"": lambda w: {"name": SHADOWED, "classifier": "heuristic"}},
    "quality:promote": {"": lambda w: {"name": SHADOWED, "classifier": "heuristic"}},
    "quality:rollback": {"": lambda w: {"promotion_id": ClassifierPromotion.objects.get().pk}},
    "quality:reading_set": {"": lambda w: {"set_id": LabelledSet.objects.get().pk}},
    "quality:reading_training": {
        "": lambda w: {"training_id": ClassifierTraining.objects.get().pk}
    },
    "quality:reading_remove": {"": lambda w: {"set_id": LabelledSet.objects.get().pk}},
    "quality:reading_evaluate": {"": lambda w: {"set_id": LabelledSet.objects.get().pk}},
    "quality:reading_evaluation": {
        "": lambda w: {"evaluation_id": LabelledSetEvaluation.objects.get().pk}
    },
    "api:run": {"own-channel": _run("completed"), "other-channel": _run("other-channel")},
    "receiver:receive": {"": lambda w: {"effect": "send_internal_notification"}},
    "admin:view_on_site": {
        "": lambda w: {
            "content_type_id": ContentType.objects.get_for_model(Run).pk,
            "object_id": w.runs["held"].pk,
        }
    },
    "admin:auth_user_password_change": {"": lambda w: {"id": w.users[NO_GROUP].pk}},
    "admin:automation_run_operation": {
        "reconsider": _run("security", name="reconsider"),
        "retry_effect": _run("held", name="retry_effect"),
        "no-such-operation": _run("held", name="no-such-operation"),
    },
    "admin/(?P<url>.*)$": {"": lambda w: {"url": "no-such-page/"}},
}

# Query strings for GETs that need one to mean anything.
QUERIES: dict[str, dict[str, str]] = {
    "admin:autocomplete": {"app_label": "automation", "model_name": "run", "field_name": "channel"},
}


def _decision_body(w: World, label: str) -> dict[str, Any]:
    """The full binding: the decision page checks the caller only once the form is valid."""
    request = w.requests[label]
    return {
        "decision": "approve",
        "comment": "",
        "seen_fingerprint": request.fingerprint,
        "seen_workflow_version": request.workflow_version,
        "seen_policy_version": request.policy_version,
        "seen_effect": request.effect,
    }


BODIES: dict[str, Callable[[World, str], dict[str, Any]]] = {"approvals:decide": _decision_body}
JSON_BODIES: dict[str, str] = {"api:events": "{}"}  # valid JSON, an invalid event: 422


def admin_objects(model: type[Model]) -> dict[str, Callable[[World], Model]]:
    """The rows an admin page is opened on: one per model, one per group for approvals."""
    if model is ApprovalRequest:
        return {label: (lambda w, label=label: w.requests[label]) for label in APPROVAL_OBJECTS}
    if model is ApprovalDecision:
        return {label: (lambda w, label=label: w.decisions[label]) for label in APPROVAL_OBJECTS}
    return {"": lambda w: w.first(model)}


def admin_actions(model: type[Model]) -> list[str]:
    model_admin = admin.site.get_model_admin(model)
    if model_admin.actions is None:
        return []
    names = [name for name, _ in admin.site.actions]
    names += [a if isinstance(a, str) else a.__name__ for a in model_admin.actions]
    return list(dict.fromkeys(names))


@dataclass(frozen=True)
class Probe:
    """One URL opened on one object: the row it is checked against, and how to call it."""

    row: str
    pattern: Pattern
    label: str
    kwargs: Kwargs
    methods: tuple[str, ...] = ("GET", "POST")
    action: str = ""  # an admin action, POSTed to the changelist on one row
    selected: Callable[[World], Model] | None = None
    follow: bool = False  # the admin's old change URL: judged by the page it forwards to

    def path(self, world: World) -> str:
        kwargs = self.kwargs(world)
        if self.pattern.key != self.pattern.route:
            return reverse(self.pattern.key, kwargs=kwargs)
        return "/" + re.sub(
            r"\(\?P<(\w+)>[^)]*\)|<(?:\w+:)?(\w+)>",
            lambda m: str(kwargs[m.group(1) or m.group(2)]),
            self.pattern.route,
        ).replace("^", "").replace("$", "")

    def data(self, world: World) -> dict[str, Any]:
        if self.action and self.selected:
            return {"action": self.action, "_selected_action": [self.selected(world).pk]}
        body = BODIES.get(self.pattern.key)
        return body(world, self.label) if body else {}


def _has_arguments(route: str) -> bool:
    return "<" in route


def probes_for(pattern: Pattern) -> list[Probe]:
    key, model = pattern.key, pattern.model
    variants: dict[str, Kwargs]
    if key in VARIANTS:
        variants = VARIANTS[key]
    elif key == "admin:app_list":
        labels = sorted({m._meta.app_label for m in admin.site._registry})
        variants = {label: (lambda w, label=label: {"app_label": label}) for label in labels}
    elif model is not None and "object_id" in pattern.route:
        variants = {
            label: (lambda w, pick=pick: {"object_id": pick(w).pk})
            for label, pick in admin_objects(model).items()
        }
    elif not _has_arguments(pattern.route):
        variants = {"": lambda w: {}}
    else:
        return [Probe(f"{key} (no arguments in VARIANTS)", pattern, "", lambda w: {})]
    follow = model is not None and key == pattern.route
    probes = [
        Probe(f"{key}[{label}]" if label else key, pattern, label, kwargs, follow=follow)
        for label, kwargs in variants.items()
    ]
    if model is not None and key.endswith("_changelist"):
        pick = next(iter(admin_objects(model).values()))
        probes += [
            Probe(
                f"{key}[action={name}]",
                pattern,
                "",
                lambda w: {},
                methods=("POST",),
                action=name,
                selected=pick,
            )
            for name in admin_actions(model)
        ]
    return probes


def all_probes() -> list[Probe]:
    return [probe for pattern in url_patterns() for probe in probes_for(pattern)]


# --- the world ------------------------------------------------------------------------------

METRICS_TOKEN = "matrix-metrics-token"


def make_users() -> dict[str, User]:
    """One person per role, flagged as the demo flags them (every role user is staff)."""
    roles_ensure()
    users = {}
    for name in GROUPS:
        user = User.objects.create_user(f"matrix-{name}", is_staff=True)
        user.groups.add(Group.objects.get(name=name))
        users[name] = user
    users[NO_GROUP] = User.objects.create_user("matrix-no-group")
    users[STAFF_NO_GROUP] = User.objects.create_user("matrix-staff", is_staff=True)
    users[SUPERUSER] = User.objects.create_superuser("matrix-root", "root@example.com", None)
    return users


def _policy(name: str, **approvals: dict[str, Any]) -> str:
    document = yaml.safe_load((DEFAULTS_DIR / "policy-1.yaml").read_text())
    document["version"] = name
    document["approvals"] |= approvals
    return policy_create(document=parse_policy_text(yaml.safe_dump(document)))[0].name


def _waiting(pipeline: Pipeline, event_id: str, request_type: str, effect: str) -> Run:
    event = make_event(event_id=event_id, request_type=request_type, requested_action=effect)
    run = pipeline.run(pipeline.submit(event, [decision_for(event)]))
    assert run.state == "approval_required", (event_id, run.state, run.outcome)
    return run


def _approved(pipeline: Pipeline, run: Run, user: User) -> ApprovalDecision:
    request = ApprovalRequest.objects.get(run=run, status="pending")
    with pipeline.capture():
        approval_decide(request_id=request.pk, user=user, approve=True, seen=request.binding())
    pipeline.drain()
    return ApprovalDecision.objects.get(request=request)


def build_runs(pipeline: Pipeline, users: dict[str, User]) -> dict[str, Run]:
    """Runs in every state a page cares about; security and finance each have a request."""
    finance = {"group": FINANCE, "approvers": 1}
    policy_version_activate(name=_policy("matrix-1", send_internal_notification=finance))
    done = make_event(event_id="evt-done")
    held = make_event(event_id="evt-held")
    other = Pipeline(IntakeChannel.objects.create(name="other", classifier="recorded"))
    runs = {
        "completed": pipeline.run(pipeline.submit(done, [decision_for(done)])),
        "held": pipeline.run(pipeline.submit(held, [TIMEOUT, TIMEOUT])),
        "security": _waiting(pipeline, "evt-sec", "security", "queue_account_review"),
        "escalated": _waiting(pipeline, "evt-esc", "security", "queue_account_review"),
        "finance": _waiting(pipeline, "evt-fin", "billing", "send_internal_notification"),
        "security-done": _waiting(pipeline, "evt-sec-2", "security", "queue_account_review"),
        "finance-done": _waiting(pipeline, "evt-fin-2", "billing", "send_internal_notification"),
        "other-channel": other.run(other.submit(make_event(event_id="evt-other"))),
    }
    assert runs["held"].outcome == Outcome.RETRY_EXHAUSTED and runs["held"].queue
    escalated = ApprovalRequest.objects.get(run=runs["escalated"])
    assert approval_escalate(request_id=escalated.pk, now=escalated.escalate_at)
    return runs


def build_admin_rows(users: dict[str, User]) -> None:
    """Rows of the admin's other models, which no service of ours makes."""
    now = timezone.now()
    Schedule.objects.create(name="matrix", func="math.floor")
    Task.objects.create(
        id="a" * 32, name="ok", func="math.floor", started=now, stopped=now, success=True
    )
    Task.objects.create(
        id="b" * 32, name="failed", func="math.floor", started=now, stopped=now, success=False
    )
    package = {"id": "c" * 32, "name": "queued", "func": "math.floor", "args": (), "kwargs": {}}
    OrmQ.objects.create(key="matrix", payload=SignedPackage.dumps(package), lock=now)
    Receipt.objects.create(idempotency_key="k" * 64, effect="send_internal_notification", body={})
    seen = {"user_agent": "matrix", "ip_address": "192.0.2.1", "username": "ana"}
    seen |= {"http_accept": "*/*", "path_info": "/accounts/login/"}
    AccessAttempt.objects.create(**seen, get_data="", post_data="", failures_since_start=1)
    AccessLog.objects.create(**seen)
    AccessFailureLog.objects.create(**seen)
    Delivery.objects.create(idempotency_key="k" * 64, signature="s", status=200)
    ClassifierModel.objects.create(
        version="learned-matrix", checksum="0" * 64, artifact=b"", training_size=0
    )
    Customer.objects.create(reference="CUST-40001", name="Matrix Ltd", account_tier="standard")
    labelled = LabelledSet.objects.create(
        name="matrix-set", filename="matrix.zip", raw=b"", sha256="0" * 64, uploaded_by=users[OPS]
    )
    LabelledSetEvaluation.objects.create(
        labelled_set=labelled, classifier="heuristic", requested_by=users[OPS]
    )
    ClassifierTraining.objects.create(
        channel=IntakeChannel.objects.order_by("pk").first(), requested_by=users[OPS]
    )
    effect_pause(name="create_follow_up", user=users[OPS])
    effect_resume(name="create_follow_up", user=users[OPS], rate_per_minute=None)


SHADOWED = "shadowed"


def _shadowed_channel(users: dict[str, User]) -> None:
    """A channel the heuristic reads in shadow, with one earlier promotion to roll back."""
    channel = IntakeChannel.objects.create(
        name=SHADOWED,
        classifier="recorded",
        classifier_version="recorded-classifier-1",
        workflow_version="workflow-1",
        prompt_version="prompt-1",
        shadow_classifiers=["heuristic"],
    )
    ClassifierPromotion.objects.create(
        channel=channel,
        from_classifier="heuristic",
        from_version="heuristic-3",
        to_classifier="recorded",
        to_version="recorded-classifier-1",
        evidence={},
        promoted_by=users[OPS],
    )


def _qa_samples(runs: dict[str, Run]) -> None:
    """An open QA sample of the ops leads, and one corrected that waits to be reconciled."""
    for name, status in (("completed", "open"), ("other-channel", "corrected")):
        QAReview.objects.create(
            run=runs[name],
            route="service_desk",
            group=OPS,
            policy_version="policy-1",
            classifier_version="recorded-classifier-1",
            reading={"category": "support", "effect": "create_follow_up", "confidence": 0.9},
            status=status,
            reviewed_at=timezone.now() if status == "corrected" else None,
            correction={"category": "billing", "effect": "send_internal_notification"},
        )


def build_world(pipeline: Pipeline) -> World:
    users = make_users()
    runs = build_runs(pipeline, users)
    decisions = {
        "security": _approved(pipeline, runs["security-done"], users[SECURITY]),
        "finance": _approved(pipeline, runs["finance-done"], users[FINANCE]),
    }
    requests = {
        name: ApprovalRequest.objects.get(run=runs[name], status="pending")
        for name in ("security", "finance", "escalated")
    }
    build_admin_rows(users)
    _qa_samples(runs)
    _shadowed_channel(users)
    make_mailbox("matrix-mailbox", status="idle", last_contact_at=timezone.now())
    now = timezone.now()
    draft = _policy("matrix-draft")
    _, key = api_token_create(name="partner", channel=pipeline.channel)
    nobody = users[NO_GROUP]
    return World(
        users=users,
        api_key=key,
        runs=runs,
        requests=requests,
        decisions=decisions,
        draft_policy=draft,
        simulation=simulation_start(
            version=draft, since=now - timedelta(days=1), until=now, user=None, in_worker=False
        ),
        batch=batch_create(
            action="retry",
            queue=runs["held"].queue,
            since=now - timedelta(days=1),
            until=now + timedelta(minutes=1),
            user=users[OPS],
            reason="matrix",
            in_worker=False,
        ),
        reset=(
            urlsafe_base64_encode(force_bytes(nobody.pk)),
            default_token_generator.make_token(nobody),
        ),
        objects={EffectControl: EffectControl.objects.get(name="create_follow_up")},
    )


# --- calling and judging ------------------------------------------------------------------


class Caller:
    """One role's client. Each request starts from the same session and is rolled back."""

    def __init__(self, role: str, world: World) -> None:
        credential = {INTEGRATOR: world.api_key, SCRAPER: METRICS_TOKEN}.get(role)
        headers = {"Authorization": f"Bearer {credential}"} if credential else {}
        self.client = Client(headers=headers, raise_request_exception=False)
        if role in world.users:
            self.client.force_login(world.users[role])
        self.cookies = SimpleCookie(self.client.cookies)

    def call(self, method: str, path: str, probe: Probe, world: World) -> HttpResponse:
        self.client.cookies = SimpleCookie(self.cookies)
        cache.clear()  # the login throttle counts failures in the cache
        if method == "GET":  # reading writes nothing: no savepoint to pay for
            return self._send(method, path, probe, world)
        with rolled_back():
            return self._send(method, path, probe, world)

    def _send(self, method: str, path: str, probe: Probe, world: World) -> HttpResponse:
        response = self._first(method, path, probe, world)
        if probe.follow and response.status_code in (301, 302) and not _sent_to_login(response):
            return self.client.get(response["Location"])  # type: ignore[return-value]
        return response

    def _first(self, method: str, path: str, probe: Probe, world: World) -> HttpResponse:
        if method == "GET":
            return self.client.get(path, QUERIES.get(probe.pattern.key, {}))  # type: ignore[return-value]
        json_body = JSON_BODIES.get(probe.pattern.key)
        if json_body is not None:
            return self.client.post(path, json_body, content_type="application/json")  # type: ignore[return-value]
        return self.client.post(path, probe.data(world))  # type: ignore[return-value]


LOGIN_PATHS = {resolve_url(settings.LOGIN_URL), reverse("admin:login")}
# How the admin refuses without a 403: an action not offered to this person, an object
# outside what they may see.
QUIET_REFUSALS = ("No action selected.", "doesn't exist. Perhaps it was deleted?")


def _sent_to_login(response: HttpResponse) -> bool:
    redirected = response.status_code in (301, 302, 303)
    return redirected and urlsplit(response["Location"]).path in LOGIN_PATHS


def _refused_quietly(response: HttpResponse, probe: Probe) -> bool:
    request = getattr(response, "wsgi_request", None)
    said = " ".join(str(m) for m in get_messages(request)) if request is not None else ""
    if any(text in said for text in QUIET_REFUSALS):
        return True
    # An action the person has none of: the changelist is simply shown again.
    templates = [t.name for t in getattr(response, "templates", [])]
    return bool(probe.action) and "admin/change_list.html" in templates


def observe(response: HttpResponse, probe: Probe) -> str:
    status = response.status_code
    if status >= 500:
        return f"server error {status}"
    if status == 405:
        return NOT_ALLOWED
    if status == 401 or _sent_to_login(response):
        return LOGIN
    if status in (403, 404) or _refused_quietly(response, probe):
        return DENY
    if status < 400 or status in (400, 422):
        return ALLOW
    return f"unexpected {status}"


# --- the tests ------------------------------------------------------------------------------


def test_every_url_pattern_has_a_decided_row() -> None:
    """A new page, model or action cannot ship without a row saying who may use it."""
    probes = all_probes()
    rows = {probe.row for probe in probes}
    missing = sorted(row for row in rows if row not in EXPECTED)
    assert not missing, "URLs without a row in EXPECTED:\n" + "\n".join(missing)
    stale = sorted(set(EXPECTED) - rows)
    assert not stale, "rows in EXPECTED for no URL:\n" + "\n".join(stale)
    gaps = [
        f"{probe.row} {method}"
        for probe in probes
        for method in probe.methods
        if set(EXPECTED[probe.row].get(method, {})) != set(ROLES)
    ]
    assert not gaps, "rows without an outcome for every role:\n" + "\n".join(gaps)


def mismatches(world: World, probes: Iterable[Probe]) -> Iterator[str]:
    """Every cell whose answer the table does not allow, as one readable line each."""
    callers = {role: Caller(role, world) for role in ROLES}
    for probe in probes:
        row = EXPECTED.get(probe.row)
        if row is None:
            yield f"{probe.row}: no row in EXPECTED"
            continue
        path = probe.path(world)
        for method in probe.methods:
            for role in ROLES:
                response = callers[role].call(method, path, probe, world)
                got, expected = observe(response, probe), row[method][role]
                if got not in SATISFIES[expected]:
                    yield (
                        f"{probe.row:58} {method:4} {role:18} expected {expected:11} "
                        f"got {got:11} ({response.status_code} {path})"
                    )


@contextlib.contextmanager
def refusals_unlogged() -> Iterator[None]:
    """Thousands of 403s and 404s are the point here; a server error is still logged."""
    logger = logging.getLogger("django.request")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def test_every_role_gets_exactly_the_access_the_table_gives(
    pipeline: Pipeline, settings: Any
) -> None:
    settings.GATEHOUSE = {**settings.GATEHOUSE, "METRICS_TOKEN": METRICS_TOKEN}
    # Sessions in the cookie: no session query per request, and every request starts again
    # from the role's own cookie.
    settings.SESSION_ENGINE = "django.contrib.sessions.backends.signed_cookies"
    world = build_world(pipeline)

    with refusals_unlogged():
        problems = list(mismatches(world, all_probes()))

    assert not problems, f"{len(problems)} cells differ from EXPECTED:\n" + "\n".join(problems)
