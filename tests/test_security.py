"""Deployment settings and login throttling."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.test import Client

ROOT = Path(__file__).resolve().parents[1]


def test_check_deploy_is_clean_with_production_settings() -> None:
    env = {
        **os.environ,
        "GATEHOUSE_SECRET_KEY": secrets.token_urlsafe(50),
        "GATEHOUSE_DEBUG": "0",
        "GATEHOUSE_HTTPS": "1",
        "GATEHOUSE_ALLOWED_HOSTS": "gatehouse.example.com",
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


@pytest.mark.django_db
def test_login_is_throttled_after_repeated_failures() -> None:
    cache.clear()
    User.objects.create_user("ana", password="right-password-123")
    client = Client()
    for _ in range(5):
        assert (
            client.post("/accounts/login/", {"username": "ana", "password": "no"}).status_code
            == 200
        )
    blocked = client.post("/accounts/login/", {"username": "ana", "password": "right-password-123"})
    assert blocked.status_code == 429
    assert b"Too many failed attempts" in blocked.content
    cache.clear()
    ok = client.post("/accounts/login/", {"username": "ana", "password": "right-password-123"})
    assert ok.status_code == 302


@pytest.mark.django_db
def test_admin_login_shares_the_limit_of_the_console_login() -> None:
    """The admin's login page is no way around the throttle."""
    cache.clear()
    User.objects.create_user("ana", password="right-password-123", is_staff=True)
    client = Client()
    for _ in range(3):
        client.post("/accounts/login/", {"username": "ana", "password": "no"})
    for _ in range(2):
        failed = client.post("/admin/login/", {"username": "ana", "password": "no"})
        assert failed.status_code == 200

    blocked = client.post("/admin/login/", {"username": "ana", "password": "right-password-123"})

    assert b"Too many failed attempts" in blocked.content
    assert "_auth_user_id" not in client.session
    assert client.get("/admin/").status_code == 302  # still sent to the login page
    cache.clear()
    ok = client.post("/admin/login/", {"username": "ana", "password": "right-password-123"})
    assert ok.status_code == 302 and "_auth_user_id" in client.session
