"""The operators' view of runs: what came in, how it was read, what was decided and done."""

from __future__ import annotations

import json
import re
from typing import Any, cast

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from automation.classifiers import classifier_exists
from automation.effects.selectors import sees_effect_answers
from automation.effects.services import DELIVERABLE, effect_pause, effect_resume
from automation.intake.services import api_tokens_revoke
from automation.models import (
    ApiToken,
    AuditEvent,
    Checkpoint,
    ClassificationAttempt,
    ClassifierModel,
    Effect,
    EffectAttempt,
    EffectControl,
    IntakeChannel,
    IntakeRecord,
    Mailbox,
    Outcome,
    RecoveryKind,
    Run,
    RunComment,
    StageRecord,
    State,
    Task,
)
from automation.recovery.selectors import identifier_match
from automation.recovery.services import OPERATIONS, run_operations_for, run_replay, run_retry
from console.admin.audit import without_approval_rows
from console.vocabulary import Kind, label
from core.admin_base import (
    LargeTableAdmin,
    ReadOnlyAdminMixin,
    ReadOnlyInline,
    known_values_filter,
)
from core.errors import ServiceError
from core.http import AuthenticatedHttpRequest
from core.inputs import NumberField, parse_number
from policy.models import PolicyVersion
from policy.selectors import stored_businesses


def _routes(request: HttpRequest) -> list[str]:
    return stored_businesses().names("routes")


def _effects(request: HttpRequest) -> list[str]:
    return stored_businesses().names("effects")


def _said(kind: Kind, code: str) -> str:
    """A code in a list column as words first, the code as quiet secondary text."""
    if not code:
        return "—"
    return format_html('{} <small class="code">{}</small>', label(kind, code), code)


def _pretty(value: Any) -> str:
    return format_html("<pre>{}</pre>", json.dumps(value, indent=2, sort_keys=True))


class StageInline(ReadOnlyInline):
    model = StageRecord
    fields = ["stage", "attempt", "started_at", "duration_ms", "outcome", "error_class"]
    verbose_name_plural = "Stage timings"


class CheckpointInline(ReadOnlyInline):
    model = Checkpoint
    fields = ["sequence", "state", "source", "created_at", "versions", "data"]


class ClassificationInline(ReadOnlyInline):
    model = ClassificationAttempt
    fields = ["attempt", "classifier", "outcome", "latency_ms", "raw_output", "errors"]


class EffectInline(ReadOnlyInline):
    model = Effect
    fields = ["name", "status", "attempts", "idempotency_key", "response_ref", "delivered_at"]


ATTEMPT_FIELDS = [
    "attempt",
    "started_at",
    "duration_ms",
    "outcome",
    "status_code",
    "error_class",
    "detail",
]


class EffectAttemptInline(ReadOnlyInline):
    model = EffectAttempt
    fields = [*ATTEMPT_FIELDS]

    def get_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:  # type: ignore[override]
        # An attempt's detail is the start of the receiver's answer when it had one.
        if sees_effect_answers(request.user):
            return ATTEMPT_FIELDS
        return [name for name in ATTEMPT_FIELDS if name != "detail"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return self.get_fields(request, obj)


class CommentInline(ReadOnlyInline):
    model = RunComment
    fields = ["created_at", "author", "body", "mentions"]
    verbose_name_plural = "Comments"

    def get_queryset(self, request: HttpRequest) -> QuerySet[RunComment]:
        return super().get_queryset(request).select_related("author")  # its name on each row


class AuditInline(ReadOnlyInline):
    model = AuditEvent
    fk_name = "run"
    fields = ["created_at", "actor_label", "action", "from_state", "to_state", "data"]
    verbose_name_plural = "History"

    def get_queryset(self, request: HttpRequest) -> QuerySet[AuditEvent]:
        return without_approval_rows(request, super().get_queryset(request))


def _policy_versions(request: HttpRequest) -> list[str]:
    return list(PolicyVersion.objects.order_by("name").values_list("name", flat=True))


def _run_match(term: str) -> Q:
    """The runs a search term names: identifier_match, or a run's number."""
    match = identifier_match(term)
    number = parse_number(term)
    if number is not None:
        match |= Q(pk=number)
    return match


def _run_ids(term: str) -> QuerySet[Run]:
    """The runs a search term names, as ids for a subquery."""
    return Run.objects.filter(_run_match(term)).values("pk")


RUN_SEARCH_HELP = (
    "Exact match on a run number, event id (an e-mail's Message-ID, with or without <>), "
    "input fingerprint or customer reference. Each is an index lookup; no partial words."
)


# What the run list shows (list_display and total_ms), with the channel's name.
RUN_LIST_COLUMNS = (
    "id",
    "event_id",
    "channel__name",
    "state",
    "outcome",
    "route",
    "effect_name",
    "policy_version",
    "created_at",
    "finished_at",
)


@admin.register(Run)
class RunAdmin(ReadOnlyAdminMixin, LargeTableAdmin):
    list_display = [
        "id",
        "event_id",
        "channel",
        "state_said",
        "outcome_said",
        "route_said",
        "effect_said",
        "policy_version",
        "created_at",
        "total_ms",
    ]
    # Choices from known lists (never SELECT DISTINCT over every run). The date hierarchy
    # filters on a range of created_at (run_created_idx) and is drawn from its MIN and MAX
    # (templates/admin/automation/run/change_list.html), not by reading every run.
    date_hierarchy = "created_at"
    # Each filter's choices in words (console.vocabulary); the codes stay in the address.
    list_filter = [
        known_values_filter("state", "state", lambda r: [*State], lambda c: label(Kind.STATE, c)),
        known_values_filter(
            "outcome", "outcome", lambda r: [*Outcome], lambda c: label(Kind.OUTCOME, c)
        ),
        # The routes and effects any stored version's catalogue names (policy.selectors).
        known_values_filter("route", "route", _routes, lambda c: label(Kind.ROUTE, c)),
        known_values_filter("effect_name", "effect", _effects, lambda c: label(Kind.EFFECT, c)),
        "channel",
        known_values_filter("policy_version", "policy version", _policy_versions),
    ]
    search_fields = ["event_id"]  # shows the search box; get_search_results does the work
    search_help_text = RUN_SEARCH_HELP
    sortable_by = ["id", "event_id", "created_at"]  # each one an index
    list_select_related = ["channel"]
    list_per_page = 50
    readonly_fields = [
        "normalized_pretty",
        "classification_pretty",
        "rules_pretty",
        "raw_input",
        "effect_attempts",
    ]
    fieldsets = [
        (
            None,
            {
                "fields": [
                    "channel",
                    "identity_scope",
                    "event_id",
                    "state",
                    "outcome",
                    "failure_field",
                    "failure_detail",
                    "queue",
                    "owner",
                ]
            },
        ),
        (
            "Input",
            {
                "fields": [
                    "raw_input",
                    "normalized_pretty",
                    "fingerprint",
                    "enrichment",
                    "replay_of",
                ]
            },
        ),
        (
            "Interpretation",
            {
                "fields": [
                    "classification_pretty",
                    "category",
                    "reason_code",
                    "confidence",
                    "classify_attempts",
                    "next_attempt_at",
                ]
            },
        ),
        ("Decision", {"fields": ["route", "effect_name", "rules_pretty"]}),
        ("Delivery", {"fields": ["effect_attempts"]}),
        (
            "Versions",
            {
                "fields": [
                    "workflow_version",
                    "classifier_version",
                    "prompt_version",
                    "policy_version",
                    "version",
                ]
            },
        ),
        ("Times", {"fields": ["created_at", "updated_at", "finished_at"]}),
    ]
    inlines = [
        StageInline,
        CheckpointInline,
        ClassificationInline,
        EffectInline,
        CommentInline,
        AuditInline,
    ]
    actions = ["retry_selected", "replay_selected"]

    @admin.action(description="Retry the failed stage of the selected held runs")
    def retry_selected(
        self, request: AuthenticatedHttpRequest, queryset: QuerySet[Run]
    ) -> HttpResponse | None:
        return self._recover(request, queryset, RecoveryKind.RETRY)

    @admin.action(description="Replay the selected finished runs")
    def replay_selected(
        self, request: AuthenticatedHttpRequest, queryset: QuerySet[Run]
    ) -> HttpResponse | None:
        return self._recover(request, queryset, RecoveryKind.REPLAY)

    def _recover(
        self, request: AuthenticatedHttpRequest, queryset: QuerySet[Run], action: RecoveryKind
    ) -> HttpResponse | None:
        """Ask for the reason first (an intermediate page), then call the service per run."""
        if not request.user.has_perm("automation.recover_run"):
            raise PermissionDenied("you may not recover runs")
        reason = request.POST.get("reason", "").strip()
        if not reason:
            context = {
                **self.admin_site.each_context(request),
                "runs": queryset,
                "action": action,
                "action_name": f"{action}_selected",
                "opts": self.model._meta,
            }
            return TemplateResponse(request, "admin/automation/run/recover_reason.html", context)
        user = request.user
        done = 0
        for run in queryset:
            try:
                if action == RecoveryKind.REPLAY:
                    run_replay(run_id=run.pk, user=user, reason=reason)
                    done += 1
                else:
                    run_retry(run_id=run.pk, user=user, reason=reason)
                    done += 1
            except ServiceError as exc:
                self.message_user(request, f"run {run.pk}: {exc.message}", messages.WARNING)
        self.message_user(request, f"{action}: {done} of {queryset.count()} run(s)")
        return None

    def search_condition(self, term: str) -> Q:
        return Q(pk__in=_run_ids(term))

    def get_queryset(self, request: HttpRequest) -> QuerySet[Run]:
        runs = super().get_queryset(request)
        match = request.resolver_match
        if match is not None and match.url_name == "automation_run_changelist":
            # The list reads the columns it shows, not each run's documents.
            runs = runs.only(*RUN_LIST_COLUMNS)
        return runs

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [f.name for f in Run._meta.fields] + list(self.readonly_fields)

    def get_urls(self) -> list[URLPattern]:
        operation = path(
            "<int:run_id>/operation/<str:name>/",
            self.admin_site.admin_view(self.operation_view),
            name="automation_run_operation",
        )
        return [operation, *super().get_urls()]

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        run = Run.objects.filter(pk=object_id).first()
        # The admin lets only a signed-in member of staff this far.
        user = cast(AuthenticatedHttpRequest, request).user
        operations = run_operations_for(run=run, user=user) if run else []
        context = {**(extra_context or {}), "run_operations": operations}
        return super().change_view(request, object_id, form_url, context)

    def operation_view(
        self, request: AuthenticatedHttpRequest, run_id: int, name: str
    ) -> HttpResponse:
        """Start an operation through its service; only transitions offered on the page.

        The operation's permission is checked first: a staff user who may not start it gets a
        403 that says nothing about the run, and nothing is written on the run's record.
        """
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        operation = OPERATIONS.get(name)
        if operation is None:
            raise Http404("no such operation")
        if not (self.has_view_permission(request) and request.user.has_perm(operation.permission)):
            raise PermissionDenied(f"you need the {operation.permission} permission")
        if not Run.objects.filter(pk=run_id).exists():
            raise Http404("no such run")
        reason = request.POST.get("reason", "").strip()
        if not reason:
            self.message_user(
                request, "Give a reason: it goes on the run's record.", messages.ERROR
            )
        else:
            try:
                result = operation.service(run_id=run_id, user=request.user, reason=reason)
            except ServiceError as exc:
                self.message_user(request, f"{name}: {exc.message}", messages.ERROR)
            else:
                self.message_user(request, f"{name}: {result}", messages.SUCCESS)
        return redirect("admin:automation_run_change", run_id)

    @admin.display(description="state")
    def state_said(self, run: Run) -> str:
        return _said(Kind.STATE, run.state)

    @admin.display(description="outcome")
    def outcome_said(self, run: Run) -> str:
        return _said(Kind.OUTCOME, run.outcome)

    @admin.display(description="route")
    def route_said(self, run: Run) -> str:
        return _said(Kind.ROUTE, run.route)

    @admin.display(description="effect")
    def effect_said(self, run: Run) -> str:
        return _said(Kind.EFFECT, run.effect_name)

    @admin.display(description="total (ms)")
    def total_ms(self, run: Run) -> int | None:
        if run.finished_at is None:
            return None
        return int((run.finished_at - run.created_at).total_seconds() * 1000)

    @admin.display(description="normalized input")
    def normalized_pretty(self, run: Run) -> str:
        return _pretty(run.normalized)

    @admin.display(description="classification")
    def classification_pretty(self, run: Run) -> str:
        return _pretty(run.classification)

    @admin.display(description="rules that fired")
    def rules_pretty(self, run: Run) -> str:
        return _pretty(run.rules)

    @admin.display(description="effect attempts")
    def effect_attempts(self, run: Run) -> str:
        rows = EffectAttempt.objects.filter(effect__run=run).order_by("effect", "attempt")
        return (
            format_html_join(
                "\n",
                "<div>#{} {} · {} · {} ms · {} {}</div>",
                (
                    (
                        a.attempt,
                        a.started_at.strftime("%Y-%m-%d %H:%M:%S"),
                        a.outcome,
                        a.duration_ms,
                        a.status_code or "",
                        a.error_class,
                    )
                    for a in rows
                ),
            )
            or "—"
        )

    @admin.display(description="raw input")
    def raw_input(self, run: Run) -> str:
        return format_html(
            '<a href="../../intakerecord/{}/change/">intake #{}</a>', run.intake_id, run.intake_id
        )


INTAKE_FIELDS = (
    "channel",
    "content_type",
    "source",
    "received_at",
    "admission_error",
    "raw_text",
)


# The most intake records a search names through their runs (a customer reference may name
# thousands of runs): the newest, as the list shows them.
INTAKE_SEARCH_RUNS = 500


@admin.register(IntakeRecord)
class IntakeRecordAdmin(ReadOnlyAdminMixin, LargeTableAdmin):
    list_display = ["id", "channel", "content_type", "source", "received_at"]
    list_filter = ["channel"]
    fields = INTAKE_FIELDS
    readonly_fields = INTAKE_FIELDS
    search_fields = ["raw_sha256"]  # shows the search box; get_search_results searches
    search_help_text = (
        "Exact match on an intake number, the SHA-256 of the bytes received, or anything that "
        "names its run (see the runs' search). Index lookups only; no partial words."
    )

    def search_condition(self, term: str) -> Q:
        # The runs are read first (each identifier an index lookup), so the condition on this
        # table is two index lookups (primary key, intake_raw_sha256_idx), never a subquery
        # under OR, which PostgreSQL answers by reading every record.
        named = Run.objects.filter(_run_match(term)).order_by("-pk")
        intakes = list(named.values_list("intake_id", flat=True)[:INTAKE_SEARCH_RUNS])
        number = parse_number(term)
        if number is not None:
            intakes.append(number)
        return Q(pk__in=intakes) | Q(raw_sha256=term.lower())

    @admin.display(description="raw bytes (as UTF-8)")
    def raw_text(self, record: IntakeRecord) -> str:
        return format_html("<pre>{}</pre>", record.text)


@admin.register(Effect)
class EffectAdmin(ReadOnlyAdminMixin, LargeTableAdmin):
    list_display = ["id", "name", "status", "attempts", "run", "created_at", "delivered_at"]
    list_filter = [
        "status",
        known_values_filter("name", "effect", _effects, lambda c: label(Kind.EFFECT, c)),
    ]
    inlines = [EffectAttemptInline]
    search_fields = ["idempotency_key"]  # shows the search box; get_search_results searches
    search_help_text = (
        "Exact match on an idempotency key, or on anything that names its run (see the runs' "
        "search). Index lookups only; no partial words."
    )
    list_select_related = ["run"]

    def get_exclude(self, request: HttpRequest, obj: Any = None) -> list[str]:
        # The receiver's answer, to the people who handle deliveries only (sees_effect_answers).
        return [] if sees_effect_answers(request.user) else ["response_body"]

    def search_condition(self, term: str) -> Q:
        return Q(idempotency_key=term) | Q(run_id__in=_run_ids(term))


@admin.register(Task)
class TaskAdmin(ReadOnlyAdminMixin, LargeTableAdmin):
    # Worked on the console's Tasks page (/tasks/); the admin only lists them.
    list_display = [
        "id",
        "effect",
        "group",
        "subject",
        "run",
        "claimed_by",
        "done_at",
        "created_at",
    ]
    search_fields = ["idempotency_key"]  # shows the search box; get_search_results searches
    search_help_text = "Exact match on an idempotency key or on anything that names its run."
    list_select_related = ["run", "claimed_by"]

    def search_condition(self, term: str) -> Q:
        return Q(idempotency_key=term) | Q(run_id__in=_run_ids(term))


class IntakeChannelForm(forms.ModelForm):  # type: ignore[type-arg]
    shadow_classifiers = forms.CharField(
        required=False,
        help_text="classifiers that read every run beside the live one without acting, "
        "comma-separated (for example: learned)",
    )

    class Meta:
        model = IntakeChannel
        fields = [
            "name",
            "classifier",
            "classifier_version",
            "workflow_version",
            "prompt_version",
            "policy_version",
            "max_classifier_attempts",
            "shares_mail_identity",
            "shadow_classifiers",
            "reply_from",
            "reply_to",
        ]
        field_classes = {"max_classifier_attempts": NumberField}  # ASCII digits only

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.initial["shadow_classifiers"] = ", ".join(self.instance.shadow_classifiers or [])

    def clean_shadow_classifiers(self) -> list[str]:
        names = [n.strip() for n in self.cleaned_data["shadow_classifiers"].split(",") if n.strip()]
        unknown = sorted(name for name in set(names) if not classifier_exists(name))
        if unknown:
            raise forms.ValidationError(f"not an installed classifier: {', '.join(unknown)}")
        return list(dict.fromkeys(names))


@admin.register(IntakeChannel)
class IntakeChannelAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    form = IntakeChannelForm
    list_display = ["name", "classifier", "workflow_version", "prompt_version", "policy_version"]
    search_fields = ["name"]
    ordering = ["name"]  # pages of a list must not shift between requests

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        # Both decide a request's identity scope (Run.identity_scope): changed later, a request
        # sent again would no longer meet its first run, nor its effect key.
        return ["name", "shares_mail_identity"] if obj is not None else []

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


# --- mailboxes ------------------------------------------------------------------------------

MAILBOX_FIELDSETS: list[tuple[str, list[str]]] = [
    ("Server", ["channel", "host", "port", "security", "tls_ca_file"]),
    (
        "Sign-in",
        [
            "username",
            "auth",
            "secret_variable",
            "oauth_token_url",
            "oauth_client_id",
            "oauth_scope",
            "refresh_token_variable",
        ],
    ),
    (
        "Folders",
        ["folder", "after_taking", "processed_folder", "rejected_folder", "sent_folder"],
    ),
    ("Watching", ["use_idle", "poll_seconds"]),
    (
        "Progress (written by the watcher)",
        [
            "defined_in",
            "status",
            "watcher",
            "started_at",
            "last_contact_at",
            "uidvalidity",
            "last_uid",
            "renumbered_at",
            "day",
            "taken_today",
            "refused_today",
            "errors_today",
            "last_error",
            "last_error_at",
        ],
    ),
]
MAILBOX_PROGRESS = MAILBOX_FIELDSETS[-1][1]
MAILBOX_CONFIG = [name for _, names in MAILBOX_FIELDSETS[:-1] for name in names]
FROM_SETTINGS_WARNING = (
    "This mailbox is defined by the GATEHOUSE_MAILBOXES setting: its settings are written "
    "over at the watcher's next start, so they are changed there, not here."
)
# An environment variable's name, as GATEHOUSE_MAILBOXES takes it (imap.MailboxSettings).
VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
VARIABLE_HELP = (
    "the NAME of the environment variable (on the machine that runs mailbox_watch) that holds "
    "{what}; never the secret itself, which is not stored"
)


def _https_by_default(db_field: Any, **kwargs: Any) -> Any:
    """A URL written without its scheme (the token endpoint) is an https one."""
    if db_field.name == "oauth_token_url":
        kwargs["assume_scheme"] = "https"
    return db_field.formfield(**kwargs)


class MailboxForm(forms.ModelForm):  # type: ignore[type-arg]
    class Meta:
        model = Mailbox
        fields = MAILBOX_CONFIG
        formfield_callback = _https_by_default
        field_classes = {"port": NumberField, "poll_seconds": NumberField}  # ASCII digits only
        help_texts = {
            "secret_variable": VARIABLE_HELP.format(
                what="the password (with OAuth2: the client secret, or the access token itself "
                "when no token URL is given)"
            ),
            "refresh_token_variable": VARIABLE_HELP.format(what="the OAuth2 refresh token"),
        }

    def clean_secret_variable(self) -> str:
        return self._variable_name("secret_variable")

    def clean_refresh_token_variable(self) -> str:
        return self._variable_name("refresh_token_variable")

    def _variable_name(self, field: str) -> str:
        value = str(self.cleaned_data[field]).strip()
        if value and not VARIABLE_NAME.fullmatch(value):
            raise forms.ValidationError(
                "give the environment variable's name (letters, digits and _), not its value"
            )
        return value


@admin.register(Mailbox)
class MailboxAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """An IMAP folder a channel takes its mail from (`manage.py mailbox_watch <channel>`).

    Its settings are read when the watcher starts: a change here applies at its next start.
    What the watcher saw is read-only; a mailbox from GATEHOUSE_MAILBOXES is read-only
    altogether (the watcher writes the settings over it). Only a superuser changes one: a
    mailbox names an environment variable whose value the watcher sends to its host."""

    form = MailboxForm
    list_display = [
        "channel",
        "username",
        "host",
        "folder",
        "status_said",
        "last_contact_at",
        "taken",
    ]
    list_select_related = ["channel"]
    list_filter = ["status", "from_settings"]
    search_fields = ["channel__name", "username", "host"]
    ordering = ["channel__name"]

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        fieldsets: list[tuple[str, dict[str, Any]]] = [
            (title, {"fields": names}) for title, names in MAILBOX_FIELDSETS
        ]
        if obj is None:  # nothing was watched yet
            return fieldsets[:-1]
        if obj.from_settings:
            fieldsets[0][1]["description"] = FROM_SETTINGS_WARNING
        return fieldsets

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        if obj is None:
            return []
        # The channel decides where its mail goes: a running watcher keeps the one it has.
        config = MAILBOX_CONFIG if obj.from_settings else ["channel"]
        return [*config, *MAILBOX_PROGRESS]

    def save_model(self, request: HttpRequest, obj: Mailbox, form: Any, change: bool) -> None:
        if not change:
            obj.save()
            return
        # Only the fields of the form: the watcher writes its progress on the same row
        # meanwhile, and a full save would put back what the form was opened with.
        obj.save(update_fields=[name for name in form.fields if name in MAILBOX_CONFIG])

    def formfield_for_dbfield(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "oauth_token_url":  # as MailboxForm's own callback does
            kwargs["assume_scheme"] = "https"
        return super().formfield_for_dbfield(db_field, request, **kwargs)

    @admin.display(description="defined in")
    def defined_in(self, box: Mailbox) -> str:
        return "GATEHOUSE_MAILBOXES (settings)" if box.from_settings else "this admin"

    @admin.display(description="status", ordering="status")
    def status_said(self, box: Mailbox) -> str:
        return _said(Kind.MAILBOX_STATUS, box.status)

    @admin.display(description="taken today")
    def taken(self, box: Mailbox) -> int:
        return box.taken_today if box.day == timezone.localdate() else 0


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Tokens are issued with `manage.py issue_token`; here they can only be revoked.

    Never switched back on (a revoked key may have leaked: the partner gets a new token)
    and never deleted (runs name the token they came through)."""

    list_display = ["name", "channel", "is_active", "created_at"]
    fields = ["name", "channel", "is_active", "created_at"]
    readonly_fields = ["name", "channel", "is_active", "created_at"]
    actions = ["revoke"]

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.action(description="Revoke selected tokens", permissions=["change"])
    def revoke(self, request: AuthenticatedHttpRequest, queryset: QuerySet[ApiToken]) -> None:
        ids = list(queryset.values_list("pk", flat=True))
        revoked = api_tokens_revoke(token_ids=ids, user=request.user)
        self.message_user(request, f"{revoked} token(s) revoked")


@admin.register(EffectControl)
class EffectControlAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """Pause an effect during a downstream outage; resume it at a gentle rate."""

    list_display = ["name", "paused", "rate_per_minute", "changed_by", "changed_at", "waiting"]
    readonly_fields = ["name", "paused", "rate_per_minute", "changed_by", "changed_at"]
    actions = ["pause", "resume_slowly", "resume"]

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="deliveries waiting")
    def waiting(self, control: EffectControl) -> int:
        return Effect.objects.filter(name=control.name, status__in=DELIVERABLE).count()

    @admin.action(description="Pause deliveries", permissions=["change"])
    def pause(self, request: AuthenticatedHttpRequest, queryset: QuerySet[EffectControl]) -> None:
        done = 0
        for control in queryset:
            try:
                effect_pause(name=control.name, user=request.user)
            except ServiceError as exc:  # already paused: left as it was, nothing written
                self.message_user(request, exc.message, messages.WARNING)
            else:
                done += 1
        self.message_user(request, f"paused {done} effect(s)")

    @admin.action(description="Resume at 10 per minute", permissions=["change"])
    def resume_slowly(
        self, request: AuthenticatedHttpRequest, queryset: QuerySet[EffectControl]
    ) -> None:
        self._resume(request, queryset, 10)

    @admin.action(description="Resume at full speed", permissions=["change"])
    def resume(self, request: AuthenticatedHttpRequest, queryset: QuerySet[EffectControl]) -> None:
        self._resume(request, queryset, None)

    def _resume(
        self,
        request: AuthenticatedHttpRequest,
        queryset: QuerySet[EffectControl],
        rate: int | None,
    ) -> None:
        done = 0
        for control in queryset:
            try:
                effect_resume(name=control.name, user=request.user, rate_per_minute=rate)
            except ServiceError as exc:  # not paused: left as it was, nothing written
                self.message_user(request, exc.message, messages.WARNING)
            else:
                done += 1
        self.message_user(request, f"resumed {done} effect(s)")


@admin.register(ClassifierModel)
class ClassifierModelAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):  # type: ignore[type-arg]
    """Trained models of the learned classifier: what each was trained on and how it
    scored. `train_classifier` makes them; they never change."""

    list_display = ["version", "is_active", "trained_at", "training_size", "cv_accuracy"]
    list_filter = ["is_active"]
    ordering = ["-trained_at"]
    exclude = ["artifact"]
    readonly_fields = [
        "version",
        "checksum",
        "is_active",
        "trained_at",
        "training_size",
        "categories",
        "cv_accuracy",
        "held_out",
        "sources",
    ]
