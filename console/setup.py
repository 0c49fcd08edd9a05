"""What a fresh install still lacks, in the order it is set up: the reads behind the setup
page (/setup/) and the home page's question "is this install set up?".

Each step is a line in words with its state and where to do it. The steps that hold the
start (teams, an active policy version, an intake channel) send an administrator from the home
page to the setup page while one is missing; the others (a secret not set, the mail server)
are listed as missing too, without holding back a console that already runs; the optional
ones (a mailbox, customers) say so. A secret is named, never its value; the mail server's
password is never shown.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from email.utils import parseaddr
from typing import Any

from django.conf import settings
from django.contrib.auth.models import Group
from django.urls import reverse
from pydantic import BaseModel

from automation.classifiers.readers import reader_words
from automation.intake.models import Customer, IntakeChannel, Mailbox
from core.egress import secret_refusal
from policy.catalogue import Catalogue, Secret
from policy.models import PolicyVersion

SMTP_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
# Where a backend other than SMTP keeps the mail it is given, in words.
KEPT_BY_BACKEND = {
    "django.core.mail.backends.filebased.EmailBackend": "written to files",
    "django.core.mail.backends.console.EmailBackend": "printed in the server's log",
    "django.core.mail.backends.locmem.EmailBackend": "kept in memory",
    "django.core.mail.backends.dummy.EmailBackend": "thrown away",
}


@dataclass(frozen=True)
class Step:
    """One line of the setup page."""

    key: str  # stable, for tests and anchors
    title: str
    done: bool
    said: str  # its state in words
    link: str | None = None  # where it is done
    link_words: str = ""
    optional: bool = False
    holds_start: bool = True  # the home page sends an administrator here while it is missing

    @property
    def missing(self) -> bool:
        return not self.done and not self.optional


def teams_url() -> str:
    return reverse("teams:list")


def _active() -> tuple[PolicyVersion | None, Catalogue | None]:
    version = PolicyVersion.objects.filter(is_active=True).first()
    return version, (version.parsed.business if version is not None else None)


def _names(names: list[str]) -> str:
    if len(names) < 6:
        return ", ".join(names)
    return f"{', '.join(names[:5])} and {len(names) - 5} more"


def approver_teams_step() -> Step:
    teams = sorted(
        Group.objects.filter(
            permissions__content_type__app_label="approvals",
            permissions__codename="decide_approvalrequest",
            user__is_active=True,  # a team nobody is in approves nothing
        )
        .distinct()
        .values_list("name", flat=True)
    )
    said = (
        f"Teams that decide approvals: {_names(teams)}."
        if teams
        else "No team with people in it may decide approvals yet: make one, give it the "
        "approver role and add people."
    )
    return Step("approver-team", "A team that approves", bool(teams), said, teams_url(), "Teams")


def route_teams_step(catalogue: Catalogue | None) -> Step:
    title = "Teams that own the routes"
    if catalogue is None:
        said = "No business is active yet: its routes name the teams that own their work."
        return Step("route-teams", title, False, said, teams_url(), "Teams")
    named = sorted({route.group for route in catalogue.routes.values()})
    found = set(Group.objects.filter(name__in=named).values_list("name", flat=True))
    lacking = [name for name in named if name not in found]
    if lacking:
        said = f"The routes name teams that do not exist: {_names(lacking)}."
        return Step("route-teams", title, False, said, teams_url(), "Teams")
    said = f"The routes' work goes to {_names(named)}."
    return Step("route-teams", title, True, said, teams_url(), "Teams")


def policy_step(version: PolicyVersion | None) -> Step:
    title = "An active policy version"
    if version is not None:
        return Step("policy", title, True, f"{version.name} decides requests.")
    if PolicyVersion.objects.exists():
        said = "There are versions, none active: simulate one and activate it."
        return Step("policy", title, False, said, reverse("policy:list"), "Policy versions")
    said = "No business is described yet: its request types, routes and effects."
    return Step("policy", title, False, said, reverse("policy:business"), "Describe the business")


def channel_step() -> Step:
    channels = list(IntakeChannel.objects.order_by("name").values_list("name", "classifier")[:6])
    title = "An intake channel"
    if not channels:
        said = "No channel takes requests in yet: add one and choose how it reads them."
        return Step("channel", title, False, said, reverse("setup:channel_new"), "Add a channel")
    said = "; ".join(f"{name} ({reader_words(reader)})" for name, reader in channels[:5])
    return Step("channel", title, True, said + ".", reverse("setup:channels"), "Intake channels")


def mailbox_step() -> Step:
    boxes = list(Mailbox.objects.select_related("channel").order_by("channel__name")[:6])
    said = (
        "; ".join(f"{box.channel.name}: {box}" for box in boxes[:5]) + "."
        if boxes
        else "Optional: only for mail taken from an IMAP mailbox; the API needs none."
    )
    return Step(
        "mailbox",
        "A mailbox",
        bool(boxes),
        said,
        reverse("setup:channels"),
        "Intake channels",
        optional=True,
        holds_start=False,
    )


def mail_server_said() -> tuple[bool, str]:
    """Whether replies can be sent, and how, in words (never the password)."""
    backend = settings.EMAIL_BACKEND
    if backend != SMTP_BACKEND:
        kept = KEPT_BY_BACKEND.get(backend, f"given to {backend}")
        return False, f"Replies are not sent: the server's mail setting has them {kept}."
    sender = parseaddr(settings.DEFAULT_FROM_EMAIL)[1]
    where = f"{settings.EMAIL_HOST}:{settings.EMAIL_PORT}"
    secure = " with STARTTLS" if settings.EMAIL_USE_TLS else ""
    who = f", signing in as {settings.EMAIL_HOST_USER}" if settings.EMAIL_HOST_USER else ""
    if sender.endswith("@localhost") or not sender:
        said = (
            f"Replies would go from {sender or 'no address'}, the shipped default: set "
            "GATEHOUSE_MAIL_FROM and the GATEHOUSE_SMTP_ settings on the server."
        )
        return False, said
    return True, f"Replies go from {sender} through {where}{secure}{who}."


def mail_server_step(catalogue: Catalogue | None) -> Step:
    replies = catalogue is not None and any(
        effect.adapter == "email_reply" for effect in catalogue.effects.values()
    )
    done, said = mail_server_said()
    if not replies:
        said = f"Optional while no effect replies by e-mail. {said}"
    return Step(
        "mail-server",
        "The mail server for replies",
        done,
        said,
        optional=not replies,
        holds_start=False,
    )


def _secrets_in(value: Any) -> Iterator[str]:
    if isinstance(value, Secret):
        yield value.secret
    elif isinstance(value, BaseModel):
        for name in type(value).model_fields:
            yield from _secrets_in(getattr(value, name))
    elif isinstance(value, dict):
        for item in value.values():
            yield from _secrets_in(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _secrets_in(item)


def catalogue_secrets(catalogue: Catalogue) -> dict[str, list[str]]:
    """Each secret the catalogue's effects name, with the labels of the effects naming it."""
    found: dict[str, list[str]] = {}
    for effect in catalogue.effects.values():
        for name in dict.fromkeys(_secrets_in(effect)):
            found.setdefault(name, []).append(effect.label)
    return found


def secret_step(name: str, effects: list[str]) -> Step:
    refusal = secret_refusal(name)
    present = bool(os.environ.get(name))
    used = f"for {_names(effects)}"
    if refusal is not None:
        said = f"Not allowed {used}: {refusal}."
    elif not present:
        said = f"Not set in the server's environment; needed {used}."
    else:
        said = f"Set in the server's environment and allowed for effects, {used}."
    return Step(
        f"secret-{name}",
        f"The secret {name}",
        refusal is None and present,
        said,
        holds_start=False,
    )


def customers_step() -> Step:
    count = Customer.objects.count()
    said = (
        f"{count} customer{'s' if count != 1 else ''} known."
        if count
        else "Optional: requests are read without knowing their senders."
    )
    link = reverse("customers:list")
    return Step(
        "customers",
        "Customers",
        bool(count),
        said,
        link,
        "Customers",
        optional=True,
        holds_start=False,
    )


def setup_steps() -> list[Step]:
    """Every step, in the order an install is set up."""
    version, catalogue = _active()
    secrets = catalogue_secrets(catalogue) if catalogue is not None else {}
    return [
        approver_teams_step(),
        route_teams_step(catalogue),
        policy_step(version),
        channel_step(),
        mailbox_step(),
        mail_server_step(catalogue),
        *(secret_step(name, effects) for name, effects in secrets.items()),
        customers_step(),
    ]


def start_needs_setup() -> bool:
    """Whether something the console cannot start without is missing (the home page asks)."""
    version, catalogue = _active()
    steps = [approver_teams_step(), route_teams_step(catalogue), policy_step(version)]
    return any(step.missing for step in steps) or not IntakeChannel.objects.exists()
