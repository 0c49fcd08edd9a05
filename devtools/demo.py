"""Everything `make demo` prepares: roles, one user per role, an API token, sample requests."""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.contrib.auth.models import Group, User
from django.db import transaction

from automation import services
from automation.learning import classifier_train
from automation.models import ApiToken, ClassifierModel, Customer, Run
from automation.roles import roles_ensure
from automation.services.customers import customers_load_in_transaction
from devtools.fixtures import record_classifier_outcomes
from policy.services import policy_ensure_defaults

SAMPLES = Path(__file__).resolve().parent / "demo_samples.json"
DEMO_USERS = {
    "admin": [],
    "approver": ["security-approvers"],
    # Amounts over a tier's approval limit (and bank-detail changes) go to finance.
    "finance": ["finance-approvers"],
    "opslead": ["ops-leads"],
    "recovery": ["recovery-staff"],
    "auditor": ["auditors"],
}


@dataclass
class DemoSetup:
    passwords: dict[str, str] = field(default_factory=dict)
    token: str = ""
    samples: dict[str, str] = field(default_factory=dict)
    customers: str = ""


def _demo_user(username: str, groups: list[str]) -> str:
    """Create or reset a demo user; returns the new password (demo only: printed once)."""
    user, _ = User.objects.get_or_create(username=username)
    password = secrets.token_urlsafe(9)
    user.set_password(password)
    user.is_staff = True
    user.is_superuser = username == "admin"
    user.save()
    user.groups.set(Group.objects.filter(name__in=groups))
    return password


def _rotate_demo_token() -> str:
    channel = services.channel_get_or_create(name="api")
    with transaction.atomic(durable=True):
        ApiToken.objects.filter(name__startswith="demo-").update(is_active=False)
        _, key = services.api_token_create(name=f"demo-{secrets.token_hex(3)}", channel=channel)
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
    email = services.channel_get_or_create(name="email")
    if "learned" not in (email.shadow_classifiers or []) and email.classifier != "learned":
        email.shadow_classifiers = [*(email.shadow_classifiers or []), "learned"]
        email.save(update_fields=["shadow_classifiers"])


def demo_prepare() -> DemoSetup:
    policy_ensure_defaults()
    roles_ensure()
    setup = DemoSetup()
    for username, groups in DEMO_USERS.items():
        setup.passwords[username] = _demo_user(username, groups)
    setup.token = _rotate_demo_token()
    setup.customers = _load_sample_customers()
    _learning_loop()
    channel = services.channel_get_or_create(name="demo", classifier="recorded")
    for case in json.loads(SAMPLES.read_text())["cases"]:
        event_id = str(case["event"].get("event_id", ""))
        if Run.objects.filter(channel=channel, event_id=event_id).exists():
            # Taken in on an earlier start: a second start adds nothing (a request that was
            # invalid would otherwise fail once more, as a new run, on every start).
            setup.samples[event_id] = "already taken in"
            continue
        record_classifier_outcomes(channel, case)
        result = services.intake_submit(
            channel=channel,
            raw=json.dumps(case["event"]).encode(),
            content_type="application/json",
            source="demo",
        )
        setup.samples[case["event"]["event_id"]] = str(result.code)
    return setup
