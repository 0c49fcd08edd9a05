"""Company sign-in (OpenID Connect) in a real browser, against a real provider on 127.0.0.1
(tests/oidcprovider.py): the provider's groups claim makes the person an approver."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User

from approvals.models import ApprovalRequest
from tests.browser.conftest import PLAYWRIGHT_MISSING, screenshot
from tests.oidcprovider import Provider, running_provider

pytest.importorskip("playwright.sync_api", reason=PLAYWRIGHT_MISSING, exc_type=ImportError)
from playwright.sync_api import Page, expect


@pytest.fixture
def provider(settings: Any, roles: None) -> Iterator[Provider]:
    with running_provider() as provider:
        for name, value in provider.settings().items():
            setattr(settings, name, value)
        settings.OIDC_ROLE_MAP = {"Security": "security-approvers"}
        yield provider


def test_oidc_sign_in_lands_an_approver_in_their_inbox(
    page: Page, provider: Provider, waiting: ApprovalRequest
) -> None:
    provider.person = {
        "sub": "00u-dana",
        "preferred_username": "dana",
        "email": "dana@example.com",
        "groups": ["Security", "Everyone"],
    }

    page.goto("/approvals/")
    expect(page).to_have_url(re.compile(r"/accounts/login/"))
    page.get_by_role("link", name="Sign in with your company account").click()

    # The provider signs Dana in at once and sends the browser back: the inbox they asked for.
    expect(page).to_have_url(re.compile(r"/approvals/$"))
    expect(page.get_by_role("heading", name="Approvals waiting")).to_be_visible()
    expect(page.locator("form.logout")).to_contain_text("dana")
    rows = page.get_by_test_id("inbox").locator("tbody tr")
    expect(rows).to_have_count(1)
    screenshot(page, "oidc-sign-in-inbox")
    dana = User.objects.get(username="dana")
    assert set(dana.groups.values_list("name", flat=True)) == {"security-approvers"}


def test_a_refused_company_sign_in_ends_on_the_login_page_with_a_message(
    page: Page, provider: Provider
) -> None:
    provider.person = {"sub": "00u-dana", "preferred_username": "dana", "groups": ["Security"]}
    provider.id_token_changes = {"aud": "another-application"}

    page.goto("/accounts/login/")
    page.get_by_role("link", name="Sign in with your company account").click()

    expect(page).to_have_url(re.compile(r"/accounts/login/$"))
    expect(page.get_by_role("status")).to_contain_text("did not work")
    assert not User.objects.filter(username="dana").exists()
