"""Putting a misreading right in a real browser: an approver sends a request back, an ops
lead corrects the reading, and the corrected run returns for approval with a fresh binding;
a rejected run is corrected and decided again as a new run. The business is an insurer's
claims desk of the tests' own (tests/approvals/claims.py)."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from approvals.models import ApprovalRequest, ApprovalStatus
from approvals.services import approval_decide
from automation.models import Effect, EffectStatus, Outcome, Run, State
from console.views.approvals import RESULT_MESSAGES
from tests.approvals.claims import claims_channel, misread_van_claim
from tests.browser.conftest import (
    PLAYWRIGHT_MISSING,
    Person,
    choose_in_correction,
    log_in,
    screenshot,
)
from tests.conftest import Pipeline

pytest.importorskip("playwright.sync_api", reason=PLAYWRIGHT_MISSING, exc_type=ImportError)
from playwright.sync_api import BrowserContext, Page, expect

REASON = "A van claim: the IBAN is the fleet office's signature, not a new account."


@pytest.fixture
def claims(policy: None, roles: None) -> Pipeline:
    return Pipeline(claims_channel())


@pytest.fixture
def waiting(claims: Pipeline) -> ApprovalRequest:
    return misread_van_claim(claims)


@pytest.fixture
def payments_approver(make_person: Callable[..., Person], claims: Pipeline) -> Person:
    return make_person("pat", "payments-approvers")


@pytest.fixture
def claims_manager(make_person: Callable[..., Person], claims: Pipeline) -> Person:
    return make_person("clara", "claims-managers")


@pytest.fixture
def ops_lead(make_person: Callable[..., Person]) -> Person:
    return make_person("olga", "ops-leads")


def correct_as_a_van_claim(page: Page) -> None:
    """Fill the correction form: a motor claim with its registration, opened as a claim; the
    IBAN read is dropped."""
    # The motor claim's own field comes with its type (the form is shown again for it).
    choose_in_correction(page, "Request type", value="motor_claim")
    page.get_by_label("Registration").fill("LX21 VAN")
    page.get_by_label("Route").select_option("claims_desk")
    choose_in_correction(page, "Effect", value="open_claim")
    page.get_by_label("Reason code").fill("van_damaged")
    iban = page.get_by_label("Iban")
    if iban.count():
        iban.fill("")
    page.get_by_label("Reason", exact=True).fill("Read the mail: a damaged van.")
    page.get_by_role("button", name="Save and resume").click()


def approve_in_browser(page: Page, request: ApprovalRequest) -> None:
    page.goto(f"/approvals/{request.pk}/")
    expect(page.get_by_test_id("request-status")).to_have_text("Waiting")
    page.get_by_role("button", name="Approve").click()
    expect(page.get_by_role("status")).to_have_text(RESULT_MESSAGES["approved"])
    expect(page.get_by_test_id("run-state")).to_have_text("Done")


def test_approver_sends_a_misread_request_back_and_the_corrected_run_is_approved(
    new_context: Callable[..., BrowserContext],
    waiting: ApprovalRequest,
    payments_approver: Person,
    ops_lead: Person,
    claims_manager: Person,
) -> None:
    approver_page = new_context().new_page()
    log_in(approver_page, payments_approver, f"/approvals/{waiting.pk}/")
    expect(approver_page.get_by_role("button", name="Send back")).to_be_visible()

    # A send back needs its reason.
    approver_page.get_by_role("button", name="Send back").click()
    expect(approver_page.get_by_text("Say what is wrong with the reading")).to_be_visible()
    assert ApprovalRequest.objects.get(pk=waiting.pk).status == ApprovalStatus.PENDING

    approver_page.get_by_label("Comment").fill(REASON)
    approver_page.get_by_role("button", name="Send back").click()

    expect(approver_page.get_by_role("status")).to_have_text(RESULT_MESSAGES["sent_back"])
    expect(approver_page.get_by_test_id("request-status")).to_have_text("Sent back")
    expect(approver_page.get_by_test_id("closed")).to_contain_text(REASON)
    expect(approver_page.get_by_role("button", name="Approve")).to_have_count(0)
    screenshot(approver_page, "sent-back-evidence")

    # The ops lead finds it in the sent-back queue, with who sent it back and why.
    page = new_context().new_page()
    log_in(page, ops_lead, "/ops/queues/sent_back/")
    row = page.get_by_test_id("queue-items").locator("tbody tr", has_text=str(waiting.run_id))
    expect(row).to_contain_text("the IBAN is the fleet office's signature")
    row.get_by_role("link").first.click()
    expect(page).to_have_url(re.compile(rf"/runs/{waiting.run_id}/$"))
    expect(page.get_by_test_id("run-outcome")).to_have_text("Sent back")
    expect(page.get_by_test_id("failure")).to_contain_text(
        f"Sent back by {payments_approver.username}: {REASON}"
    )
    screenshot(page, "sent-back-run")
    page.locator("[data-testid=run-actions] li[data-action=correct]").get_by_role(
        "link", name="Correct the reading"
    ).click()
    correct_as_a_van_claim(page)

    expect(page).to_have_url(re.compile(rf"/runs/{waiting.run_id}/$"))
    expect(page.get_by_test_id("run-state")).to_have_text("Waiting for approval")
    run = Run.objects.get(pk=waiting.run_id)
    fresh = ApprovalRequest.objects.get(run=run, status=ApprovalStatus.PENDING)
    assert fresh.pk != waiting.pk
    assert (fresh.effect, fresh.group) == ("open_claim", "claims-managers")
    assert fresh.binding() != waiting.binding()
    # The corrector may not approve what they corrected: no decision form for them.
    page.goto(f"/approvals/{fresh.pk}/")
    expect(page.get_by_role("button", name="Approve")).to_have_count(0)

    manager_page = new_context().new_page()
    log_in(manager_page, claims_manager, f"/approvals/{fresh.pk}/")
    expect(manager_page.get_by_test_id("binding")).to_contain_text(fresh.fingerprint)
    # The approver sees what came before: the request sent back, and why.
    earlier = manager_page.locator("li", has_text=f"#{waiting.pk} Sent back")
    expect(earlier).to_contain_text(f"“{REASON}”")
    approve_in_browser(manager_page, fresh)
    screenshot(manager_page, "sent-back-approved")

    run.refresh_from_db()
    assert run.state == State.COMPLETED
    (effect,) = Effect.objects.all()
    assert (effect.name, effect.status, effect.run_id) == (
        "open_claim",
        EffectStatus.DELIVERED,
        run.pk,
    )
    assert effect.authorization["approval_request"] == fresh.pk
    assert ApprovalRequest.objects.get(pk=waiting.pk).status == ApprovalStatus.SENT_BACK


def test_ops_lead_corrects_a_rejected_run_and_it_is_decided_again(
    new_context: Callable[..., BrowserContext],
    claims: Pipeline,
    waiting: ApprovalRequest,
    payments_approver: Person,
    ops_lead: Person,
    claims_manager: Person,
) -> None:
    with claims.capture():
        approval_decide(
            request_id=waiting.pk,
            user=payments_approver.user,
            approve=False,
            comment="not a bank change",
            seen=waiting.binding(),
        )
    claims.drain()
    rejected = Run.objects.get(pk=waiting.run_id)
    assert (rejected.state, rejected.outcome) == (State.FAILED, Outcome.APPROVAL_REJECTED)

    page = new_context().new_page()
    log_in(page, ops_lead, f"/runs/{rejected.pk}/")
    page.locator("[data-testid=run-actions] li[data-action=correct_rejected]").get_by_role(
        "link", name="Correct and decide again"
    ).click()
    expect(page).to_have_url(re.compile(rf"/runs/{rejected.pk}/correct$"))
    expect(page.locator("p.lead")).to_contain_text("as a new run")
    correct_as_a_van_claim(page)

    replay = Run.objects.get(replay_of=rejected)
    expect(page).to_have_url(re.compile(rf"/runs/{replay.pk}/$"))
    expect(page.get_by_role("status")).to_contain_text(f"new run, #{replay.pk}")
    expect(page.get_by_test_id("run-state")).to_have_text("Waiting for approval")
    expect(page.locator("p.lead")).to_contain_text(f"replay of run #{rejected.pk}")
    screenshot(page, "rejected-corrected")
    fresh = ApprovalRequest.objects.get(run=replay, status=ApprovalStatus.PENDING)
    assert fresh.group == "claims-managers"
    rejected.refresh_from_db()
    assert (rejected.state, rejected.outcome) == (State.FAILED, Outcome.APPROVAL_REJECTED)

    manager_page = new_context().new_page()
    log_in(manager_page, claims_manager, f"/approvals/{fresh.pk}/")
    approve_in_browser(manager_page, fresh)

    replay.refresh_from_db()
    assert replay.state == State.COMPLETED
    assert list(Effect.objects.values_list("name", "status", "run_id")) == [
        ("open_claim", EffectStatus.DELIVERED, replay.pk)
    ]
