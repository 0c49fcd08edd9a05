"""Everything `make demo` prepares: roles, one user per role, an API token, the demo's policy
and sample requests, among them work waiting for every group that approves."""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import time_machine
from django.contrib.auth.models import Group, User
from django.db import transaction
from django.utils import timezone

from accounts.roles import roles_ensure
from automation.classifiers.training import classifier_train
from automation.intake.customers import customers_load_in_transaction
from automation.intake.services import (
    IntakeResult,
    api_token_create,
    channel_get_or_create,
    intake_submit,
)
from automation.models import ApiToken, ClassifierModel, Customer, IntakeChannel, Run
from devtools.fixtures import record_classifier_outcomes
from policy.models import PolicyVersion
from policy.schemas import PolicyDocument
from policy.services import (
    DEFAULT_VERSION,
    policy_ensure_defaults,
    policy_version_activate,
    policy_version_create,
)
from worker.dispatch import drain, inline

SAMPLES = Path(__file__).resolve().parent / "demo_samples.json"
DEMO_USERS = {
    "admin": [],
    "approver": ["security-approvers"],
    # Amounts over a tier's approval limit (and bank-detail changes) go to finance; an amount
    # needs two of them, so there are two.
    "finance": ["finance-approvers"],
    "finance2": ["finance-approvers"],
    "opslead": ["ops-leads"],
    "recovery": ["recovery-staff"],
    "auditor": ["auditors"],
}
# Each demo user's address: notifications and @mentions reach them, and the demo's mail is
# written to files (bin/demo: .demo/mail/), never sent.
DEMO_MAIL_DOMAIN = "gatehouse.example"


def demo_address(username: str) -> str:
    return f"{username}@{DEMO_MAIL_DOMAIN}"


@dataclass
class DemoSetup:
    passwords: dict[str, str] = field(default_factory=dict)
    token: str = ""
    samples: dict[str, str] = field(default_factory=dict)
    customers: str = ""
    policy: str = ""


def _demo_user(username: str, groups: list[str]) -> str:
    """Create or reset a demo user; returns the new password (demo only: printed once)."""
    user, _ = User.objects.get_or_create(username=username)
    password = secrets.token_urlsafe(9)
    user.set_password(password)
    user.is_staff = True
    user.is_superuser = username == "admin"
    user.email = demo_address(username)
    user.save()
    user.groups.set(Group.objects.filter(name__in=groups))
    return password


def _rotate_demo_token() -> str:
    channel = channel_get_or_create(name="api")
    with transaction.atomic(durable=True):
        ApiToken.objects.filter(name__startswith="demo-").update(is_active=False)
        _, key = api_token_create(name=f"demo-{secrets.token_hex(3)}", channel=channel)
    return key


SAMPLE_MAIL = Path(__file__).resolve().parent.parent / "tests" / "data" / "mail"
LABELLED_SAMPLES = SAMPLE_MAIL / "labels.csv"
SAMPLE_CUSTOMERS = SAMPLE_MAIL / "customers.csv"


def _registry() -> list[tuple[Any, ...]]:
    fields = ("reference", "name", "account_tier", "email_domains")
    return list(Customer.objects.order_by("reference").values_list(*fields))


def _load_sample_customers() -> str:
    """The sample mailbox's customers (enrichment looks them up). A start whose file changes
    nothing in the registry leaves no trace: a load is recorded (audited) every time it runs,
    so an unchanged one is rolled back."""
    with transaction.atomic(durable=True):
        before = _registry()
        created, updated = customers_load_in_transaction(path=SAMPLE_CUSTOMERS)
        if _registry() == before:
            transaction.set_rollback(True)
            return "already loaded"
    return f"{created} created, {updated} updated"


def _learning_loop() -> None:
    """A trained `learned` model (on the sample set's training part, when none is active),
    reading the e-mail channel in shadow: the sample mailbox then gives the comparison page
    something to show."""
    if not ClassifierModel.objects.filter(is_active=True).exists() and LABELLED_SAMPLES.exists():
        classifier_train(labels=[LABELLED_SAMPLES])
    email = channel_get_or_create(name="email")
    if "learned" not in (email.shadow_classifiers or []) and email.classifier != "learned":
        email.shadow_classifiers = [*(email.shadow_classifiers or []), "learned"]
        email.save(update_fields=["shadow_classifiers"])


# The demo's policy: the safe default and one rule it lacks, so that some work needs two
# people. default-1 asks one approver for everything; above this amount, two finance
# approvers decide (the four-eyes rule for large payments many teams add first).
DEMO_POLICY = "demo-1"
AMOUNT_LIMIT = "10000"
# The limit is in euros; an amount in another currency is converted with these example rates
# first (one unit in EUR), and one in a currency without a rate waits for a person.
DEMO_MONEY = {
    "base_currency": "EUR",
    "rates_as_of": "2026-12-01",
    "rates": {"SEK": "0.0863", "NOK": "0.0851", "DKK": "0.1341", "GBP": "1.17", "USD": "0.94"},
}
AMOUNT_APPROVAL = {
    "group": "finance-approvers",
    "approvers": 2,
    "expires_after_hours": 72,
    "escalate_after_hours": 24,
    "escalate_to": "ops-leads",
}


# The demo's internal notifications leave over HTTP for the demo receiver under /demo/,
# signed with the secret bin/demo makes for each start (by the name of the variable it is
# declared for effects under: config/dev_settings.py).
RECEIVER_EFFECT = "send_internal_notification"
RECEIVER_SIGNING_VARIABLE = "DEMO_RECEIVER_SIGNING_KEY"


def _receiver_port() -> str:
    return os.environ.get("GATEHOUSE_PORT", "8000")


def _receiver_url() -> str:
    return f"http://127.0.0.1:{_receiver_port()}/demo/receiver/{RECEIVER_EFFECT}"


def _demo_policy() -> str:
    """Make default-1 with the amount limit, and the notification sent to the demo receiver,
    the active version, once: a later start leaves whichever version a person has activated
    since (and writes nothing), unless the demo now runs on another port (then a version
    with the receiver's new address is stored and activated)."""
    url = _receiver_url()
    stored = PolicyVersion.objects.filter(name__startswith=DEMO_POLICY)
    if any(_receiver_of(version) == url for version in stored):
        return "already stored"
    name = DEMO_POLICY if not stored.exists() else f"{DEMO_POLICY}-port-{_receiver_port()}"
    default = PolicyVersion.objects.get(name=DEFAULT_VERSION).parsed
    document = default.model_dump(mode="json", exclude_none=True)
    document["version"] = name
    document["note"] = (
        f"{DEFAULT_VERSION} for the demo, with an amount limit: a request about more than "
        f"{AMOUNT_LIMIT} EUR (other currencies converted at example rates) waits for two "
        "finance approvers. Notifications go to the demo's receiver, which fails part of "
        "them on purpose."
    )
    limit = {"approval_above": AMOUNT_LIMIT}
    document["amount_limits"] = {tier: limit for tier in default.business.tier_values()}
    document["amount_approval"] = AMOUNT_APPROVAL
    document["money"] = DEMO_MONEY
    catalogue = default.business.model_dump(mode="json", exclude_none=True)
    catalogue["effects"][RECEIVER_EFFECT] = {
        **catalogue["effects"][RECEIVER_EFFECT],
        "adapter": "http",
        "http": {
            "url": url,
            "signing": {"secret": RECEIVER_SIGNING_VARIABLE},
            "max_attempts": 2,
            "deadline_seconds": 600,
        },
    }
    document["catalogue"] = catalogue
    policy_version_create(document=PolicyDocument.model_validate(document))
    policy_version_activate(name=name)
    return "stored and activated"


def _receiver_of(version: PolicyVersion) -> str | None:
    effect = version.parsed.business.effects.get(RECEIVER_EFFECT)
    return effect.http.url if effect is not None and effect.http is not None else None


def _take_in(channel: IntakeChannel, case: dict[str, Any]) -> str:
    """Submit a sample as the API would; the worker takes it from there. A sample that has
    waited since before this start (`hours_ago`) is taken in and decided back then, with the
    clock moved as the history does, so its approval request is as old as it says."""
    record_classifier_outcomes(channel, case)
    hours = case.get("hours_ago")
    if hours is None:
        return str(_submit(channel, case).code)
    back_then = timezone.now() - timedelta(hours=float(hours))
    with time_machine.travel(back_then, tick=False), inline() as queue:
        result = _submit(channel, case)
        drain(queue, limit=200)
    return str(result.code)


def _submit(channel: IntakeChannel, case: dict[str, Any]) -> IntakeResult:
    return intake_submit(
        channel=channel,
        raw=json.dumps(case["event"]).encode(),
        content_type="application/json",
        source="demo",
    )


def demo_prepare() -> DemoSetup:
    policy_ensure_defaults()
    roles_ensure()
    setup = DemoSetup(policy=_demo_policy())
    for username, groups in DEMO_USERS.items():
        setup.passwords[username] = _demo_user(username, groups)
    setup.token = _rotate_demo_token()
    setup.customers = _load_sample_customers()
    _learning_loop()
    channel = channel_get_or_create(name="demo", classifier="recorded")
    for case in json.loads(SAMPLES.read_text())["cases"]:
        event_id = str(case["event"].get("event_id", ""))
        if Run.objects.filter(channel=channel, event_id=event_id).exists():
            # Taken in on an earlier start: a second start adds nothing (a request that was
            # invalid would otherwise fail once more, as a new run, on every start).
            setup.samples[event_id] = "already taken in"
            continue
        setup.samples[event_id] = _take_in(channel, case)
    return setup
