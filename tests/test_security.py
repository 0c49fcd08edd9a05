"""Deployment settings, password hashing, the client's address and the browser features every
answer denies. The login throttle's tests are tests/accounts/test_login_throttle.py."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.hashers import identify_hasher, make_password
from django.contrib.auth.models import User
from django.http import HttpResponse
from django.test import Client, RequestFactory

from core.client_address import client_address

ROOT = Path(__file__).resolve().parents[1]


def test_check_deploy_is_clean_with_production_settings() -> None:
    env = {
        **os.environ,
        "GATEHOUSE_SECRET_KEY": secrets.token_urlsafe(50),
        "GATEHOUSE_DEBUG": "0",
        "GATEHOUSE_HTTPS": "1",
        "GATEHOUSE_ALLOWED_HOSTS": "gatehouse.example.com",
        "DJANGO_SETTINGS_MODULE": "config.settings",  # the tests' own are the dev settings
    }
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)  # set by the browser tests, never in production
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


LOGIN = "/accounts/login/"
PASSWORD = "right-password-123"


def _login(client: Client, username: str, password: str, **headers: str) -> HttpResponse:
    return client.post(LOGIN, {"username": username, "password": password}, **headers)  # type: ignore[return-value]


@pytest.mark.django_db
def test_a_password_hashed_with_pbkdf2_still_signs_in_and_is_hashed_again_with_argon2() -> None:
    """Argon2 hashes new passwords; one stored before (PBKDF2) is still read, and the login
    that reads it stores it again as Argon2."""
    user = User.objects.create_user("ana")
    user.password = make_password(PASSWORD, hasher="pbkdf2_sha256")
    user.save(update_fields=["password"])
    assert identify_hasher(User.objects.get(pk=user.pk).password).algorithm == "pbkdf2_sha256"

    assert _login(Client(), "ana", PASSWORD).status_code == 302

    stored = User.objects.get(pk=user.pk).password
    assert identify_hasher(stored).algorithm == "argon2"
    assert _login(Client(), "ana", PASSWORD).status_code == 302
    assert (
        identify_hasher(User.objects.create_user("bea", password=PASSWORD).password).algorithm
        == "argon2"
    )


@pytest.mark.parametrize(
    ("proxies", "forwarded", "expected"),
    [
        (0, "203.0.113.9", "10.0.0.1"),
        (1, "203.0.113.9", "203.0.113.9"),
        (1, "192.0.2.1, 203.0.113.9", "203.0.113.9"),
        (2, "192.0.2.1, 203.0.113.9, 10.0.0.2", "203.0.113.9"),
        (2, "203.0.113.9", "10.0.0.1"),  # fewer hops than proxies: the connection's address
        (1, "not-an-address", "10.0.0.1"),
        (1, "", "10.0.0.1"),
        (1, "2001:DB8::1", "2001:db8::1"),
    ],
)
def test_client_address(proxies: int, forwarded: str, expected: str, settings: Any) -> None:
    settings.TRUSTED_PROXIES = proxies
    request = RequestFactory().get("/", REMOTE_ADDR="10.0.0.1", HTTP_X_FORWARDED_FOR=forwarded)
    assert client_address(request) == expected


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/accounts/login/", "/admin/login/", "/api/v1/openapi.json"])
def test_every_answer_denies_the_browser_features_the_console_never_uses(path: str) -> None:
    response = Client().get(path)

    policy = dict(item.strip().split("=", 1) for item in response["Permissions-Policy"].split(","))
    for feature in ("camera", "microphone", "geolocation", "payment", "usb"):
        assert policy[feature] == "()", feature
