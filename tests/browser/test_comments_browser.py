"""A comment on a run's thread, in a real browser: an approver asks the ops lead a question
from the evidence page on a phone; the ops lead is told by e-mail (a real SMTP server on
127.0.0.1), follows the link and reads it on the run page."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from approvals.models import ApprovalRequest, ApprovalStatus
from automation.models import RunComment
from notifications.tasks import notify
from tests.browser.conftest import PLAYWRIGHT_MISSING, Person, log_in, screenshot
from tests.mailserver import Inbox, mail_through

pytest.importorskip("playwright.sync_api", reason=PLAYWRIGHT_MISSING, exc_type=ImportError)
from playwright.sync_api import BrowserContext, Page, expect

PHONE = {"viewport": {"width": 390, "height": 844}, "is_mobile": True, "has_touch": True}
QUESTION = "@olga is AC-20931 a customer we know?\nThe sign-ins look odd to me."


@pytest.fixture
def outbox(settings: Any, live_server: Any) -> Iterator[Inbox]:
    with mail_through(settings, base_url=live_server.url) as server:
        yield server


def no_wider_than_the_screen(page: Page) -> None:
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    thread = page.get_by_test_id("comments").bounding_box()
    assert thread is not None and thread["x"] >= 0 and thread["x"] + thread["width"] <= 391
    assert overflow <= 0, f"the page scrolls sideways by {overflow}px"


def test_an_approver_asks_the_ops_lead_on_a_phone_and_the_lead_reads_it_on_the_run_page(
    new_context: Callable[..., BrowserContext],
    page: Page,
    approver: Person,
    make_person: Callable[..., Person],
    waiting: ApprovalRequest,
    outbox: Inbox,
) -> None:
    lead = make_person("olga", "ops-leads")
    lead.user.email = "olga@shop.example"
    lead.user.save(update_fields=["email"])
    phone = new_context(**PHONE).new_page()
    log_in(phone, approver, f"/approvals/{waiting.pk}/")

    thread = phone.get_by_test_id("comments")
    thread.get_by_label("Write on the thread").fill(QUESTION)
    thread.get_by_role("button", name="Add comment").click()

    expect(phone).to_have_url(re.compile(rf"/approvals/{waiting.pk}/#comments$"))
    expect(phone.get_by_text("Comment added to the run's thread.")).to_be_visible()
    comment = phone.get_by_test_id("comment")
    expect(comment).to_contain_text("ana")
    expect(comment.locator("mark.mention")).to_have_text("@olga")
    no_wider_than_the_screen(phone)
    screenshot(phone, "evidence-comment-phone")

    # The comment, a mention: the lead is told (the job the workers run every minute),
    # with a link to the comment itself.
    notify()
    (told,) = [r for r in outbox.received if r.recipients == ["olga@shop.example"]]
    assert told.message["Subject"] == f"ana mentions you on run {waiting.run_id}"
    link = re.search(r"https?://\S+#comment-\d+", told.message.get_content())
    assert link is not None

    assert urlsplit(link.group(0)).path == f"/runs/{waiting.run_id}/"
    log_in(page, lead, urlsplit(link.group(0)).path)
    shown = page.get_by_test_id("comment")
    expect(shown).to_contain_text("is AC-20931 a customer we know?")
    expect(shown.locator("mark.mention")).to_have_text("@olga")
    page.get_by_test_id("history").get_by_role("link", name="comment by ana").click()
    expect(page).to_have_url(re.compile(r"#comment-\d+$"))
    screenshot(page, "run-comment-thread")

    # The question changed nothing: the request still waits for a decision.
    waiting.refresh_from_db()
    assert waiting.status == ApprovalStatus.PENDING
    assert RunComment.objects.get().mentions == {"users": [lead.user.pk], "groups": []}
