"""Notification: an approver is e-mailed when a request waits for their group (a real SMTP
server on 127.0.0.1), follows the link in the mail, signs in, decides, and the run page says
who was told and when."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.utils import timezone

from approvals.models import ApprovalRequest, ApprovalStatus
from console.views.approvals import RESULT_MESSAGES
from notifications.models import Notification, Status
from notifications.tasks import notify
from tests.browser.conftest import PLAYWRIGHT_MISSING, Person, screenshot
from tests.mailserver import Inbox, mail_through

pytest.importorskip("playwright.sync_api", reason=PLAYWRIGHT_MISSING, exc_type=ImportError)
from playwright.sync_api import Page, expect


@pytest.fixture
def outbox(settings: Any, live_server: Any) -> Iterator[Inbox]:
    with mail_through(settings, base_url=live_server.url) as server:
        yield server


def test_notification_an_approver_is_told_follows_the_link_decides_and_the_run_says_so(
    page: Page,
    make_person: Callable[..., Person],
    submit_security_event: Callable[[str], ApprovalRequest],
    outbox: Inbox,
) -> None:
    ana = make_person("ana", "security-approvers")
    ana.user.email = "ana@shop.example"
    ana.user.save(update_fields=["email"])
    lead = make_person("olga", "ops-leads")
    request = submit_security_event("evt-told-1")

    assert notify()["sent"] == 1  # the job the workers run every minute

    (mail,) = outbox.received
    assert mail.recipients == ["ana@shop.example"]
    text = mail.message.get_content()
    link = re.search(r"https?://\S+/approvals/\d+/", text)
    assert link is not None and link.group(0).endswith(f"/approvals/{request.pk}/")
    assert "Of: Security approvers (you are a member)." in text

    # The link, signed out: the sign-in form, then the evidence it pointed at.
    page.goto(link.group(0))
    expect(page).to_have_url(re.compile(r"/accounts/login/"))
    page.get_by_label("Username").fill(ana.username)
    page.get_by_label("Password").fill(ana.password)
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(re.compile(rf"/approvals/{request.pk}/$"))
    page.get_by_role("button", name="Approve").click()
    expect(page.get_by_role("status")).to_have_text(RESULT_MESSAGES["approved"])
    request.refresh_from_db()
    assert request.status == ApprovalStatus.APPROVED

    # The run page, for whoever reads runs: who was told of it, and when.
    told = Notification.objects.get(approval=request)
    assert told.status == Status.SENT and told.sent_at is not None
    page.get_by_role("button", name="Log out").click()
    page.goto(f"/runs/{request.run_id}/")
    page.get_by_label("Username").fill(lead.username)
    page.get_by_label("Password").fill(lead.password)
    page.get_by_role("button", name="Log in").click()
    at = timezone.localtime(told.sent_at).strftime("%H:%M")
    expect(page.get_by_test_id("told")).to_contain_text(
        f"told ana (security-approvers) at {at} · a request waits for your group"
    )
    screenshot(page, "run-told")
