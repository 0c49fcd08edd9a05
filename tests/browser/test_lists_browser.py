"""The lists people work from, in a real browser: the approvals inbox and a queue, worked
from the keyboard (j / k / Enter / x), claimed in bulk, and read in words, not codes."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from approvals.models import ApprovalRequest
from automation.models import RecoveryAction, Run
from automation.recovery.services import queue_claim
from tests.browser.conftest import PLAYWRIGHT_MISSING, Person, log_in, screenshot
from tests.conftest import TIMEOUT, Pipeline, make_event

pytest.importorskip("playwright.sync_api", reason=PLAYWRIGHT_MISSING, exc_type=ImportError)
from playwright.sync_api import Locator, Page, expect

# Codes that must never be a row's words (they may be secondary text elsewhere).
CODES = ("queue_account_review", "security_review", "retry_exhausted", "low_confidence")


def selected(page: Page) -> Locator:
    return page.locator('tbody tr[aria-selected="true"]')


def assert_in_words(rows: Locator) -> None:
    for text in rows.all_inner_texts():
        for code in CODES:
            assert code not in text, (code, text)


@pytest.fixture
def requests(
    submit_security_event: Callable[[str], ApprovalRequest],
) -> list[ApprovalRequest]:
    return [submit_security_event(f"evt-sec-{n}") for n in range(1, 5)]


@pytest.fixture
def held(pipeline: Pipeline, roles: None) -> list[Run]:
    """Three runs held in retry_exhausted: the classifier never answered."""
    runs = []
    for n in range(1, 4):
        event = make_event(event_id=f"evt-held-{n}", subject=f"Access question {n}")
        runs.append(pipeline.run(pipeline.submit(event, [TIMEOUT, TIMEOUT])))
    return runs


def test_an_approver_moves_through_the_inbox_with_j_and_k_and_opens_with_enter(
    page: Page, approver: Person, requests: list[ApprovalRequest]
) -> None:
    log_in(page, approver)
    expect(page).to_have_url(re.compile(r"/approvals/$"))
    rows = page.get_by_test_id("inbox").locator("tbody tr")
    expect(rows).to_have_count(4)
    expect(page.get_by_test_id("keys")).to_contain_text("j / k")
    expect(rows.first).to_contain_text("Queue an account review: Suspicious sign-ins")
    expect(rows.first.locator(".badge")).to_have_text("Due")
    assert_in_words(rows)

    page.keyboard.press("j")
    page.keyboard.press("j")
    expect(selected(page)).to_have_count(1)
    screenshot(page, "inbox")  # the second request selected
    expect(selected(page)).to_contain_text(f"#{requests[1].pk} · evt-sec-2")
    expect(selected(page)).to_have_class(re.compile(r"\bselected\b"))
    page.keyboard.press("k")
    expect(selected(page)).to_contain_text(f"#{requests[0].pk} · evt-sec-1")
    page.keyboard.press("Enter")

    expect(page).to_have_url(re.compile(rf"/approvals/{requests[0].pk}/$"))
    expect(page.get_by_role("heading", level=1)).to_have_text(
        "Queue an account review for Suspicious sign-ins"
    )

    page.go_back()
    for key in ("j", "j", "j", "k"):
        page.keyboard.press(key)
    expect(selected(page)).to_contain_text("evt-sec-2")
    page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(rf"/approvals/{requests[1].pk}/$"))


def test_an_ops_lead_claims_runs_in_bulk_with_the_mouse_and_the_x_key(
    page: Page, make_person: Callable[..., Person], held: list[Run]
) -> None:
    lead = make_person("olga", "ops-leads")
    rui = make_person("rui", "recovery-staff")
    queue_claim(run_id=held[2].pk, user=rui.user)
    log_in(page, lead, "/ops/queues/retry_exhausted/")

    table = page.get_by_test_id("queue-items")
    rows = table.locator("tbody tr")
    expect(rows).to_have_count(3)
    expect(page.get_by_role("heading", level=1)).to_contain_text("Classifier unavailable")
    expect(rows.first).to_contain_text("Access question 1")
    assert_in_words(rows)

    page.get_by_placeholder("event id, fingerprint, customer").fill("jjj")
    expect(selected(page)).to_have_count(0)  # keys typed into a field are the field's
    page.locator("h1").click()
    page.keyboard.press("j")
    page.keyboard.press("x")  # the first run, from the keyboard
    expect(page.get_by_label(f"Select run {held[0].pk}")).to_be_checked()
    page.get_by_label(f"Select run {held[1].pk}").check()  # the second, with the mouse
    page.get_by_label(f"Select run {held[2].pk}").check()  # rui's: it stays rui's
    page.get_by_role("button", name="Claim selected").click()

    expect(page.get_by_role("status")).to_have_text("Claimed 2 runs; 1 was already taken by rui.")
    expect(page).to_have_url(re.compile(r"/ops/queues/retry_exhausted/"))
    expect(page.get_by_test_id(f"owner-{held[0].pk}")).to_have_text("olga")
    expect(page.get_by_test_id(f"owner-{held[1].pk}")).to_have_text("olga")
    expect(page.get_by_test_id(f"owner-{held[2].pk}")).to_have_text("rui")
    owners = dict(Run.objects.values_list("pk", "owner__username"))
    assert owners == {held[0].pk: "olga", held[1].pk: "olga", held[2].pk: "rui"}
    claims = RecoveryAction.objects.filter(action="claim", actor=lead.user)
    assert sorted(claims.values_list("run_id", flat=True)) == [held[0].pk, held[1].pk]

    page.keyboard.press("j")
    expect(selected(page)).to_contain_text("Access question 1")
    screenshot(page, "queue")  # after the claim, the first run selected
    page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(rf"/runs/{held[0].pk}/$"))
