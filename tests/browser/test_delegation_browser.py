"""Delegation: an approver going away lets a colleague of another team decide her requests
for a window; inside it he decides one (for her), except one he acted on himself; after it
he may not see them."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from approvals.models import ApprovalDecision, ApprovalRequest, ApprovalStatus
from audit.models import AuditEvent
from console.views.approvals import RESULT_MESSAGES
from tests.browser.conftest import PLAYWRIGHT_MISSING, Person, log_in, screenshot

pytest.importorskip("playwright.sync_api", reason=PLAYWRIGHT_MISSING, exc_type=ImportError)
from playwright.sync_api import BrowserContext, Page, expect


def test_delegation_inside_the_window_decides_for_her_then_refused_after_it(
    new_context: Callable[..., BrowserContext],
    page: Page,
    approver: Person,
    make_person: Callable[..., Person],
    submit_security_event: Callable[[str], ApprovalRequest],
) -> None:
    fred = make_person("fred", "finance-approvers")
    first = submit_security_event("evt-away-1")
    acted = submit_security_event("evt-away-2")
    later = submit_security_event("evt-away-3")
    AuditEvent.objects.create(  # fred corrected this run's reading before
        run_id=acted.run_id, actor=fred.user, actor_label="fred", action="run.correct"
    )

    log_in(page, approver, "/me/delegation/")
    form = page.get_by_test_id("delegate-form")
    form.get_by_label("Who decides for me").select_option(label="fred")
    until = timezone.localtime(timezone.now() + timedelta(hours=2))
    form.get_by_label("Until").fill(until.strftime("%Y-%m-%dT%H:%M"))
    form.get_by_label("Why").fill("holiday")
    form.get_by_role("button", name="Let them decide for me").click()
    expect(page.get_by_text("fred decides your approvals in that window.")).to_be_visible()
    expect(page.get_by_test_id("given")).to_contain_text("in force")

    other = new_context().new_page()
    log_in(other, fred, f"/approvals/{first.pk}/")
    expect(other.get_by_test_id("delegations")).to_contain_text("ana is away until")
    other.get_by_role("button", name="Approve", exact=True).click()
    expect(other.get_by_role("status")).to_have_text(RESULT_MESSAGES["approved"])
    expect(other.get_by_test_id("decisions")).to_contain_text("fred for ana")
    screenshot(other, "delegate-decided")
    decision = ApprovalDecision.objects.get(request=first)
    assert (decision.user, decision.on_behalf_of) == (fred.user, approver.user)

    # Separation of duties holds through the delegation.
    other.goto(f"/approvals/{acted.pk}/")
    expect(other.get_by_role("button", name="Approve", exact=True)).to_have_count(0)
    expect(other.get_by_test_id("cannot-decide")).to_be_visible()

    # After the window: her requests are not his to see.
    with time_machine.travel(timezone.now() + timedelta(hours=3), tick=True):
        answer = other.goto(f"/approvals/{later.pk}/")
        assert answer is not None and answer.status == 404
        other.goto("/approvals/")
        expect(other.get_by_test_id("inbox")).to_have_count(0)
    later.refresh_from_db()
    assert later.status == ApprovalStatus.PENDING
