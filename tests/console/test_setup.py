"""The setup page: on an empty install it lists, in order, what is missing with where to do
it; once a business of the tests' own (an insurer's claims desk) is set up, nothing. The
home page sends an administrator there while the install cannot start, and not after. A
secret is named with its state, never its value; the mail server's password never shows."""

from __future__ import annotations

import copy
import html
import re
from typing import Any

import pytest
import yaml
from django.contrib.auth.models import Group, User
from django.db.models import QuerySet
from django.test import Client
from django.urls import reverse

from accounts.roles import roles_ensure
from automation.intake.models import Customer, IntakeChannel
from policy.services import parse_policy_text, policy_version_activate, policy_version_create
from tests.approvals.claims import CLAIMS, claims_channel
from tests.catalogues import email_reply_effect

SETUP = reverse("setup:checklist")
DESK_TOKEN = "DESK_WEBHOOK_TOKEN"
TOKEN_VALUE = "desk-token-9f2c41"
MAIL_PASSWORD = "smtp-pass-77aa"
SMTP = {
    "EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend",
    "EMAIL_HOST": "smtp.insurer.example",
    "EMAIL_PORT": 587,
    "EMAIL_USE_TLS": True,
    "EMAIL_HOST_USER": "claims@insurer.example",
    "EMAIL_HOST_PASSWORD": MAIL_PASSWORD,
    "DEFAULT_FROM_EMAIL": "Claims desk <claims@insurer.example>",
}


def claims_with_effects() -> dict[str, Any]:
    """The claims desk, telling its claims system over HTTP with a token by name, and
    answering the sender by e-mail."""
    document = copy.deepcopy(CLAIMS)
    document["version"] = "claims-2"
    document["catalogue"]["effects"] |= {
        "notify_claims_system": {
            "label": "Tell the claims system",
            "description": "A claim opened in the claims system.",
            "adapter": "http",
            "http": {
                "url": "http://127.0.0.1:9/claims",
                "headers": {"Authorization": {"secret": DESK_TOKEN}},
            },
        },
        "acknowledge": {
            "label": "Acknowledge the claim",
            "description": "Tells the sender the claim is in hand.",
            **email_reply_effect({"en": {"subject": "Your claim", "body": "It is in hand."}}),
        },
    }
    return document


def deciders() -> QuerySet[Group]:
    return Group.objects.filter(permissions__codename="decide_approvalrequest").distinct()


def set_up_claims_desk() -> None:
    claims_channel()
    # Someone in each team that approves: a team nobody is in approves nothing.
    clara = User.objects.create_user("clara", "clara@insurer.example")
    clara.groups.add(*deciders())
    version, _ = policy_version_create(
        document=parse_policy_text(yaml.safe_dump(claims_with_effects()))
    )
    policy_version_activate(name=version.name)


def client_of(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def root(db: None) -> Client:
    return client_of(User.objects.create_superuser("root", "root@insurer.example", None))


def states(page: str) -> dict[str, str]:
    """Each step's key and its state as the page says it."""
    return dict(re.findall(r'data-testid="state-([\w-]+)">(\w+)<', page))


def step_text(page: str, key: str) -> str:
    found = re.search(rf'<li data-testid="step-{re.escape(key)}".*?</li>', page, re.DOTALL)
    assert found is not None, key
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", found.group(0))).strip())


# --- an empty install ----------------------------------------------------------------------------


def test_an_empty_install_lists_what_is_missing_in_order_with_where_to_do_it(root: Client) -> None:
    page = root.get(SETUP).content.decode()

    assert list(states(page).items()) == [
        ("approver-team", "Missing"),
        ("route-teams", "Missing"),
        ("policy", "Missing"),
        ("channel", "Missing"),
        ("mailbox", "Optional"),
        ("mail-server", "Optional"),
        ("customers", "Optional"),
    ]
    assert "4 things still missing" in page
    assert f'href="{reverse("teams:list")}" data-testid="link-approver-team"' in page
    assert f'href="{reverse("customers:list")}" data-testid="link-customers"' in page
    assert f'href="{reverse("policy:business")}" data-testid="link-policy"' in page
    assert f'href="{reverse("setup:channel_new")}" data-testid="link-channel"' in page
    assert "the API needs none" in step_text(page, "mailbox")
    assert "Replies are not sent" in step_text(page, "mail-server")  # the tests keep mail


def test_the_home_page_sends_an_administrator_to_setting_up_on_an_empty_install(
    root: Client,
) -> None:
    response = root.get(reverse("home"))

    assert response.status_code == 302 and response["Location"] == SETUP


def test_an_ops_lead_is_sent_there_too_and_an_approver_neither_sent_nor_let_in(db: None) -> None:
    roles_ensure()
    lead = User.objects.create_user("lena")
    lead.groups.add(Group.objects.get(name="ops-leads"))
    approver = User.objects.create_user("ana")
    approver.groups.add(Group.objects.get(name="security-approvers"))

    assert client_of(lead).get(reverse("home"))["Location"] == SETUP
    assert client_of(approver).get(reverse("home"))["Location"] == reverse("approvals:inbox")
    assert client_of(approver).get(SETUP).status_code == 403


# --- set up --------------------------------------------------------------------------------------


def test_once_set_up_nothing_is_missing_and_home_leads_to_the_work(
    root: Client, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_up_claims_desk()
    monkeypatch.setenv(DESK_TOKEN, TOKEN_VALUE)
    for name, value in SMTP.items():
        setattr(settings, name, value)
    Customer.objects.create(reference="POL-100234", name="Northway Logistics", account_tier="x")

    page = root.get(SETUP).content.decode()

    assert "Nothing is missing" in page
    assert states(page) == {
        "approver-team": "Done",
        "route-teams": "Done",
        "policy": "Done",
        "channel": "Done",
        "mailbox": "Optional",  # the claims desk takes its mail through the API
        "mail-server": "Done",
        f"secret-{DESK_TOKEN}": "Done",
        "customers": "Done",
    }
    assert "claims-desk" in step_text(page, "route-teams")
    assert "payments-desk" in step_text(page, "route-teams")
    assert "claims-2 decides requests" in step_text(page, "policy")
    channel = IntakeChannel.objects.get()
    assert f"{channel.name} (Recorded readings" in step_text(page, "channel")
    assert "claims@insurer.example through smtp.insurer.example:587" in page
    assert TOKEN_VALUE not in page and MAIL_PASSWORD not in page
    assert root.get(reverse("home"))["Location"] == reverse("queues:list")


def test_the_mailbox_is_optional_and_counted_done_once_there(
    root: Client, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.mailboxes import make_mailbox

    set_up_claims_desk()
    monkeypatch.setenv(DESK_TOKEN, TOKEN_VALUE)
    for name, value in SMTP.items():
        setattr(settings, name, value)
    assert states(root.get(SETUP).content.decode())["mailbox"] == "Optional"

    make_mailbox("claims-imap")

    page = root.get(SETUP).content.decode()
    assert states(page)["mailbox"] == "Done"
    assert "claims-imap: " in step_text(page, "mailbox")


# --- secrets and the mail server -----------------------------------------------------------------


def test_a_secret_not_set_is_named_missing_without_a_value(
    root: Client, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_up_claims_desk()
    monkeypatch.delenv(DESK_TOKEN, raising=False)

    page = root.get(SETUP).content.decode()

    assert states(page)[f"secret-{DESK_TOKEN}"] == "Missing"
    said = step_text(page, f"secret-{DESK_TOKEN}")
    assert f"The secret {DESK_TOKEN}" in said
    assert "Not set in the server's environment; needed for Tell the claims system" in said
    # A secret missing never holds the console back: the business already runs without it.
    assert root.get(reverse("home"))["Location"] == reverse("queues:list")


def test_a_secret_set_but_no_longer_allowed_says_so_and_never_its_value(
    root: Client, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_up_claims_desk()
    monkeypatch.setenv(DESK_TOKEN, TOKEN_VALUE)
    settings.GATEHOUSE_EFFECT_SECRETS = settings.GATEHOUSE_EFFECT_SECRETS - {DESK_TOKEN}

    page = root.get(SETUP).content.decode()

    assert states(page)[f"secret-{DESK_TOKEN}"] == "Missing"
    assert "GATEHOUSE_EFFECT_SECRETS" in step_text(page, f"secret-{DESK_TOKEN}")
    assert TOKEN_VALUE not in page


def test_replies_from_the_shipped_address_are_missing_while_an_effect_replies(
    root: Client, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_up_claims_desk()
    for name, value in SMTP.items():
        setattr(settings, name, value)
    settings.DEFAULT_FROM_EMAIL = "Gatehouse <gatehouse@localhost>"

    page = root.get(SETUP).content.decode()

    assert states(page)["mail-server"] == "Missing"
    assert "GATEHOUSE_MAIL_FROM" in step_text(page, "mail-server")
    assert MAIL_PASSWORD not in page


def test_a_route_naming_a_team_that_is_gone_is_missing(root: Client) -> None:
    set_up_claims_desk()
    Group.objects.filter(name="payments-desk").delete()

    page = root.get(SETUP).content.decode()

    assert states(page)["route-teams"] == "Missing"
    assert "do not exist: payments-desk" in step_text(page, "route-teams")
    assert root.get(reverse("home"))["Location"] == SETUP


def test_a_team_that_may_approve_but_has_nobody_in_it_is_still_missing(root: Client) -> None:
    set_up_claims_desk()
    User.objects.filter(username="clara").update(is_active=False)

    page = root.get(SETUP).content.decode()

    assert states(page)["approver-team"] == "Missing"
    assert "add people" in step_text(page, "approver-team")
