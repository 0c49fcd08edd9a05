"""Each role's main job uses only human labels on screen, asserted on visible text.

Every role walks its usual journey through the real pages (runs set up through the real
pipeline, as in test_ops_browser and test_approvals_browser). On each page the text a person
reads in <main> must name things in words ("Needs a person", "Notify the team"), never by
their codes (`needs_review`, `send_internal_notification`); a code may stay as quiet
secondary text. A page that shows a code is noted, and the journey goes on, so that one run
reports every page that does.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from approvals.models import ApprovalRequest, ApprovalStatus
from automation.models import Effect, EffectStatus, Outcome, Run, State
from console.views.approvals import RESULT_MESSAGES
from tests.browser import test_ops_browser as ops
from tests.browser import test_policy_browser as policy_pages
from tests.browser.conftest import PLAYWRIGHT_MISSING, Person, log_in, screenshot
from tests.conftest import Pipeline, decision_for, make_event
from tests.console import test_inbox_lists as inbox_lists
from tests.downstream import Downstream

pytest.importorskip("playwright.sync_api", reason=PLAYWRIGHT_MISSING, exc_type=ImportError)
from playwright.sync_api import Page, expect

# The ops journeys' runs, made as test_ops_browser makes them (its fixtures, used here too).
confidence_threshold = ops.confidence_threshold
low_confidence_run = ops.low_confidence_run
deliver_notifications_to = ops.deliver_notifications_to
hold_unavailable = ops.hold_unavailable
receiver_port = ops.receiver_port
receiver_back = ops.receiver_back
ops_lead = ops.ops_lead
recovery_staff = ops.recovery_staff
auditor = ops.auditor

NOTIFY = ops.NOTIFY

# Codes a person must never have to read as primary text on these pages.
CODES = (
    "needs_review",
    "approval_required",
    "low_confidence",
    "risk_signal",
    "retry_exhausted",
    "classification_invalid",
    "effect_unavailable",
    "queue_account_review",
    "send_internal_notification",
    "create_follow_up",
    "service_desk",
    "security_review",
    "run.hold",
    "run.classify",
    "retry_wait",
    "idempotent_replay",
    # The groups, as requests are routed and queues owned.
    "security-approvers",
    "finance-approvers",
    "ops-leads",
    "recovery-staff",
    "auditors",
    # Verdicts and signals, as simulations and previews judge runs.
    "execute",
    "account_access",
)
# Where codes may stay, as quiet secondary text.
SECONDARY = "small.code, code, .code, [data-secondary]"

# main's text without its secondary elements. Hidden in place (not removed from a detached
# clone): a detached element's innerText is its textContent, which would also read collapsed
# <details>, such as the classifier's raw answer, that nobody sees until they open it.
PRIMARY_TEXT_JS = """(main, selector) => {
  const quiet = [...main.querySelectorAll(selector)];
  const before = quiet.map((e) => e.style.display);
  quiet.forEach((e) => { e.style.display = "none"; });
  const text = main.innerText;
  quiet.forEach((e, i) => { e.style.display = before[i]; });
  return text;
}"""


def primary_text(page: Page) -> str:
    """What a person reads in <main>: `main.inner_text()` without the secondary text.

    inner_text alone would include `<small class="code">` and `<code>` (where a code may
    stay), so the elements matching SECONDARY are hidden for the reading and shown again
    after it.
    """
    return str(page.locator("main").evaluate(PRIMARY_TEXT_JS, SECONDARY))


def whole_word(code: str) -> re.Pattern[str]:
    """`code` as a whole word: `risk_signal` is not found in `risk_signals`."""
    return re.compile(rf"(?<!\w){re.escape(code)}(?!\w)")


def codes_in(text: str) -> list[str]:
    """The CODES the text shows, each as a whole word."""
    return [c for c in CODES if whole_word(c).search(text)]


class Journey:
    """The pages one role goes through: their labels are checked at once, their codes noted
    and reported together at the end (`assert_in_words`)."""

    def __init__(self, page: Page, role: str) -> None:
        self.page = page
        self.role = role
        self.leaks: list[str] = []

    def reads(self, where: str, *labels: str) -> None:
        """This page shows each of `labels` as primary text, and none of CODES."""
        text = primary_text(self.page)
        for words in labels:
            assert words in text, f"{self.role}, {where}: {words!r} is not shown"
        for code in codes_in(text):
            lines = [li.strip() for li in text.splitlines() if whole_word(code).search(li)]
            self.leaks.append(f"{where} ({self.page.url}) shows {code!r} in: {lines}")

    def never(self, where: str, *phrases: str) -> None:
        """None of `phrases` is on this page at all, secondary text included: a code
        beside words it does not belong to ("Done execute"), a word said twice
        ("Stopped by policy Stopped by policy")."""
        text = " ".join(str(self.page.locator("main").inner_text()).split())
        for phrase in phrases:
            if phrase in text:
                self.leaks.append(f"{where} ({self.page.url}) says {phrase!r}")

    def assert_in_words(self) -> None:
        assert not self.leaks, f"{self.role} reads codes as primary text:\n" + "\n".join(self.leaks)


# --- the finance approver's request --------------------------------------------------------


@pytest.fixture
def finance_approver(make_person: Callable[..., Person]) -> Person:
    return make_person("fina", "finance-approvers")


# The inbox tests' policy with an amount limit (a fixture), and their request over it.
amount_policy = inbox_lists.amount_policy


@pytest.fixture
def over_the_limit(pipeline: Pipeline, amount_policy: None, roles: None) -> ApprovalRequest:
    """A refund of 12000 EUR to notify finance about: it waits for a finance approver."""
    request = inbox_lists.over_the_limit(pipeline)
    assert request.group == "finance-approvers"
    return request


# --- the journeys --------------------------------------------------------------------------


def test_security_approver_decides_an_account_review_in_words(
    page: Page, approver: Person, waiting: ApprovalRequest
) -> None:
    journey = Journey(page, "security approver")
    log_in(page, approver)

    expect(page).to_have_url(re.compile(r"/approvals/$"))
    journey.reads(
        "inbox",
        "Approvals waiting",
        "Queue an account review: Suspicious sign-ins",
        "Security review",
        "Due",
        "Queue an account review needs 1 approval from Security approvers",
    )
    page.get_by_role("link", name=re.compile(r"^Queue an account review: Suspicious")).click()

    expect(page).to_have_url(re.compile(rf"/approvals/{waiting.pk}/$"))
    journey.reads(
        "evidence page",
        "Queue an account review for Suspicious sign-ins",
        "Waiting for approval",
        "Security review",
        "Read as Security, for Security review",
        "The reader's reason: Security sensitive",
        "Look up",
        "Decide",
    )
    screenshot(page, "evidence")
    page.get_by_role("button", name="Approve").click()

    expect(page.get_by_role("status")).to_have_text(RESULT_MESSAGES[ApprovalStatus.APPROVED])
    journey.reads(
        "evidence page after approving",
        "Approved",
        "Run state: Done",
        "This request is approved; nothing more to decide here.",
        "Deliver",
    )
    assert Run.objects.get(pk=waiting.run_id).state == State.COMPLETED
    journey.assert_in_words()


def test_finance_approver_decides_an_amount_over_the_limit_in_words(
    page: Page, finance_approver: Person, over_the_limit: ApprovalRequest
) -> None:
    request = over_the_limit
    journey = Journey(page, "finance approver")
    log_in(page, finance_approver)

    expect(page).to_have_url(re.compile(r"/approvals/$"))
    journey.reads(
        "inbox",
        "Notify the team: Refund for order 5512",
        "12,000.00 EUR",
        "Finance",
        "Amount 12000 is over 10000: a person approves it for standard accounts",
    )
    page.get_by_role("link", name=re.compile(r"^Notify the team: Refund")).click()

    expect(page).to_have_url(re.compile(rf"/approvals/{request.pk}/$"))
    journey.reads(
        "evidence page",
        "Notify the team for Refund for order 5512",
        "Waiting for approval",
        "Amount 12000 is over 10000",
        "Read as Billing, for Finance",
        "Routed to Finance approvers",
        "Standard account",
    )
    page.get_by_role("button", name="Approve").click()

    expect(page.get_by_role("status")).to_have_text(RESULT_MESSAGES[ApprovalStatus.APPROVED])
    journey.reads("evidence page after approving", "Approved", "Run state: Done")
    run = Run.objects.get(pk=request.run_id)
    assert run.state == State.COMPLETED
    assert Effect.objects.get(run=run).status == EffectStatus.DELIVERED
    journey.assert_in_words()


def test_ops_lead_corrects_a_held_run_to_done_in_words(
    page: Page, ops_lead: Person, low_confidence_run: Run
) -> None:
    run = low_confidence_run
    journey = Journey(page, "ops lead")
    log_in(page, ops_lead)

    expect(page).to_have_url(re.compile(r"/ops/queues/$"))
    journey.reads("queues", "Exception queues", "Unsure reading", "Create a follow-up")
    page.get_by_test_id("queues").get_by_role("link", name="Unsure reading").click()

    expect(page).to_have_url(re.compile(r"/ops/queues/low_confidence/$"))
    journey.reads("queue", "Unsure reading", "Access question", "Claim")
    page.get_by_role("link", name=re.compile(r"^Access question")).click()

    expect(page).to_have_url(re.compile(rf"/runs/{run.pk}/$"))
    journey.reads(
        "run page",
        "Needs a person",
        "Unsure reading",
        "Work on this run",
        "Correct the reading",
        "Create a follow-up",
        "Service desk",
    )
    page.get_by_role("button", name="Claim").click()
    expect(page.get_by_role("status")).to_have_text("Claimed: the run is yours to work on.")
    page.get_by_role("link", name="Correct the reading").click()

    expect(page).to_have_url(re.compile(rf"/runs/{run.pk}/correct$"))
    journey.reads("correction page", "Correct the reading", "Held: Unsure reading.")
    page.get_by_label("customer name").fill("Dana Ortiz")
    page.get_by_label("Reason", exact=True).fill("Read the request: the name is Ortiz.")
    page.get_by_role("button", name="Save and resume").click()

    expect(page).to_have_url(re.compile(rf"/runs/{run.pk}/$"))
    expect(page.get_by_role("status")).to_have_text(
        "Corrected customer name; policy decides again."
    )
    journey.reads(
        "run page after the correction",
        "Done",
        "Reading corrected",
        "Correct the reading",
        "“Create a follow-up” · Delivered",
    )
    done = Run.objects.get(pk=run.pk)
    assert (done.state, done.outcome) == (State.COMPLETED, Outcome.COMPLETED)
    journey.assert_in_words()


def test_recovery_staff_retries_a_held_delivery_to_done_in_words(
    page: Page,
    recovery_staff: Person,
    hold_unavailable: Callable[[int], list[Run]],
    receiver_back: Callable[[], Downstream],
) -> None:
    (run,) = hold_unavailable(1)
    downstream = receiver_back()
    journey = Journey(page, "recovery staff")
    log_in(page, recovery_staff)

    expect(page).to_have_url(re.compile(r"/ops/queues/$"))
    journey.reads("queues", "Exception queues", "Delivery failed", "Notify the team")
    page.get_by_test_id("queues").get_by_role("link", name="Delivery failed").click()

    expect(page).to_have_url(re.compile(r"/ops/queues/effect_unavailable/$"))
    journey.reads("queue", "Delivery failed", "Invoice 1", "Notify the team", "Preview the batch")
    page.get_by_role("link", name=re.compile(r"^Invoice 1")).click()

    expect(page).to_have_url(re.compile(rf"/runs/{run.pk}/$"))
    journey.reads(
        "run page",
        "Needs a person",
        "Delivery failed",
        "Retry the delivery",
        "“Notify the team” · Gave up after 1 attempt",
        "Held for a person → Needs a person",
    )
    page.get_by_role("link", name="Retry the delivery…").click()

    expect(page).to_have_url(re.compile(rf"/runs/{run.pk}/preview/retry_effect$"))
    journey.reads(
        "retry preview",
        "Retry the delivery: what would happen",
        "Would be sent",
        "“Notify the team” would be sent again under the same key",
    )
    page.get_by_label("Reason, for the run's record").fill("Receiver back after the outage")
    page.get_by_role("button", name="Retry the delivery").click()

    expect(page).to_have_url(re.compile(rf"/runs/{run.pk}/$"))
    expect(page.get_by_role("status")).to_have_text(
        "Retry the delivery: done. The run is now “Done”."
    )
    journey.reads(
        "run page after the retry",
        "Done",
        "Delivery retried",
        "“Notify the team” · Delivered · 2 attempts",
    )
    assert Run.objects.get(pk=run.pk).state == State.COMPLETED
    assert downstream.count() == 1
    journey.assert_in_words()


def test_auditor_reads_queues_a_run_and_the_reports_in_words(
    page: Page, auditor: Person, hold_unavailable: Callable[[int], list[Run]]
) -> None:
    (run,) = hold_unavailable(1)
    journey = Journey(page, "auditor")
    log_in(page, auditor)

    expect(page).to_have_url(re.compile(r"/ops/queues/$"))
    journey.reads("queues", "Exception queues", "Delivery failed", "Notify the team")
    page.get_by_test_id("queues").get_by_role("link", name="Delivery failed").click()
    journey.reads("queue", "Delivery failed", "Invoice 1")
    page.get_by_role("link", name=re.compile(r"^Invoice 1")).click()

    expect(page).to_have_url(re.compile(rf"/runs/{run.pk}/$"))
    expect(page.locator("main form")).to_have_count(0)  # read-only
    journey.reads(
        "run page",
        "Needs a person",
        "Delivery failed",
        "“Notify the team” · Gave up after 1 attempt",
        "Held for a person → Needs a person",
        "Deliver",
    )
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Reports").click()

    expect(page).to_have_url(re.compile(r"/reports/$"))
    journey.reads(
        "reports dashboard",
        "Reports",
        "Straight-through rate",
        "Where work goes to people",
        "Waiting for approval",
    )
    journey.assert_in_words()


# --- policy, simulation, activation, the admin's run list, a run's history ----------------

completed_run = policy_pages.completed_run


@pytest.fixture
def staff_ops_lead(ops_lead: Person) -> Person:
    """The ops lead, with the admin open to them (staff), as operators have it."""
    ops_lead.user.is_staff = True
    ops_lead.user.save(update_fields=["is_staff"])
    return ops_lead


@pytest.fixture
def blocked_run(pipeline: Pipeline) -> Run:
    """A request whose reading names another effect than it asked for: stopped by policy."""
    event = make_event(event_id="evt-blocked", subject="Refund wanted")
    run = pipeline.run(pipeline.submit(event, [decision_for(event, requested_effect=NOTIFY)]))
    assert (run.state, run.outcome) == (State.BLOCKED, Outcome.POLICY_BLOCK)
    return run


def test_ops_lead_reads_policy_simulation_activation_admin_and_history_in_words(
    page: Page, staff_ops_lead: Person, completed_run: Run, blocked_run: Run
) -> None:
    journey = Journey(page, "ops lead")
    policy_pages.open_new_version(page, staff_ops_lead)
    common = page.get_by_role("region", name="Common changes")
    journey.reads("policy editor", "New policy version", "Security approvers")
    groups = common.locator("select[name$='-group'] option")
    assert "Auditors" not in groups.all_inner_texts()
    assert "auditors" not in [o.get_attribute("value") for o in groups.all()]
    common.get_by_label("Every category", exact=True).fill("0.8")
    common.get_by_role("button", name="Save these changes as a draft").click()

    expect(page).to_have_url(re.compile(r"/policy/policy-2/$"))
    expect(page.get_by_role("heading", level=1)).to_have_text("policy-2 Draft")
    page.get_by_role("button", name="Simulate").click()

    expect(page).to_have_url(re.compile(r"/policy/simulations/\d+/$"))
    expect(page.get_by_test_id("simulation-status")).to_contain_text("Finished")
    journey.reads("simulation", "Simulation of policy-2", "Done", "Unsure reading")
    journey.never("simulation", "Done execute", "Waiting for approval approve", "signal ")
    page.goto("/policy/policy-2/activate")
    journey.reads("activation", "Activate policy-2?", "Done", "Unsure reading")
    journey.never("activation", "Done execute", "Waiting for approval approve")
    page.get_by_role("button", name="Confirm: activate policy-2").click()

    page.get_by_role("navigation", name="Main").get_by_role("link", name="Policy").click()
    expect(page).to_have_url(re.compile(r"/policy/$"))
    statuses = {
        name: page.get_by_role("row", name=re.compile(rf"^{name}\b")).locator(".term").inner_text()
        for name in ("policy-1", "policy-2", "default-1")
    }
    assert statuses == {"policy-1": "No longer active", "policy-2": "Active", "default-1": "Draft"}
    journey.never("policy list", "retired")

    page.goto(f"/runs/{completed_run.pk}/")
    journey.reads("run page", "Done", "Received", "Checked")
    journey.never("run page", "Received → Received", "Checked → Checked")
    page.goto(f"/runs/{blocked_run.pk}/")
    journey.reads("blocked run page", "Stopped by policy")
    journey.never("blocked run page", "Stopped by policy Stopped by policy")

    page.goto("/admin/automation/run/")
    journey.reads("admin run list", "Service desk", "Create a follow-up", "Stopped by policy")
    for code in ("finance", "service_desk", "create_follow_up", "policy_block", "completed"):
        text = primary_text(page)
        if whole_word(code).search(text):
            journey.leaks.append(f"admin run list shows {code!r} as primary text")
    journey.assert_in_words()
