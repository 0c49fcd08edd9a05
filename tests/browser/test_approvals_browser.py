"""The approver console in a real browser: log in, find the request, read the evidence, decide."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from approvals.models import ApprovalDecision, ApprovalRequest, ApprovalStatus
from automation.models import Effect, Outcome, Run, State
from console.views.approvals import RESULT_MESSAGES
from tests.browser.conftest import (
    PLAYWRIGHT_MISSING,
    SOURCE_SENTENCE,
    Person,
    log_in,
    screenshot,
)

pytest.importorskip("playwright.sync_api", reason=PLAYWRIGHT_MISSING, exc_type=ImportError)
from playwright.sync_api import BrowserContext, Locator, Page, expect


def inbox_row(page: Page, event_id: str) -> Locator:
    return page.get_by_test_id("inbox").locator("tbody tr", has_text=event_id)


def open_from_inbox(page: Page, request: ApprovalRequest) -> None:
    page.goto("/approvals/")
    inbox_row(page, request.run.event_id).get_by_role("link").click()
    expect(page).to_have_url(re.compile(rf"/approvals/{request.pk}/$"))


def message(page: Page) -> Locator:
    return page.get_by_role("status")


def param(page: Page, name: str) -> Locator:
    """The value cell of the proposed effect's parameter whose label is exactly `name`."""
    row = page.get_by_test_id("effect-params").locator(f"tr:has(th:text-is('{name}'))")
    return row.locator("td")


def test_approver_finds_the_request_reads_the_evidence_and_approves_it(
    page: Page, approver: Person, waiting: ApprovalRequest
) -> None:
    log_in(page, approver)

    # Logging in lands the approver on the inbox, with one request waiting.
    expect(page).to_have_url(re.compile(r"/approvals/$"))
    expect(page.locator("form.logout")).to_contain_text(approver.username)
    expect(page.get_by_role("heading", name="Approvals waiting")).to_be_visible()
    expect(page.get_by_test_id("nav-inbox-count")).to_have_text("1")
    rows = page.get_by_test_id("inbox").locator("tbody tr")
    expect(rows).to_have_count(1)
    row = rows.first
    link = row.get_by_role(
        "link", name=re.compile(r"^Queue an account review: Suspicious sign-ins")
    )
    expect(link.locator("small.code")).to_have_text(f"#{waiting.pk} · evt-sec-1")
    expect(row).to_contain_text("Security review")  # the route, in words
    why = "Queue an account review needs 1 approval from Security approvers"
    expect(row).to_contain_text(why)
    expect(row.locator("small.code", has_text="security_sensitive")).to_have_count(1)
    expect(row).to_contain_text("0 of 1")
    expect(row.locator(".badge")).to_have_text("Due")
    screenshot(page, "inbox")

    link.click()

    expect(page).to_have_url(re.compile(rf"/approvals/{waiting.pk}/$"))
    expect(page.get_by_role("heading", level=1)).to_have_text(
        "Queue an account review for Suspicious sign-ins"
    )
    expect(page.locator("p.lead small.code")).to_have_text(f"#{waiting.pk} · evt-sec-1")
    expect(page.get_by_test_id("request-status")).to_have_text("Waiting")
    expect(page.get_by_test_id("run-state")).to_have_text("Waiting for approval")
    expect(param(page, "Effect")).to_have_text(re.compile(r"^Queue an account review\b"))
    expect(param(page, "Effect").locator("small.code")).to_have_text("queue_account_review")
    expect(param(page, "Route")).to_have_text(re.compile(r"^Security review\b"))
    expect(param(page, "Route").locator("small.code")).to_have_text("security_review")
    expect(param(page, "Event id")).to_contain_text("evt-sec-1")
    expect(param(page, "Subject")).to_contain_text("Suspicious sign-ins")
    expect(page.get_by_test_id("request-text").locator("mark")).to_have_text(SOURCE_SENTENCE)
    expect(page.get_by_text("The reader's reason: Security sensitive")).to_be_visible()
    expect(page.get_by_test_id("reason-code")).to_have_text("security_sensitive")  # secondary
    expect(page.locator("ul.rules li")).to_have_text([re.compile(rf"^{why}\b")])
    expect(page.locator("ul.rules small.code")).to_have_text(["approval.queue_account_review"])
    expect(page.get_by_test_id("binding")).to_contain_text(waiting.fingerprint)
    timeline = page.get_by_test_id("timeline")
    expect(timeline.locator("tbody tr", has_text="Look up")).not_to_have_count(0)
    expect(timeline.locator("tbody tr", has_text="Decide")).not_to_have_count(0)
    expect(page.get_by_test_id("decisions")).to_contain_text("No decisions yet.")
    screenshot(page, "evidence")

    page.get_by_role("button", name="Approve").click()

    expect(message(page)).to_have_text(RESULT_MESSAGES["approved"])
    expect(page.get_by_test_id("run-state")).to_have_text("Done")
    expect(page.get_by_test_id("request-status")).to_have_text("Approved")
    expect(page.get_by_test_id("closed")).to_be_visible()
    expect(page.get_by_role("button", name="Approve")).to_have_count(0)
    expect(page.get_by_test_id("decisions")).to_contain_text(f"{approver.username} approved")
    expect(page.get_by_test_id("nav-inbox-count")).to_have_text("0")

    run = Run.objects.get(pk=waiting.run_id)
    assert run.state == State.COMPLETED
    decision = ApprovalDecision.objects.get(request=waiting)
    assert decision.user == approver.user
    assert decision.approve and decision.counted
    assert decision.seen_fingerprint == waiting.fingerprint
    effect = Effect.objects.get(run=run)
    assert effect.name == "queue_account_review"
    assert effect.authorization["approval_request"] == waiting.pk


def test_two_approver_request_completes_only_after_the_second_approval(
    page: Page,
    approver: Person,
    second_approver: Person,
    two_approver_policy: str,
    submit_security_event: Callable[[str], ApprovalRequest],
) -> None:
    request = submit_security_event("evt-sec-2")
    assert request.policy_version == two_approver_policy

    log_in(page, approver)
    expect(inbox_row(page, "evt-sec-2")).to_contain_text("0 of 2")
    open_from_inbox(page, request)
    expect(page.get_by_text("needs 2 distinct approvers")).to_be_visible()
    page.get_by_role("button", name="Approve").click()

    expect(message(page)).to_have_text(RESULT_MESSAGES["recorded"])
    expect(page.get_by_test_id("run-state")).to_have_text("Waiting for approval")
    expect(page.get_by_test_id("request-status")).to_have_text("Waiting")
    expect(page.get_by_test_id("cannot-decide")).to_be_visible()
    assert Run.objects.get(pk=request.run_id).state == State.APPROVAL_REQUIRED
    assert not Effect.objects.exists()

    page.get_by_role("button", name="Log out").click()
    expect(page).to_have_url(re.compile(r"/accounts/login/"))
    expect(page.locator("form.logout")).to_have_count(0)

    log_in(page, second_approver, path="/approvals/")
    expect(page.locator("form.logout")).to_contain_text(second_approver.username)
    expect(inbox_row(page, "evt-sec-2")).to_contain_text("1 of 2")
    open_from_inbox(page, request)
    expect(page.get_by_test_id("decisions")).to_contain_text(f"{approver.username} approved")
    page.get_by_role("button", name="Approve").click()

    expect(message(page)).to_have_text(RESULT_MESSAGES["approved"])
    expect(page.get_by_test_id("run-state")).to_have_text("Done")
    assert Run.objects.get(pk=request.run_id).state == State.COMPLETED
    approvers = ApprovalDecision.objects.filter(request=request, counted=True, approve=True)
    assert {d.user_id for d in approvers} == {approver.user.pk, second_approver.user.pk}
    assert Effect.objects.filter(run_id=request.run_id).count() == 1


def test_rejecting_needs_a_comment_and_then_fails_the_run(
    page: Page, approver: Person, waiting: ApprovalRequest
) -> None:
    log_in(page, approver)
    open_from_inbox(page, waiting)

    page.get_by_role("button", name="Reject").click()

    expect(page.locator(".errorlist")).to_have_text(
        "Say why you reject it: the comment goes on the record."
    )
    expect(page.get_by_test_id("request-status")).to_have_text("Waiting")
    assert not ApprovalDecision.objects.exists()

    page.get_by_label("Comment").fill("Lisbon is where the customer lives; not suspicious.")
    page.get_by_role("button", name="Reject").click()

    expect(message(page)).to_have_text(RESULT_MESSAGES["rejected"])
    expect(page.get_by_test_id("run-state")).to_have_text("Failed")
    expect(page.locator("p.lead")).to_contain_text("Run state: Failed (Rejected).")
    expect(page.get_by_test_id("request-status")).to_have_text("Rejected")
    expect(page.get_by_test_id("decisions")).to_contain_text("customer lives")
    run = Run.objects.get(pk=waiting.run_id)
    assert run.state == State.FAILED
    assert run.outcome == Outcome.APPROVAL_REJECTED
    assert not Effect.objects.exists()


def test_user_without_permission_gets_403_for_the_inbox_and_a_forged_decision(
    page: Page,
    make_person: Callable[..., Person],
    waiting: ApprovalRequest,
    live_server: Any,
) -> None:
    nobody = make_person("nobody")
    log_in(page, nobody, path="/approvals/")

    expect(page.get_by_role("heading", name="You may not open this page")).to_be_visible()
    response = page.goto("/approvals/")
    assert response is not None and response.status == 403
    response = page.goto(f"/approvals/{waiting.pk}/")
    assert response is not None and response.status == 403

    # A well-formed, CSRF-valid POST straight to the decision URL, with this user's session.
    context: BrowserContext = page.context
    csrf = next(c["value"] for c in context.cookies() if c["name"] == "csrftoken")
    forged = context.request.post(
        f"{live_server.url}/approvals/{waiting.pk}/decide",
        form={
            "decision": "approve",
            "comment": "",
            "seen_fingerprint": waiting.fingerprint,
            "seen_workflow_version": waiting.workflow_version,
            "seen_policy_version": waiting.policy_version,
            "seen_effect": waiting.effect,
        },
        headers={"X-CSRFToken": csrf, "Referer": f"{live_server.url}/approvals/"},
        max_redirects=0,
    )
    assert forged.status == 403
    assert "CSRF" not in forged.text()  # refused for the permission, not the token
    assert not ApprovalDecision.objects.exists()
    assert ApprovalRequest.objects.get(pk=waiting.pk).status == ApprovalStatus.PENDING
    assert Run.objects.get(pk=waiting.run_id).state == State.APPROVAL_REQUIRED


def test_inbox_and_evidence_work_without_javascript(
    new_context: Callable[..., BrowserContext], approver: Person, waiting: ApprovalRequest
) -> None:
    page = new_context(java_script_enabled=False).new_page()
    log_in(page, approver)

    row = inbox_row(page, "evt-sec-1")
    expect(row.locator(".badge")).to_have_text("Due")
    row.get_by_role("link").click()
    expect(page.get_by_test_id("request-text").locator("mark")).to_have_text(SOURCE_SENTENCE)
    page.get_by_role("button", name="Approve").click()

    expect(message(page)).to_have_text(RESULT_MESSAGES["approved"])
    expect(page.get_by_test_id("run-state")).to_have_text("Done")
    assert Run.objects.get(pk=waiting.run_id).state == State.COMPLETED


def run_the_worker() -> int:
    """Do the work waiting in the broker as a worker would, its own follow-ups inline."""
    from django.utils.module_loading import import_string
    from django_q.conf import Conf
    from django_q.models import OrmQ
    from django_q.signing import SignedPackage

    Conf.SYNC = True  # what the work sends next runs at once (tasks_run_inline restores it)
    done = 0
    for row in OrmQ.objects.order_by("id"):
        package = SignedPackage.loads(row.payload)
        row.delete()
        import_string(package["func"])(*package["args"], **package["kwargs"])
        done += 1
    return done


def test_after_approving_the_page_says_what_is_being_done_and_updates_when_it_is_done(
    page: Page, approver: Person, waiting: ApprovalRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It said "Run state: Waiting for approval" after the approval, until reloaded by hand
    once the worker had done the work."""
    from django_q.conf import Conf

    monkeypatch.setattr(Conf, "SYNC", False)  # the follow-up waits for a worker, as deployed
    log_in(page, approver)
    open_from_inbox(page, waiting)
    page.get_by_role("button", name="Approve").click()

    expect(message(page)).to_have_text(RESULT_MESSAGES[ApprovalStatus.APPROVED])
    after = page.get_by_test_id("after-decision")
    expect(after).to_have_text(
        "Approved: “Queue an account review” is being done. This page updates by itself when it "
        "is done."
    )
    expect(page.locator("p.lead")).not_to_contain_text("Waiting for approval")
    expect(page.get_by_test_id("run-state")).to_have_count(0)
    assert Run.objects.get(pk=waiting.run_id).state == State.APPROVAL_REQUIRED
    screenshot(page, "evidence-approved-pending")

    assert run_the_worker() >= 1

    # No reload by hand: the page reloads itself while the work is pending.
    expect(after).to_have_text("Approved: “Queue an account review” was done. The run is done.")
    expect(page.get_by_test_id("run-state")).to_have_text("Done")
    assert Run.objects.get(pk=waiting.run_id).state == State.COMPLETED
    assert page.locator("meta[http-equiv=refresh]").count() == 0
