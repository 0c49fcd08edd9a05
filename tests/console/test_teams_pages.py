"""The Teams and People pages: an administrator makes a team with roles shown in words, puts
people in it and maps sign-in groups; a refusal is said at its field and keeps what was typed;
an ops lead without the administrator role is refused the pages."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from django.urls import reverse

from accounts.models import Team
from accounts.roles import ROLES, roles_ensure

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin(db: None) -> User:
    roles_ensure()
    user = User.objects.create_user("ada")
    user.groups.add(Group.objects.get(name="administrators"))
    return user


@pytest.fixture
def admin_client(admin: User) -> Client:
    client = Client()
    client.force_login(admin)
    return client


def test_an_administrator_makes_a_team_and_reads_what_each_role_may_do(
    admin_client: Client,
) -> None:
    form = admin_client.get(reverse("teams:new")).content.decode()
    for role in ROLES.values():
        assert role.name in form and role.may in form

    answer = admin_client.post(
        reverse("teams:new"),
        {"name": "claims-desk", "description": "Pays claims.", "roles": ["approver", "auditor"]},
    )

    assert answer.status_code == 302
    assert answer["Location"] == reverse("teams:team", kwargs={"name": "claims-desk"})
    team = Team.objects.get(group__name="claims-desk")
    assert team.roles == ["approver", "auditor"] and team.description == "Pays claims."
    listed = admin_client.get(reverse("teams:list")).content.decode()
    assert "claims-desk" in listed and "Approver, Auditor" in listed


def test_a_bad_team_name_is_refused_at_its_field_and_keeps_the_rest(admin_client: Client) -> None:
    answer = admin_client.post(
        reverse("teams:new"),
        {"name": "claims/desk", "description": "Pays claims.", "roles": ["approver"]},
    )
    page = answer.content.decode()
    assert answer.status_code == 200
    assert "Name: A team&#x27;s name is 1 to 150 letters" in page
    assert "Pays claims." in page and 'value="approver" checked' in page
    assert not Group.objects.filter(name="claims/desk").exists()


def test_people_are_added_to_a_team_and_taken_out(admin_client: Client, admin: User) -> None:
    admin_client.post(reverse("teams:new"), {"name": "claims-desk", "roles": ["approver"]})
    admin_client.post(
        reverse("teams:person_new"),
        {"username": "pia", "first_name": "Pia", "email": "pia@pets.example"},
    )
    pia = User.objects.get(username="pia")
    assert not pia.has_usable_password() and pia.email == "pia@pets.example"
    team_page = reverse("teams:team", kwargs={"name": "claims-desk"})

    assert (
        admin_client.post(
            reverse("teams:members", kwargs={"name": "claims-desk"}), {"username": "pia"}
        ).status_code
        == 302
    )
    assert "pia" in admin_client.get(team_page).content.decode()
    assert pia.groups.filter(name="claims-desk").exists()

    nobody = admin_client.post(
        reverse("teams:members", kwargs={"name": "claims-desk"}), {"username": "nobody"}
    )
    assert nobody.status_code == 400
    assert "There is nobody with the username nobody." in nobody.content.decode()

    admin_client.post(reverse("teams:members", kwargs={"name": "claims-desk"}), {"remove": pia.pk})
    assert not pia.groups.filter(name="claims-desk").exists()


def test_an_administrator_is_told_they_cannot_change_their_own_team(
    admin_client: Client,
) -> None:
    team_page = reverse("teams:team", kwargs={"name": "administrators"})
    assert "You are in this team" in admin_client.get(team_page).content.decode()

    answer = admin_client.post(
        reverse("teams:roles", kwargs={"name": "administrators"}),
        {"roles": ["administrator", "ops_lead"]},
    )

    assert answer.status_code == 400
    assert "You are in administrators, so you cannot change its roles" in answer.content.decode()
    assert Team.objects.get(group__name="administrators").roles == ["administrator"]


def test_a_weak_password_is_refused_at_its_field_and_nothing_is_made(
    admin_client: Client,
) -> None:
    answer = admin_client.post(
        reverse("teams:person_new"),
        {"username": "cy", "first_name": "Cy", "email": "cy@pets.example", "password": "cy"},
    )
    page = answer.content.decode()
    assert answer.status_code == 200
    assert "Password: " in page and 'value="cy@pets.example"' in page
    assert not User.objects.filter(username="cy").exists()


def test_sign_in_groups_are_saved_one_a_line(admin_client: Client) -> None:
    admin_client.post(reverse("teams:new"), {"name": "claims-desk", "roles": ["approver"]})
    admin_client.post(
        reverse("teams:provider_groups", kwargs={"name": "claims-desk"}),
        {"provider_groups": "Claims\r\n\r\nClaims managers\r\nClaims\r\n"},
    )
    assert Team.objects.get(group__name="claims-desk").provider_groups == [
        "Claims",
        "Claims managers",
    ]


def test_an_ops_lead_without_the_administrator_role_is_refused(ops_lead: User) -> None:
    client = Client()
    client.force_login(ops_lead)
    assert client.get(reverse("teams:list")).status_code == 403
    assert (
        client.post(reverse("teams:new"), {"name": "x", "roles": ["ops_lead"]}).status_code == 403
    )
    assert not Group.objects.filter(name="x").exists()
    assert "Teams</a>" not in client.get(reverse("queues:list")).content.decode()


def test_an_administrator_lands_on_the_teams(admin_client: Client) -> None:
    assert admin_client.get("/")["Location"] == reverse("teams:list")
    assert "Teams</a>" in admin_client.get(reverse("teams:list")).content.decode()
