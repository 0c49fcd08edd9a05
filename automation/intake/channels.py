"""Intake channels and their mailboxes as a person sets them up in the console: the services.

A channel's reader is one of the readers offered here (automation.classifiers.readers), its
versions stamped from the reader, never typed; its pinned policy version one that has been
active (a draft was never simulated and activated: pinned, it would decide runs unchecked).
A mailbox's secrets are the NAMES of environment variables, never their values, and never a
variable of the server's own (core.egress.SERVER_VARIABLES): the watcher sends the value to the
mailbox's host. Each refusal names the field it is about.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, transaction
from pydantic import ValidationError

from audit.models import AuditAction
from automation.classifiers.readers import reader_versions, reader_words, readers_available
from automation.conf import setting
from automation.intake.imap import MailboxSettings
from automation.intake.models import ApiToken, IntakeChannel, Mailbox
from automation.intake.services import api_token_create
from automation.runs.journal import record_audit
from core.addresses import mail_address_refusal
from core.codes import Refusal
from core.egress import SERVER_VARIABLES
from core.errors import ServiceError, field_messages
from policy.models import PolicyVersion

CHANGE_CHANNEL = "automation.change_intakechannel"
ADD_MAILBOX = "automation.add_mailbox"
CHANGE_MAILBOX = "automation.change_mailbox"
SLUG = re.compile(r"[-a-zA-Z0-9_]+")
MOST_ATTEMPTS = 10
SECRET_FIELDS = ("secret_variable", "refresh_token_variable")


class SetupRefused(ServiceError):
    """A value refused, at the field it was given in (`at`)."""

    field = ""

    def at(self, field: str) -> SetupRefused:
        self.field = field
        return self


@dataclass(frozen=True)
class ChannelSettings:
    """What a person chooses for a channel."""

    classifier: str
    policy_version: str  # empty: the version active when a run is decided
    max_classifier_attempts: int
    # Who the channel's replies are from and where answers go (empty: the server's address,
    # no Reply-To); an effect's own settings come first (automation/runs/parameters.py).
    reply_from: str = ""
    reply_to: str = ""


def _may_change_channels(user: User) -> None:
    if not user.has_perm(CHANGE_CHANNEL):
        raise PermissionDenied("you need the change_intakechannel permission")


def _check_reader(name: str, *, current: str | None) -> None:
    if name == current:
        return  # kept as it is, even if it is no longer offered here
    if name not in {reader.name for reader in readers_available()}:
        raise SetupRefused(Refusal.INVALID_SETTING, "choose one of the readers listed").at(
            "classifier"
        )


def _check_version(name: str) -> None:
    if not name:
        return
    version = PolicyVersion.objects.filter(name=name).values("is_active", "activated_at").first()
    if version is None:
        raise SetupRefused(Refusal.NO_SUCH_VERSION, f"there is no policy version {name}").at(
            "policy_version"
        )
    if not version["is_active"] and version["activated_at"] is None:
        raise SetupRefused(
            Refusal.INVALID_SETTING,
            f"{name} is a draft that was never activated: pin a version once it has been "
            "simulated and activated, or choose the active one",
        ).at("policy_version")


def _check_attempts(attempts: int) -> None:
    if not 1 <= attempts <= MOST_ATTEMPTS:
        raise SetupRefused(
            Refusal.INVALID_SETTING, f"give a number of tries from 1 to {MOST_ATTEMPTS}"
        ).at("max_classifier_attempts")


def _check(chosen: ChannelSettings, *, current: str | None) -> None:
    _check_reader(chosen.classifier, current=current)
    _check_version(chosen.policy_version)
    _check_attempts(chosen.max_classifier_attempts)
    for field in ("reply_from", "reply_to"):
        value = getattr(chosen, field)
        refusal = mail_address_refusal(value) if value else None
        if refusal is not None:
            raise SetupRefused(Refusal.INVALID_SETTING, refusal).at(field)


def _stamp(classifier: str) -> dict[str, str]:
    version, prompt_version = reader_versions(classifier)
    return {
        "classifier": classifier,
        "classifier_version": version,
        "prompt_version": prompt_version,
    }


@transaction.atomic(durable=True)
def channel_create(
    *, user: User, name: str, chosen: ChannelSettings, shares_mail_identity: bool
) -> IntakeChannel:
    """A new channel reading with the chosen reader, stamped with its versions and the
    deployment's workflow version; audited."""
    _may_change_channels(user)
    if not SLUG.fullmatch(name) or len(name) > 100:
        raise SetupRefused(
            Refusal.INVALID_SETTING,
            "a channel's name is letters, digits, - and _ (at most 100), for example claims-mail",
        ).at("name")
    _check(chosen, current=None)
    taken = SetupRefused(Refusal.NAME_TAKEN, f"there is a channel named {name} already").at("name")
    if IntakeChannel.objects.filter(name=name).exists():
        raise taken
    try:
        # Made by someone else at the same moment: the unique name refuses the second, in a
        # savepoint that leaves the service's transaction usable.
        with transaction.atomic():
            channel = IntakeChannel.objects.create(
                name=name,
                **_stamp(chosen.classifier),
                workflow_version=setting("WORKFLOW_VERSION"),
                policy_version=chosen.policy_version,
                max_classifier_attempts=chosen.max_classifier_attempts,
                shares_mail_identity=shares_mail_identity,
                reply_from=chosen.reply_from,
                reply_to=chosen.reply_to,
            )
    except IntegrityError as exc:
        raise taken from exc
    record_audit(
        None,
        AuditAction.CHANNEL_CREATED,
        actor=user,
        channel=name,
        reader=reader_words(chosen.classifier),
        classifier_version=channel.classifier_version,
        policy_version=chosen.policy_version,
        reply_from=chosen.reply_from,
        reply_to=chosen.reply_to,
    )
    return channel


@transaction.atomic(durable=True)
def channel_change(*, user: User, channel_id: int, chosen: ChannelSettings) -> IntakeChannel:
    """The channel with the chosen reader, pinned version and tries; runs already made keep
    the versions they were read with. Its name and mail identity never change (they make a
    request's identity scope: Run.identity_scope)."""
    _may_change_channels(user)
    channel = IntakeChannel.objects.select_for_update().get(pk=channel_id)
    if chosen.classifier != channel.classifier and setting("CHANNEL_CLASSIFIERS").get(channel.name):
        raise SetupRefused(
            Refusal.CONFIGURED_CLASSIFIER,
            f"GATEHOUSE_CHANNEL_CLASSIFIERS names {channel.name}'s reader: it is changed there",
        ).at("classifier")
    _check(chosen, current=channel.classifier)
    before = _described(channel)
    if chosen.classifier != channel.classifier:
        for key, value in _stamp(chosen.classifier).items():
            setattr(channel, key, value)
    channel.policy_version = chosen.policy_version
    channel.max_classifier_attempts = chosen.max_classifier_attempts
    channel.reply_from, channel.reply_to = chosen.reply_from, chosen.reply_to
    changed = ["policy_version", "max_classifier_attempts", "reply_from", "reply_to"]
    channel.save(update_fields=[*_stamp_fields(), *changed])
    record_audit(
        None,
        AuditAction.CHANNEL_CHANGED,
        actor=user,
        channel=channel.name,
        before=before,
        after=_described(channel),
    )
    return channel


def _stamp_fields() -> list[str]:
    return ["classifier", "classifier_version", "prompt_version"]


def _described(channel: IntakeChannel) -> dict[str, Any]:
    return {
        "classifier_version": channel.classifier_version,
        "policy_version": channel.policy_version,
        "max_classifier_attempts": channel.max_classifier_attempts,
        "reply_from": channel.reply_from,
        "reply_to": channel.reply_to,
    }


# --- API tokens ------------------------------------------------------------------------------

CHANGE_TOKEN = "automation.change_apitoken"  # noqa: S105 - a permission, not a secret
TOKEN_NAME_LIMIT = 100


@transaction.atomic(durable=True)
def api_token_issue(*, user: User, channel_id: int, name: str) -> tuple[ApiToken, str]:
    """A bearer token for the channel, named for the integration that uses it: the key is
    returned once (only its SHA-256 is stored) and the issue is audited, never the key."""
    if not user.has_perm(CHANGE_TOKEN):
        raise PermissionDenied("you need the change_apitoken permission")
    name = name.strip()
    if not name or len(name) > TOKEN_NAME_LIMIT or not name.isprintable():
        raise SetupRefused(
            Refusal.INVALID_SETTING,
            f"name the token for who uses it, on one line (at most {TOKEN_NAME_LIMIT}), "
            "for example claims-portal",
        ).at("name")
    channel = IntakeChannel.objects.get(pk=channel_id)
    taken = SetupRefused(Refusal.NAME_TAKEN, f"there is a token named {name} already").at("name")
    if ApiToken.objects.filter(name=name).exists():
        raise taken
    try:
        # Issued by someone else at the same moment: a savepoint, the unique name refuses it.
        with transaction.atomic():
            token, key = api_token_create(name=name, channel=channel)
    except IntegrityError as exc:
        raise taken from exc
    record_audit(None, AuditAction.API_TOKEN_ISSUED, actor=user, token=name, channel=channel.name)
    return token, key


# --- mailboxes ---------------------------------------------------------------------------------


def _mailbox_settings(values: dict[str, Any]) -> MailboxSettings:
    try:
        checked = MailboxSettings.model_validate(values)
    except ValidationError as exc:
        where, message = field_messages(exc, root="host")[0]
        field = where.split(".")[0]
        raise SetupRefused(Refusal.INVALID_SETTING, message).at(field) from exc
    for field in SECRET_FIELDS:
        name = getattr(checked, field)
        if name and SERVER_VARIABLES.fullmatch(name):
            raise SetupRefused(
                Refusal.INVALID_SETTING,
                f"{name} is a setting of the Gatehouse server itself: the watcher would send "
                "it to the mailbox's server; name a variable of the mailbox's own",
            ).at(field)
    return checked


@transaction.atomic(durable=True)
def mailbox_set(*, user: User, channel_id: int, values: dict[str, Any]) -> Mailbox:
    """The channel's mailbox with these settings (added if it has none), for its watcher's
    next start. Only the settings are written: the watcher writes its progress on the same
    row meanwhile. A mailbox of GATEHOUSE_MAILBOXES is changed there, never here."""
    # The channel's row is locked first: two people adding its mailbox at once wait for each
    # other, and the second changes the one the first added instead of failing on it.
    channel = IntakeChannel.objects.select_for_update().get(pk=channel_id)
    mailbox = Mailbox.objects.select_for_update().filter(channel=channel).first()
    if not user.has_perm(ADD_MAILBOX if mailbox is None else CHANGE_MAILBOX):
        raise PermissionDenied("a mailbox is set up by a superuser")
    if (mailbox is not None and mailbox.from_settings) or channel.name in setting("MAILBOXES"):
        raise SetupRefused(
            Refusal.CONFIGURED_IN_SETTINGS,
            f"GATEHOUSE_MAILBOXES defines {channel.name}'s mailbox: it is changed there",
        ).at("host")
    fields = _mailbox_settings(values).fields()
    if mailbox is None:
        mailbox = Mailbox.objects.create(channel=channel, **fields)
    else:
        for key, value in fields.items():
            setattr(mailbox, key, value)
        mailbox.save(update_fields=list(fields))
    record_audit(
        None,
        AuditAction.MAILBOX_SET,
        actor=user,
        channel=channel.name,
        host=mailbox.host,
        username=mailbox.username,
        secret_variable=mailbox.secret_variable,
    )
    return mailbox
