"""Company sign-in with OpenID Connect, against a real provider on 127.0.0.1
(tests/oidcprovider.py): the code flow end to end, roles that follow the provider's groups at
each sign-in, and tokens the console refuses."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from django.urls import reverse
from django.utils.html import escape

from accounts.models import CompanyIdentity
from accounts.oidc import BAD_CLAIMS, LINKED_ELSEWHERE, LOCAL_ACCOUNT, REFUSED
from accounts.roles import roles_ensure
from accounts.services import team_create, team_member_add, team_provider_groups_set
from audit.models import AuditAction, AuditEvent
from tests.oidcprovider import Provider, running_provider

pytestmark = pytest.mark.django_db

ROLE_MAP = {"Security": "security-approvers", "Finance": "finance-approvers"}
DANA = {
    "sub": "00u-dana",
    "preferred_username": "dana",
    "email": "dana@example.com",
    "groups": ["Security", "Everyone"],
}


@pytest.fixture
def provider(settings: Any) -> Iterator[Provider]:
    roles_ensure()
    with running_provider() as provider:
        for name, value in provider.settings().items():
            setattr(settings, name, value)
        settings.OIDC_ROLE_MAP = ROLE_MAP
        provider.person = dict(DANA)
        yield provider


def sign_in(client: Client, next_path: str = "") -> Any:
    """Press "Sign in with your company account", let the provider answer, and come back."""
    start = client.get(
        reverse("oidc_authentication_init"), {"next": next_path} if next_path else {}
    )
    assert start.status_code == 302
    at_provider = httpx.get(start["Location"], follow_redirects=False)
    assert at_provider.status_code == 302, at_provider.text
    back = urlsplit(at_provider.headers["Location"])
    assert back.path == reverse("oidc_authentication_callback")
    return client.get(f"{back.path}?{back.query}")


def groups_of(username: str) -> set[str]:
    return set(User.objects.get(username=username).groups.values_list("name", flat=True))


def test_company_sign_in_is_off_unless_configured(client: Client) -> None:
    assert client.get(reverse("oidc_authentication_init")).status_code == 404
    assert client.get(reverse("oidc_authentication_callback")).status_code == 404
    assert "company account" not in client.get(reverse("login")).content.decode()


def test_a_new_person_signs_in_with_the_mapped_role_and_their_e_mail(
    provider: Provider, client: Client
) -> None:
    assert "Sign in with your company account" in client.get(reverse("login")).content.decode()

    answer = sign_in(client, next_path="/approvals/")

    assert answer.status_code == 302 and answer["Location"] == "/approvals/"
    dana = User.objects.get(username="dana")
    assert dana.email == "dana@example.com"
    assert not dana.has_usable_password()
    assert groups_of("dana") == {"security-approvers"}
    assert client.get("/approvals/").status_code == 200
    event = AuditEvent.objects.get(action=AuditAction.ACCOUNT_ROLES_FOLLOWED_PROVIDER)
    assert event.actor == dana
    assert event.data["created"] is True
    assert event.data["added"] == ["security-approvers"] and event.data["removed"] == []


def test_roles_follow_the_provider_at_each_sign_in(provider: Provider, client: Client) -> None:
    sign_in(client)
    # A group the role map does not name is the admin's business: sign-in leaves it alone.
    User.objects.get(username="dana").groups.add(Group.objects.get(name="auditors"))
    client.logout()

    provider.person = {**DANA, "groups": ["Finance"], "email": "dana.f@example.com"}
    answer = sign_in(client)

    assert answer.status_code == 302 and answer["Location"] == "/"
    assert groups_of("dana") == {"finance-approvers", "auditors"}
    assert User.objects.get(username="dana").email == "dana.f@example.com"
    change = AuditEvent.objects.filter(action=AuditAction.ACCOUNT_ROLES_FOLLOWED_PROVIDER).latest(
        "id"
    )
    assert change.data["added"] == ["finance-approvers"]
    assert change.data["removed"] == ["security-approvers"]
    assert change.data["created"] is False

    # The same groups again: nothing changes, nothing more on the trail.
    client.logout()
    sign_in(client)
    assert (
        AuditEvent.objects.filter(action=AuditAction.ACCOUNT_ROLES_FOLLOWED_PROVIDER).count() == 2
    )


def test_a_team_mapped_in_the_console_follows_the_provider_with_the_role_map(
    provider: Provider, client: Client
) -> None:
    root = User.objects.create_superuser("root", "root@example.com", None)
    team_create(name="claims-desk", description="", roles=["approver"], by=root)
    team_provider_groups_set(name="claims-desk", provider_groups=["Claims", "Everyone"], by=root)
    team_create(name="fraud-team", description="", roles=["auditor"], by=root)
    team_provider_groups_set(name="fraud-team", provider_groups=["Fraud"], by=root)

    sign_in(client)  # Security (the role map) and Everyone (the claims desk's)

    assert groups_of("dana") == {"security-approvers", "claims-desk"}
    assert User.objects.get(username="dana").has_perm("approvals.decide_approvalrequest")
    client.logout()

    provider.person = {**DANA, "groups": ["Fraud"]}
    sign_in(client)

    assert groups_of("dana") == {"fraud-team"}
    change = AuditEvent.objects.filter(action=AuditAction.ACCOUNT_ROLES_FOLLOWED_PROVIDER).latest(
        "id"
    )
    assert change.data["added"] == ["fraud-team"]
    assert change.data["removed"] == ["claims-desk", "security-approvers"]

    # A team nothing maps is the console's: a sign-in neither adds nor removes it.
    team_create(name="payments", description="", roles=["approver"], by=root)
    team_member_add(name="payments", username="dana", by=root)
    client.logout()
    sign_in(client)
    assert groups_of("dana") == {"fraud-team", "payments"}


def test_a_person_in_no_mapped_group_signs_in_without_a_role(
    provider: Provider, client: Client
) -> None:
    provider.person = {**DANA, "groups": ["Marketing"]}

    sign_in(client)

    assert groups_of("dana") == set()
    assert client.get("/").status_code == 403  # the no-role page, as for any account


def test_the_username_falls_back_to_the_e_mail(provider: Provider, client: Client) -> None:
    provider.person = {"sub": "00u-eve", "email": "eve@example.com", "groups": ["Finance"]}

    sign_in(client)

    assert groups_of("eve@example.com") == {"finance-approvers"}


@pytest.mark.parametrize(
    "changes",
    [
        pytest.param({"aud": "another-application"}, id="wrong-audience"),
        pytest.param({"exp": int(time.time()) - 60}, id="expired"),
        pytest.param({"iss": "https://impostor.example"}, id="wrong-issuer"),
    ],
)
def test_a_refused_token_changes_nobody_and_says_so_on_the_login_page(
    provider: Provider, client: Client, changes: dict[str, Any]
) -> None:
    sign_in(client)  # dana exists, as a security approver
    client.logout()
    provider.person = {**DANA, "groups": ["Finance"], "email": "other@example.com"}
    provider.id_token_changes = changes
    # And a person never seen before: not created.
    trail = AuditEvent.objects.count()

    answer = sign_in(client)

    assert answer.status_code == 302 and answer["Location"] == reverse("login")
    assert groups_of("dana") == {"security-approvers"}
    assert User.objects.get(username="dana").email == "dana@example.com"
    assert AuditEvent.objects.count() == trail
    page = client.get(answer["Location"])
    assert page.status_code == 200 and REFUSED in page.content.decode()
    assert "_auth_user_id" not in client.session

    client.logout()
    provider.person = {**DANA, "sub": "00u-finn", "preferred_username": "finn"}
    sign_in(client)
    assert not User.objects.filter(username="finn").exists()


def test_the_provider_never_signs_in_as_a_local_superuser(
    provider: Provider, client: Client
) -> None:
    User.objects.create_superuser("dana", "admin@example.com", "break-glass-password-1")

    answer = sign_in(client)

    assert answer["Location"] == reverse("login")
    assert groups_of("dana") == set()
    # The break-glass administrator's local password still works.
    local = client.post(
        reverse("login"), {"username": "dana", "password": "break-glass-password-1"}
    )
    assert local.status_code == 302 and client.session["_auth_user_id"] == str(
        User.objects.get(username="dana").pk
    )


def refused_with(client: Client, answer: Any, message: str) -> None:
    """The sign-in ended on the login page, saying `message`, with nobody signed in."""
    assert answer.status_code == 302 and answer["Location"] == reverse("login")
    page = client.get(answer["Location"])
    assert page.status_code == 200 and escape(message) in page.content.decode()
    assert "_auth_user_id" not in client.session


def test_a_local_account_with_a_password_is_never_taken_over(
    provider: Provider, client: Client
) -> None:
    dana = User.objects.create_user("dana", "dana.local@example.com", "local-password-1")
    dana.groups.add(Group.objects.get(name="finance-approvers"))
    trail = AuditEvent.objects.count()

    answer = sign_in(client)

    refused_with(client, answer, LOCAL_ACCOUNT.format(username="dana"))
    dana.refresh_from_db()
    assert dana.email == "dana.local@example.com"
    assert groups_of("dana") == {"finance-approvers"}
    assert not CompanyIdentity.objects.exists() and AuditEvent.objects.count() == trail
    # The local password is the account's, and still works.
    local = client.post(reverse("login"), {"username": "dana", "password": "local-password-1"})
    assert local.status_code == 302 and client.session["_auth_user_id"] == str(dana.pk)


def test_the_account_is_found_by_the_providers_subject_not_by_the_username(
    provider: Provider, client: Client
) -> None:
    sign_in(client)
    dana = User.objects.get(username="dana")
    link = CompanyIdentity.objects.get(user=dana)
    assert (link.issuer, link.subject) == (provider.issuer, "00u-dana")
    client.logout()

    # Renamed at the provider: still the same account.
    provider.person = {**DANA, "preferred_username": "dana.renamed"}
    sign_in(client)
    assert client.session["_auth_user_id"] == str(dana.pk)
    assert not User.objects.filter(username="dana.renamed").exists()
    client.logout()

    # Another person the provider calls "dana": not Dana's account.
    provider.person = {**DANA, "sub": "00u-impostor", "email": "impostor@example.com"}
    answer = sign_in(client)
    refused_with(client, answer, LINKED_ELSEWHERE.format(username="dana"))
    dana.refresh_from_db()
    assert dana.email == "dana@example.com" and groups_of("dana") == {"security-approvers"}


def test_an_account_without_a_password_and_no_link_is_linked_at_its_first_sign_in(
    provider: Provider, client: Client
) -> None:
    # Made by an earlier company sign-in (before links were kept), or by an administrator.
    dana = User.objects.create_user("dana", "dana@example.com")
    assert not dana.has_usable_password()

    sign_in(client)

    assert client.session["_auth_user_id"] == str(dana.pk)
    assert CompanyIdentity.objects.get(user=dana).subject == "00u-dana"


@pytest.mark.parametrize(
    "claims",
    [
        pytest.param({"preferred_username": "mallory\nBcc: everyone"}, id="line-break"),
        pytest.param({"preferred_username": "mallory\x00"}, id="nul"),
        pytest.param({"preferred_username": "mal lory"}, id="space"),
        pytest.param({"preferred_username": "m" * 151}, id="too-long"),
        pytest.param({"preferred_username": ["mallory"]}, id="not-text"),
        pytest.param({"email": "mallory@@example.com"}, id="bad-address"),
        pytest.param({"email": "mallory@example.com\r\nBcc: x@example.com"}, id="address-crlf"),
    ],
)
def test_claims_a_local_account_could_not_have_are_refused(
    provider: Provider, client: Client, claims: dict[str, Any]
) -> None:
    provider.person = {**DANA, "sub": "00u-mallory", "preferred_username": "mallory", **claims}

    answer = sign_in(client)

    refused_with(client, answer, BAD_CLAIMS)
    assert not User.objects.exclude(username="").exists()
    assert not CompanyIdentity.objects.exists()


def test_an_id_token_without_kid_uses_the_providers_only_key(
    provider: Provider, client: Client
) -> None:
    provider.kid = None

    answer = sign_in(client)

    assert answer.status_code == 302 and answer["Location"] == "/"
    assert client.session["_auth_user_id"] == str(User.objects.get(username="dana").pk)


def test_an_id_token_without_kid_among_several_keys_is_refused_on_the_login_page(
    provider: Provider, client: Client
) -> None:
    provider.kid = None
    provider.other_keys = 1

    answer = sign_in(client)

    refused_with(client, answer, REFUSED)
    assert not User.objects.filter(username="dana").exists()
