"""Policy version names: one usable path segment, checked wherever a version is created."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from django.contrib.auth.models import Group, User
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from accounts.roles import roles_ensure
from policy.models import PolicyVersion
from policy.schemas import PolicyDocument
from policy.services import (
    DEFAULTS_DIR,
    PolicyError,
    parse_policy_text,
    policy_version_activate,
    policy_version_create,
)

POLICY_1 = yaml.safe_load((DEFAULTS_DIR / "policy-1.yaml").read_text())

BAD_NAMES = [
    "a/b",
    "..",
    ".",
    ".hidden",
    "-leading-dash",
    "policy 2",
    "policy?2",
    "policy#2",
    "policy%2F2",
    "poli\\cy",
    "pólicy-2",
    "x" * 101,
]
GOOD_NAMES = ["policy-2", "policy_2.1", "P2", "2026-03-01", "x" * 100]


def _text(version: Any) -> str:
    return yaml.safe_dump({**POLICY_1, "version": version})


def _lead() -> User:
    roles_ensure()
    user = User.objects.create_user("lee", is_staff=True)
    user.groups.add(Group.objects.get(name="ops-leads"))
    return user


def _store_unchecked(name: str) -> PolicyVersion:
    """A version stored before names were checked (as older releases allowed)."""
    document = PolicyDocument.model_validate({**POLICY_1, "version": name})
    return PolicyVersion.objects.create(
        name=name, document=document.model_dump(mode="json"), checksum=document.checksum()
    )


@pytest.mark.django_db
@pytest.mark.parametrize("name", BAD_NAMES)
def test_the_editor_refuses_an_unusable_name(name: str, policy: None) -> None:
    client = Client()
    client.force_login(_lead())
    page = client.post(reverse("policy:new"), {"document": _text(name)})
    assert page.status_code == 400
    assert "version: " in page.content.decode()
    assert "not a usable version name" in page.content.decode() or (
        "at most 100 characters" in page.content.decode()
    )
    assert not PolicyVersion.objects.filter(name=name).exists()
    assert client.get(reverse("policy:list")).status_code == 200


@pytest.mark.django_db
@pytest.mark.parametrize("name", GOOD_NAMES)
def test_the_editor_saves_a_usable_name_and_links_it(name: str, policy: None) -> None:
    client = Client()
    client.force_login(_lead())
    saved = client.post(reverse("policy:new"), {"document": _text(name)})
    assert saved.status_code == 302
    listing = client.get(reverse("policy:list")).content.decode()
    assert f'href="/policy/{name}/"' in listing
    assert client.get(f"/policy/{name}/").status_code == 200


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["a/b", "..", "policy 2"])
def test_load_policy_refuses_an_unusable_name(name: str, tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(_text(name), encoding="utf-8")
    with pytest.raises(CommandError, match="not a usable version name"):
        call_command("load_policy", str(path))
    assert not PolicyVersion.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["a/b", "..", "policy 2"])
def test_the_service_refuses_an_unusable_name_from_any_caller(name: str) -> None:
    with pytest.raises(PolicyError, match="version: "):
        parse_policy_text(_text(name))
    # A document built in code (not parsed from text) is held to the same rule.
    document = PolicyDocument.model_validate({**POLICY_1, "version": name})
    with pytest.raises(PolicyError, match="version: "):
        policy_version_create(document=document)
    assert not PolicyVersion.objects.exists()


@pytest.mark.django_db
def test_a_name_that_is_not_text_is_refused_clearly() -> None:
    with pytest.raises(PolicyError, match="version"):
        parse_policy_text(_text(["a", "b"]))


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["a/b", "..", "policy 2"])
def test_pages_survive_a_bad_name_stored_before_names_were_checked(name: str, policy: None) -> None:
    """Renaming is no option (the name is on every run it decided and inside its own checksum),
    so the console lists such a version without a link, and every page still renders."""
    _store_unchecked(name)
    client = Client()
    client.force_login(_lead())
    listing = client.get(reverse("policy:list"))
    assert listing.status_code == 200
    assert name in listing.content.decode()
    assert 'data-testid="unusable-name"' in listing.content.decode()
    assert client.get(reverse("policy:new")).status_code == 200
    assert client.get("/policy/policy-1/").status_code == 200
    version = PolicyVersion.objects.get(name=name)
    admin_page = client.get(reverse("admin:policy_policyversion_change", args=[version.pk]))
    assert admin_page.status_code == 200


@pytest.mark.django_db
def test_an_active_version_with_a_bad_name_still_decides_and_suggests_a_usable_name(
    policy: None,
) -> None:
    version = _store_unchecked("team/a")
    policy_version_activate(name="team/a")
    assert PolicyVersion.objects.get(pk=version.pk).parsed.version == "team/a"
    client = Client()
    client.force_login(_lead())
    editor = client.get(reverse("policy:new")).content.decode()
    assert "version: team-a-2" in editor
    assert client.get(reverse("policy:list")).status_code == 200
