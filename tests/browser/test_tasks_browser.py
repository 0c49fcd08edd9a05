"""A team's task in a real browser: a member of the insurer's claims desk (tests/approvals/
claims.py, a business of the tests' own), in no staff role, finds the task the approved claim
left for the team, takes it, writes on its thread naming a colleague, and marks it done with
a note; the colleague is told and sees the unread count in the navigation."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from automation.effects.models import Task
from notifications.services import notifications_find
from tests.approvals.claims import claims_channel
from tests.browser.conftest import PLAYWRIGHT_MISSING, Person, log_in, screenshot
from tests.conftest import Pipeline
from tests.team_work import DESK, claims_task

pytest.importorskip("playwright.sync_api", reason=PLAYWRIGHT_MISSING, exc_type=ImportError)
from django.utils import timezone
from playwright.sync_api import BrowserContext, Page, expect


@pytest.fixture
def task(policy: None, roles: None) -> Task:
    return claims_task(Pipeline(claims_channel()))


def test_a_team_member_takes_a_task_comments_and_marks_it_done(
    new_context: Callable[..., BrowserContext],
    page: Page,
    make_person: Callable[..., Person],
    task: Task,
) -> None:
    dana = make_person("dana", DESK)
    dev = make_person("dev", DESK)
    dev.user.email = "dev@insurer.example"
    dev.user.save(update_fields=["email"])
    assert not dana.user.is_staff

    log_in(page, dana)
    expect(page).to_have_url(re.compile(r"/tasks/$"))  # a team's member lands on its tasks
    page.get_by_role("link", name=re.compile("Open a claim: Claim: van damaged")).click()
    expect(page.get_by_test_id("task-status")).to_have_text("Open: nobody has taken it")
    expect(page.get_by_test_id("task-parameters")).to_contain_text("LX21 VAN")

    page.get_by_test_id("task-claim").click()
    expect(page.get_by_role("status")).to_have_text("You hold the task: the team sees it is yours.")
    expect(page.get_by_test_id("task-status")).to_contain_text("Taken by dana")

    thread = page.get_by_test_id("comments")
    thread.get_by_label("Write on the thread").fill("@dev the fleet office wants a call back.")
    thread.get_by_role("button", name="Add comment").click()
    expect(page).to_have_url(re.compile(rf"/tasks/{task.pk}/#comments$"))
    expect(page.get_by_test_id("comment")).to_contain_text("the fleet office wants a call back")
    expect(page.get_by_test_id("comment").locator("mark.mention")).to_have_text("@dev")

    page.get_by_label("Note").fill("Claim 4411 opened in the claims system.")
    page.get_by_test_id("task-done").click()
    expect(page.get_by_role("status")).to_have_text("Marked done.")
    expect(page.get_by_test_id("task-status")).to_contain_text("Done by dana")
    expect(page.get_by_test_id("task-note")).to_have_text("Claim 4411 opened in the claims system.")
    expect(page.get_by_test_id("task-actions")).to_have_count(0)
    screenshot(page, "task-done")

    notifications_find(now=timezone.now())
    colleague = new_context().new_page()
    log_in(colleague, dev, "/me/notifications/list/")
    expect(colleague.get_by_test_id("nav-unread-count")).to_have_text("1")
    told = colleague.get_by_test_id("notifications")
    expect(told).to_contain_text("dana mentions you on task")
    told.get_by_role("link", name=f"Task {task.pk}").click()
    expect(colleague.get_by_test_id("task-status")).to_contain_text("Done by dana")
    colleague.go_back()
    colleague.get_by_test_id("mark-all-read").click()
    expect(colleague.get_by_role("status")).to_have_text("Marked read: 1 notification.")
    expect(colleague.get_by_test_id("nav-unread-count")).to_have_text("0")
