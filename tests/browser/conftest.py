"""Real-browser tests: Playwright drives Debian's Chromium against pytest-django's live server.

Every test here is marked `browser`. Without Chromium (or the playwright package) they are
skipped with a reason saying so, unless GATEHOUSE_REQUIRE_BROWSER=1 asks for them, in which
case the run fails at collection instead (CI sets it).

Background work runs inline in the live server: django-q2's global `sync` switch makes
`async_task` execute the task in-process, so an approval's follow-up steps (advance_run,
deliver_effect) finish before the decision's redirect is answered.
"""

from __future__ import annotations

import importlib
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from django.contrib.auth.models import Group, User

from accounts.roles import roles_ensure
from approvals.models import ApprovalRequest
from policy.services import (
    DEFAULTS_DIR,
    parse_policy_text,
    policy_version_activate,
    policy_version_create,
)
from tests.conftest import Pipeline, decision_for, make_event

if TYPE_CHECKING:
    from playwright.sync_api import Browser, BrowserContext, Page

# Playwright's sync API keeps an event loop in the test thread; Django would otherwise refuse
# the ORM calls the tests make there (setup and assertions on the database).
os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "1"

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
HERE = Path(__file__).resolve().parent
# Full-page screenshots for a person to read, kept after the run (CI keeps the folder).
ARTIFACTS = Path(
    os.environ.get("GATEHOUSE_ARTIFACTS", HERE.parents[1] / "artifacts" / "screenshots")
)
PLAYWRIGHT_MISSING = "needs Chromium and the playwright package: pip install -e '.[dev]'"


def browser_missing() -> str | None:
    """Why the browser tests cannot run here ("needs Chromium..."), or None when they can."""
    if not (CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK)):
        return f"needs Chromium at {CHROMIUM}: apt-get install chromium"
    try:
        importlib.import_module("playwright.sync_api")
    except ImportError:
        return PLAYWRIGHT_MISSING
    return None


MISSING = browser_missing()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # This hook sees the whole session's items: only touch the ones in this folder.
    ours = [item for item in items if item.path.resolve().is_relative_to(HERE)]
    for item in ours:
        item.add_marker(pytest.mark.browser)
    if MISSING is None:
        return
    if os.environ.get("GATEHOUSE_REQUIRE_BROWSER") == "1":
        raise pytest.UsageError(f"GATEHOUSE_REQUIRE_BROWSER=1, but this machine {MISSING}")
    skip = pytest.mark.skip(reason=MISSING)
    for item in ours:
        item.add_marker(skip)


def screenshot(page: Page, name: str) -> Path:
    """Save a full-page screenshot as an artifact (`artifacts/screenshots/<name>.png`)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


# --- the browser --------------------------------------------------------------------------


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    from playwright.sync_api import sync_playwright

    playwright = sync_playwright().start()
    try:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield browser
        finally:
            browser.close()
    finally:
        playwright.stop()


@pytest.fixture
def new_context(browser: Browser, live_server: Any) -> Iterator[Callable[..., BrowserContext]]:
    """Make a fresh browser context (own cookies) on the live server; closed after the test."""
    contexts: list[BrowserContext] = []

    def make(**options: Any) -> BrowserContext:
        context = browser.new_context(base_url=live_server.url, **options)
        context.set_default_timeout(10_000)
        contexts.append(context)
        return context

    yield make
    for context in contexts:
        context.close()


@pytest.fixture
def page(new_context: Callable[..., BrowserContext]) -> Page:
    return new_context().new_page()


@pytest.fixture(autouse=True)
def tasks_run_inline(monkeypatch: pytest.MonkeyPatch) -> None:
    """worker.dispatch sends work with django-q2's async_task, which honours Conf.SYNC."""
    from django_q.conf import Conf

    monkeypatch.setattr(Conf, "SYNC", True)


@pytest.fixture(autouse=True)
def fast_password_hashing(settings: Any) -> None:
    """Real passwords, checked by the real login form, without 0.5 s of PBKDF2 per check."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


# --- people and requests ------------------------------------------------------------------


@dataclass(frozen=True)
class Person:
    user: User
    password: str

    @property
    def username(self) -> str:
        return self.user.get_username()


@pytest.fixture
def roles(transactional_db: None) -> None:
    roles_ensure()


@pytest.fixture
def make_person(roles: None) -> Callable[..., Person]:
    def make(username: str, *groups: str) -> Person:
        password = f"correct-horse-{username}-7"
        user = User.objects.create_user(username=username, password=password)
        user.groups.set(Group.objects.filter(name__in=groups))
        assert user.groups.count() == len(groups)
        return Person(user, password)

    return make


@pytest.fixture
def approver(make_person: Callable[..., Person]) -> Person:
    return make_person("ana", "security-approvers")


@pytest.fixture
def second_approver(make_person: Callable[..., Person]) -> Person:
    return make_person("bruno", "security-approvers")


def log_in(page: Page, person: Person, path: str = "/") -> None:
    """Open `path` while logged out, get sent to the login page, and log in through its form."""
    from playwright.sync_api import expect

    page.goto(path)
    expect(page).to_have_url(re.compile(r"/accounts/login/"))
    page.get_by_label("Username").fill(person.username)
    page.get_by_label("Password").fill(person.password)
    page.get_by_role("button", name="Log in").click()
    # Wherever it leads next (the inbox, or a 403 for someone without an inbox), it is not
    # back to the login form with an error.
    expect(page).not_to_have_url(re.compile(r"/accounts/login/"))


def choose_in_correction(page: Page, field: str, **option: str) -> None:
    """Choose another request type or effect in the correction form and wait for the form to
    come back with that choice's fields. The page's script submits the form on a change; a
    choice made before the script is ready, or a field filled while the form is being sent,
    would be lost, so this waits for both."""
    from playwright.sync_api import expect

    expect(page.locator("form[data-correction][data-ready]")).to_have_count(1)
    with page.expect_navigation():
        page.get_by_label(field).select_option(**option)
    expect(page.locator("form[data-correction][data-ready]")).to_have_count(1)


SOURCE_SENTENCE = "Queue an account review for AC-20931."


def security_event(event_id: str) -> dict[str, Any]:
    return make_event(
        event_id=event_id,
        request_type="security",
        requested_action="queue_account_review",
        subject="Suspicious sign-ins",
        body=f"Several sign-ins from Lisbon. {SOURCE_SENTENCE}",
    )


def classifier_decision(event: dict[str, Any]) -> dict[str, Any]:
    outcome = decision_for(event, reason_code="security_sensitive")
    outcome["value"]["confidence"] = 0.9
    outcome["value"]["fields"] = {
        "account_reference": {"value": "AC-20931", "confidence": 0.97, "source": SOURCE_SENTENCE}
    }
    return outcome


@pytest.fixture
def submit_security_event(pipeline: Pipeline, roles: None) -> Callable[[str], ApprovalRequest]:
    """Send a security event through the real pipeline; returns the approval it waits on."""

    def submit(event_id: str) -> ApprovalRequest:
        event = security_event(event_id)
        pipeline.submit(event, [classifier_decision(event)])
        return ApprovalRequest.objects.select_related("run").get(run__event_id=event_id)

    return submit


@pytest.fixture
def waiting(submit_security_event: Callable[[str], ApprovalRequest]) -> ApprovalRequest:
    return submit_security_event("evt-sec-1")


@pytest.fixture
def two_approver_policy(pipeline: Pipeline) -> str:
    """policy-1 with `approvers: 2` for account reviews, loaded as policy-2 and made active."""
    text = (DEFAULTS_DIR / "policy-1.yaml").read_text(encoding="utf-8")
    text = text.replace("version: policy-1", "version: policy-2")
    text = text.replace("    approvers: 1\n", "    approvers: 2\n")
    document = parse_policy_text(text)
    assert document.approvals["queue_account_review"].approvers == 2
    policy_version_create(document=document)
    return policy_version_activate(name="policy-2").name
