"""The login throttle (accounts/login_throttle.py, django-axes): failures counted per account
and address and per address, the pause and its end, shared between processes, behind
proxies, and the admin's login counted with the console's."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import time_machine
from axes.models import AccessAttempt
from django.contrib.auth.models import User
from django.core.cache import caches
from django.db.models import Sum
from django.http import HttpResponse
from django.test import Client

from tests.database import database_url

ROOT = Path(__file__).resolve().parents[2]
LOGIN = "/accounts/login/"
PASSWORD = "right-password-123"


@pytest.fixture
def fast_hashing(settings: Any) -> None:
    """Real password checks through the real form, without PBKDF2's half second per try."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def _login(client: Client, username: str, password: str, **headers: str) -> HttpResponse:
    return client.post(LOGIN, {"username": username, "password": password}, **headers)  # type: ignore[return-value]


def _fail(client: Client, username: str, times: int, **headers: str) -> None:
    for _ in range(times):
        response = _login(client, username, "wrong", **headers)
        assert response.status_code in {200, 429}


@pytest.mark.django_db
def test_failures_against_other_accounts_below_the_address_limit_never_lock_a_correct_login(
    fast_hashing: None, settings: Any
) -> None:
    User.objects.create_user("ana", password=PASSWORD)
    attacker = Client()
    for _ in range(settings.LOGIN_ADDRESS_FAILURE_LIMIT - 1):
        _login(attacker, f"nobody-{secrets.token_hex(4)}", "guess")
    # Same address (the test client's), another account: its correct password works.
    assert _login(Client(), "ana", PASSWORD).status_code == 302


@pytest.mark.django_db
def test_many_accounts_tried_from_one_address_pause_that_address(
    fast_hashing: None, settings: Any
) -> None:
    """Someone trying one password on many names from one address: after the address limit
    (higher than an account's), no name from that address reaches the password check."""
    settings.LOGIN_ADDRESS_FAILURE_LIMIT = 8
    User.objects.create_user("ana", password=PASSWORD)
    statuses = [_login(Client(), f"user-{number}", "guess").status_code for number in range(20)]

    blocked = _login(Client(), "ana", PASSWORD)

    assert statuses == [200] * 7 + [429] * 13  # the eighth failure starts the pause
    checked = AccessAttempt.objects.aggregate(n=Sum("failures_since_start"))["n"]
    assert checked == 8  # the others never reached a password check
    assert blocked.status_code == 429
    assert b"Too many failed attempts from your address" in blocked.content
    assert 14 * 60 <= int(blocked["Retry-After"]) <= 15 * 60
    # Another address is not paused; nor is this one once the cool-off has passed.
    assert _login(Client(REMOTE_ADDR="192.0.2.7"), "ana", PASSWORD).status_code == 302


@pytest.mark.django_db
def test_repeated_failures_throttle_that_account_from_that_address(fast_hashing: None) -> None:
    User.objects.create_user("ana", password=PASSWORD)
    User.objects.create_user("bea", password=PASSWORD)
    client = Client()
    for _ in range(4):
        assert _login(client, "ana", "wrong").status_code == 200
    locked = _login(client, "ana", "wrong")  # the fifth failure starts the pause
    assert locked.status_code == 429
    blocked = _login(client, "ANA ", PASSWORD)  # case and spaces make no other account
    assert blocked.status_code == 429
    assert b"Too many failed attempts" in blocked.content
    assert b"Try again in 15 minutes" in blocked.content
    assert 14 * 60 <= int(blocked["Retry-After"]) <= 15 * 60
    # Another account from the same address, the same account from elsewhere: unaffected.
    assert _login(Client(), "bea", PASSWORD).status_code == 302
    assert _login(Client(REMOTE_ADDR="192.0.2.7"), "ana", PASSWORD).status_code == 302


@pytest.mark.django_db
def test_the_pause_ends_after_the_cool_off(fast_hashing: None) -> None:
    User.objects.create_user("ana", password=PASSWORD)
    with time_machine.travel("2026-03-02 09:00:00+00:00", tick=False):
        _fail(Client(), "ana", 5)
        blocked = _login(Client(), "ana", PASSWORD)
        assert b"after 09:15 UTC" in blocked.content
    with time_machine.travel("2026-03-02 09:14:00+00:00", tick=False):
        assert _login(Client(), "ana", PASSWORD).status_code == 429  # does not extend it
    with time_machine.travel("2026-03-02 09:16:00+00:00", tick=False):
        assert _login(Client(), "ana", PASSWORD).status_code == 302


@pytest.mark.django_db(transaction=True)
def test_the_failure_count_is_shared_between_processes(fast_hashing: None) -> None:
    """Failures made in another process (another web worker) count here too."""
    User.objects.create_user("ana", password=PASSWORD)
    script = (
        "import django; django.setup()\n"
        "from django.test.utils import setup_test_environment; setup_test_environment()\n"
        "from django.test import Client\n"
        "for _ in range(5):\n"
        "    Client().post('/accounts/login/', {'username': 'ana', 'password': 'wrong'})\n"
    )
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "DJANGO_SETTINGS_MODULE": "config.settings",
    }
    subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, check=True)  # noqa: S603
    for cache in caches.all():
        cache.clear()  # nothing this process keeps in memory may matter
    assert _login(Client(), "ana", PASSWORD).status_code == 429


@pytest.mark.django_db
def test_forwarded_for_is_ignored_unless_proxies_are_trusted(fast_hashing: None) -> None:
    User.objects.create_user("ana", password=PASSWORD)
    for hop in range(5):  # a client cannot escape its count by inventing addresses
        _login(Client(), "ana", "wrong", HTTP_X_FORWARDED_FOR=f"198.51.100.{hop}")
    assert _login(Client(), "ana", PASSWORD, HTTP_X_FORWARDED_FOR="203.0.113.9").status_code == 429


@pytest.mark.django_db
def test_a_trusted_proxy_forwards_each_clients_own_address(
    fast_hashing: None, settings: Any
) -> None:
    settings.TRUSTED_PROXIES = 1
    User.objects.create_user("ana", password=PASSWORD)
    proxy = Client(REMOTE_ADDR="10.0.0.1")  # every request comes through it
    # The attacker also writes a header of its own: only the proxy's entry counts.
    spoofed = "192.0.2.50, 198.51.100.1"
    _fail(proxy, "ana", 5, HTTP_X_FORWARDED_FOR=spoofed)
    assert _login(proxy, "ana", PASSWORD, HTTP_X_FORWARDED_FOR="198.51.100.1").status_code == 429
    # Ana at her own desk, through the same proxy, is not the attacker.
    assert _login(proxy, "ana", PASSWORD, HTTP_X_FORWARDED_FOR="203.0.113.9").status_code == 302


@pytest.mark.django_db
def test_admin_login_shares_the_limit_of_the_console_login(fast_hashing: None) -> None:
    """The admin's login page is no way around the throttle: both count the same failures."""
    User.objects.create_user("ana", password=PASSWORD, is_staff=True)
    client = Client()
    _fail(client, "ana", 3)
    for _ in range(2):
        client.post("/admin/login/", {"username": "ana", "password": "wrong"})

    blocked = client.post("/admin/login/", {"username": "ana", "password": PASSWORD})

    assert blocked.status_code == 429
    assert "_auth_user_id" not in client.session
    assert client.get("/admin/").status_code == 302  # still sent to the login page
