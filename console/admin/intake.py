"""What came in and how: intake records, channels, mailboxes and API tokens (automation.intake)."""

from __future__ import annotations

import re
from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import Q, QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html

from automation.classifiers import classifier_exists
from automation.intake.services import api_tokens_revoke
from automation.models import ApiToken, IntakeChannel, IntakeRecord, Mailbox, Run
from console.admin.runs import run_match, said
from console.vocabulary import Kind
from core.admin_base import LargeTableAdmin, ReadOnlyAdminMixin
from core.http import AuthenticatedHttpRequest
from core.inputs import NumberField, parse_number

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
        named = Run.objects.filter(run_match(term)).order_by("-pk")
        intakes = list(named.values_list("intake_id", flat=True)[:INTAKE_SEARCH_RUNS])
        number = parse_number(term)
        if number is not None:
            intakes.append(number)
        return Q(pk__in=intakes) | Q(raw_sha256=term.lower())

    @admin.display(description="raw bytes (as UTF-8)")
    def raw_text(self, record: IntakeRecord) -> str:
        return format_html("<pre>{}</pre>", record.text)


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
        return said(Kind.MAILBOX_STATUS, box.status)

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
