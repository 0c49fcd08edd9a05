"""The ops console in a real browser: queues, claiming, correcting, batch recovery, read-only audit.

Runs are put in their queues through the real pipeline (recorded classifier decisions), and a
notification effect is held as effect_unavailable by delivering it over HTTP to a local port
nothing listens on. Work the pages start (corrections, batches) runs inline in the live server:
see tasks_run_inline in conftest.py.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from audit.models import AuditEvent
from automation.models import (
    Effect,
    EffectAttempt,
    EffectStatus,
    Outcome,
    RecoveryAction,
    RecoveryBatch,
    Run,
    State,
)
from policy.services import (
    DEFAULTS_DIR,
    parse_policy_text,
    policy_version_activate,
    policy_version_create,
)
from tests.browser.conftest import PLAYWRIGHT_MISSING, Person, log_in
from tests.conftest import Pipeline, decision_for, make_event
from tests.downstream import Downstream, running_downstream

pytest.importorskip("playwright.sync_api", reason=PLAYWRIGHT_MISSING, exc_type=ImportError)
from playwright.sync_api import APIResponse, Locator, Page, expect

# Not asserted: pictures of the pages for a person to look at after a run.
QUEUES_PNG = "/tmp/queues.png"  # noqa: S108
RUN_PNG = "/tmp/run.png"  # noqa: S108
CORRECT_PNG = "/tmp/correct.png"  # noqa: S108
BATCH_PNG = "/tmp/batch.png"  # noqa: S108

NOTIFY = "send_internal_notification"
SECRET = "s" * 32
CUSTOMER_SENTENCE = "Please create a follow-up for Dana Ortis about her access."


# --- fixtures ------------------------------------------------------------------------------


@pytest.fixture
def ops_lead(make_person: Callable[..., Person]) -> Person:
    return make_person("olga", "ops-leads")


@pytest.fixture
def recovery_staff(make_person: Callable[..., Person]) -> Person:
    return make_person("rui", "recovery-staff")


@pytest.fixture
def auditor(make_person: Callable[..., Person]) -> Person:
    return make_person("aud", "auditors")


@pytest.fixture
def confidence_threshold(pipeline: Pipeline) -> str:
    """policy-1 with a confidence threshold of 0.8, loaded as policy-2 and made active."""
    text = (DEFAULTS_DIR / "policy-1.yaml").read_text(encoding="utf-8")
    text = text.replace("version: policy-1", "version: policy-2")
    block = "confidence:\n  default: 0.0\n  per_category: {}\n"
    assert block in text
    text = text.replace(block, "confidence:\n  default: 0.8\n  per_category: {}\n")
    policy_version_create(document=parse_policy_text(text))
    return policy_version_activate(name="policy-2").name


@pytest.fixture
def low_confidence_run(pipeline: Pipeline, confidence_threshold: str) -> Run:
    """A support request read with confidence 0.5 (and a misspelt name): held for review."""
    event = make_event(event_id="evt-low-1", body=CUSTOMER_SENTENCE)
    outcome = decision_for(event)
    outcome["value"]["confidence"] = 0.5
    outcome["value"]["fields"] = {
        "customer_name": {"value": "Dana Ortis", "confidence": 0.4, "source": CUSTOMER_SENTENCE}
    }
    run = pipeline.run(pipeline.submit(event, [outcome]))
    assert (run.state, run.outcome, run.queue) == (
        State.NEEDS_REVIEW,
        Outcome.LOW_CONFIDENCE,
        "low_confidence",
    )
    return run


def free_port() -> int:
    """A local port nothing listens on (bound, read, and closed again)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def deliver_notifications_to(settings: Any) -> Callable[[str], None]:
    """Deliver send_internal_notification over HTTP to `url`: one attempt, short timeouts."""

    def point_at(url: str) -> None:
        config = {
            "url": url,
            "secret": SECRET,
            "connect_timeout": 0.5,
            "read_timeout": 1.0,
            "max_attempts": 1,
            "deadline_seconds": 600,
        }
        settings.GATEHOUSE = {**settings.GATEHOUSE, "HTTP_EFFECTS": {NOTIFY: config}}

    return point_at


@pytest.fixture
def hold_unavailable(
    pipeline: Pipeline, roles: None, deliver_notifications_to: Callable[[str], None]
) -> Callable[[int], list[Run]]:
    """Hold `count` billing notifications as effect_unavailable: their receiver is down."""

    def hold(count: int) -> list[Run]:
        deliver_notifications_to(f"http://127.0.0.1:{free_port()}/effects")
        runs = []
        for n in range(1, count + 1):
            event = make_event(
                event_id=f"evt-bill-{n}",
                request_type="billing",
                subject=f"Invoice {n}",
                body="Please let finance know about this invoice.",
                requested_action=NOTIFY,
            )
            run = pipeline.run(pipeline.submit(event, [decision_for(event)]))
            assert (run.state, run.outcome, run.queue) == (
                State.NEEDS_REVIEW,
                Outcome.EFFECT_UNAVAILABLE,
                "effect_unavailable",
            )
            runs.append(run)
        return runs

    return hold


@pytest.fixture
def downstream() -> Iterator[Downstream]:
    with running_downstream(SECRET) as server:
        yield server


# --- helpers -------------------------------------------------------------------------------


def message(page: Page) -> Locator:
    return page.get_by_role("status")


def forged_post(page: Page, path: str, form: dict[str, str]) -> APIResponse:
    """A CSRF-valid POST with this page's session, straight to `path` (no form on the page)."""
    context = page.context
    csrf = next(c["value"] for c in context.cookies() if c["name"] == "csrftoken")
    origin = "/".join(page.url.split("/", 3)[:3])  # scheme://host:port of the live server
    return context.request.post(
        f"{origin}{path}",
        form=form,
        headers={"X-CSRFToken": csrf, "Referer": f"{origin}/"},
        max_redirects=0,
    )


# --- tests ---------------------------------------------------------------------------------


def test_ops_lead_claims_a_low_confidence_run_and_corrects_it_to_completion(
    page: Page, ops_lead: Person, low_confidence_run: Run
) -> None:
    run = low_confidence_run
    # "/" sends whoever may view runs to the queues (ops leads may also decide escalations).
    log_in(page, ops_lead)

    expect(page).to_have_url(re.compile(r"/ops/queues/$"))
    expect(page.locator("form.logout")).to_contain_text(ops_lead.username)
    expect(page.get_by_role("heading", name="Exception queues")).to_be_visible()
    expect(page.get_by_test_id("count-low_confidence")).to_have_text("1")
    row = page.get_by_test_id("queues").locator("tbody tr", has_text="low_confidence")
    expect(row).to_contain_text("0 of 1")  # claimed
    expect(row).to_contain_text("ops-leads")  # owner group, from policy queue_owners
    page.screenshot(path=QUEUES_PNG, full_page=True)

    row.get_by_role("link", name="low_confidence").click()

    expect(page).to_have_url(re.compile(r"/ops/queues/low_confidence/$"))
    item = page.get_by_test_id("queue-items").locator("tbody tr", has_text=run.event_id)
    expect(item).to_have_count(1)
    expect(page.get_by_test_id(f"owner-{run.pk}")).to_have_text("—")
    item.get_by_role("button", name="Claim").click()

    expect(message(page)).to_have_text("Claimed.")
    expect(page).to_have_url(re.compile(r"/ops/queues/low_confidence/$"))
    expect(page.get_by_test_id(f"owner-{run.pk}")).to_have_text(ops_lead.username)
    expect(item.get_by_role("button", name="Claim")).to_have_count(0)
    expect(item.get_by_role("button", name="Release")).to_be_visible()

    item.get_by_role("link", name=f"#{run.pk} · {run.event_id}").click()

    expect(page).to_have_url(re.compile(rf"/runs/{run.pk}/$"))
    expect(page.get_by_test_id("run-state")).to_have_text("needs_review")
    expect(page.get_by_test_id("run-outcome")).to_have_text("low_confidence")
    expect(page.get_by_test_id("run-owner")).to_have_text(ops_lead.username)
    classification = page.get_by_test_id("classification")
    expect(classification.locator("tr", has_text="confidence").first).to_contain_text("0.5")
    expect(classification.locator("tr", has_text="customer_name")).to_contain_text("Dana Ortis")
    expect(page.get_by_test_id("operations")).to_be_visible()

    page.get_by_role("link", name="Correct the fields").click()

    expect(page).to_have_url(re.compile(rf"/runs/{run.pk}/correct$"))
    expect(page.get_by_role("heading", level=1)).to_have_text(
        f"Correct run #{run.pk} · {run.event_id}"
    )
    expect(page.get_by_label("Reason code")).to_have_value("support_request")
    expect(page.get_by_label("customer name")).to_have_value("Dana Ortis")

    # Invalid: the schema allows only ^[a-z0-9_.-]+$ in a reason code.
    page.get_by_label("Reason code").fill("not valid!")
    page.get_by_label("customer name").fill("Dana Ortiz")
    page.get_by_label("Reason", exact=True).fill("Read the request: the name is Ortiz.")
    with page.expect_response(
        lambda r: r.request.method == "POST" and r.url.endswith(f"/runs/{run.pk}/correct")
    ) as posted:
        page.get_by_role("button", name="Save and resume").click()

    assert posted.value.status == 400
    error = page.get_by_test_id("error-reason_code")
    expect(error).to_be_visible()
    expect(error).to_contain_text("Use only lower-case letters")
    expect(page.locator(".field.invalid")).to_have_count(1)
    expect(page.locator(".field.invalid")).to_contain_text("Reason code")
    # What was entered is kept, so only the wrong value needs fixing.
    expect(page.get_by_label("Reason code")).to_have_value("not valid!")
    expect(page.get_by_label("customer name")).to_have_value("Dana Ortiz")
    expect(page.locator("p.lead")).to_contain_text("Held as low_confidence")
    page.screenshot(path=CORRECT_PNG, full_page=True)
    held = Run.objects.get(pk=run.pk)
    assert (held.state, held.outcome) == (State.NEEDS_REVIEW, Outcome.LOW_CONFIDENCE)
    assert not RecoveryAction.objects.filter(run=run, action="correct").exists()

    page.get_by_label("Reason code").fill("support_request")
    page.get_by_role("button", name="Save and resume").click()

    expect(page).to_have_url(re.compile(rf"/runs/{run.pk}/$"))
    expect(message(page)).to_have_text(
        "Corrected (confidence, customer name); the run goes through policy again."
    )
    expect(page.get_by_test_id("run-state")).to_have_text("completed")
    expect(classification.locator("tr", has_text="customer_name")).to_contain_text("Dana Ortiz")
    expect(page.get_by_test_id("recovery")).to_contain_text(f"{ops_lead.username}: correct")
    expect(page.get_by_test_id("history")).to_contain_text(f"{ops_lead.username}: run.classify")
    expect(page.get_by_test_id("effect")).to_contain_text("create_follow_up · delivered")
    page.screenshot(path=RUN_PNG, full_page=True)

    done = Run.objects.get(pk=run.pk)
    assert (done.state, done.outcome, done.queue) == (State.COMPLETED, Outcome.COMPLETED, "")
    assert done.policy_version == "policy-2"
    assert done.classification["fields"]["customer_name"]["value"] == "Dana Ortiz"
    correction = RecoveryAction.objects.get(run=run, action="correct")
    assert correction.actor == ops_lead.user
    assert correction.reason == "Read the request: the name is Ortiz."
    assert correction.data["changed"] == {
        "confidence": [0.5, 1.0],
        "fields.customer_name": ["Dana Ortis", "Dana Ortiz"],
    }
    classify = AuditEvent.objects.get(run=run, action="run.classify", actor=ops_lead.user)
    assert classify.data["changed"] == correction.data["changed"]
    assert RecoveryAction.objects.filter(run=run, action="claim", actor=ops_lead.user).exists()
    assert Effect.objects.get(run=run).status == EffectStatus.DELIVERED


def test_recovery_staff_batch_retry_delivers_each_held_effect_once(
    page: Page,
    recovery_staff: Person,
    hold_unavailable: Callable[[int], list[Run]],
    deliver_notifications_to: Callable[[str], None],
    downstream: Downstream,
) -> None:
    held = hold_unavailable(3)
    keys = {Effect.objects.get(run=run).idempotency_key for run in held}
    assert EffectAttempt.objects.filter(error_class="ConnectError").count() == 3
    deliver_notifications_to(downstream.url)  # the receiver is back

    log_in(page, recovery_staff)
    expect(page).to_have_url(re.compile(r"/ops/queues/$"))
    expect(page.get_by_test_id("count-effect_unavailable")).to_have_text("3")
    page.get_by_role("link", name="effect_unavailable").click()

    expect(page).to_have_url(re.compile(r"/ops/queues/effect_unavailable/$"))
    rows = page.get_by_test_id("queue-items").locator("tbody tr")
    expect(rows).to_have_count(3)
    expect(rows.first).to_contain_text("ConnectError")
    batch_form = page.locator("form.batch")
    expect(batch_form.get_by_label("Action")).to_have_value("retry")
    expect(batch_form.get_by_label("From")).not_to_have_value("")
    expect(batch_form.get_by_label("To")).not_to_have_value("")
    batch_form.get_by_label("Action").select_option("retry")
    batch_form.get_by_label("Reason").fill("Notification receiver back after the outage")
    batch_form.get_by_role("button", name="Start batch").click()

    expect(page).to_have_url(re.compile(r"/ops/batches/\d+/$"))
    expect(page.get_by_role("heading", level=1)).to_have_text("Batch retry of effect_unavailable")
    # The page refreshes itself every 2 s until the batch is finished.
    expect(page.get_by_test_id("batch-status")).to_have_text("finished", timeout=15_000)
    expect(page.get_by_test_id("batch-progress")).to_contain_text("3 / 3")
    expect(page.get_by_test_id("batch-progress")).to_contain_text("3 ok · 0 failed")
    expect(page.get_by_test_id("batch-summary")).to_contain_text("3 of 3 runs")
    expect(page.locator("progress")).to_have_attribute("value", "3")
    page.screenshot(path=BATCH_PNG, full_page=True)

    batch = RecoveryBatch.objects.get()
    assert page.url.endswith(f"/ops/batches/{batch.pk}/")
    assert (batch.status, batch.done, batch.succeeded, batch.failures) == ("finished", 3, 3, [])
    assert sorted(batch.run_ids) == sorted(run.pk for run in held)
    actions = RecoveryAction.objects.filter(batch=batch)
    assert actions.count() == 3
    assert {(a.run_id, a.action, a.actor_id) for a in actions} == {
        (run.pk, "retry", recovery_staff.user.pk) for run in held
    }
    for run in held:
        run.refresh_from_db()
        assert (run.state, run.outcome, run.queue) == (State.COMPLETED, Outcome.COMPLETED, "")
        effect = Effect.objects.get(run=run)
        assert (effect.status, effect.attempts) == (EffectStatus.DELIVERED, 2)
    assert sorted(downstream.performed) == sorted(keys)  # each delivered once
    assert downstream.count() == 3
    assert all(received.signature_valid for received in downstream.requests)


def test_auditor_reads_a_held_run_but_cannot_work_on_it(
    page: Page, auditor: Person, hold_unavailable: Callable[[int], list[Run]]
) -> None:
    (run,) = hold_unavailable(1)
    effect = Effect.objects.get(run=run)

    log_in(page, auditor)
    expect(page).to_have_url(re.compile(r"/ops/queues/$"))
    page.goto(f"/runs/{run.pk}/")

    expect(page.get_by_test_id("run-state")).to_have_text("needs_review")
    expect(page.get_by_test_id("run-outcome")).to_have_text("effect_unavailable")
    expect(page.get_by_test_id("failure")).to_contain_text(NOTIFY)
    timeline = page.get_by_test_id("timeline")
    expect(timeline.locator("tbody tr", has_text="execute")).not_to_have_count(0)
    expect(page.get_by_test_id("effect")).to_contain_text(f"{NOTIFY} · retry_wait · 1 attempt")
    expect(page.get_by_test_id("effect").locator("code")).to_have_text(effect.idempotency_key)
    attempts = page.get_by_test_id("effect").locator("xpath=following-sibling::table[1]")
    expect(attempts.locator("tbody tr")).to_have_text([re.compile(r"^1.*retry.*ConnectError")])
    expect(page.get_by_test_id("history")).to_contain_text("run.hold → needs_review")
    # Read-only: no operations, no forms (the header's log-out form is outside <main>).
    expect(page.get_by_role("heading", name="Work on this run")).to_have_count(0)
    expect(page.get_by_test_id("operations")).to_have_count(0)
    expect(page.locator("main form")).to_have_count(0)
    expect(page.get_by_role("button")).to_have_text(["Log out"])

    forged = forged_post(page, f"/runs/{run.pk}/recover/retry", {"reason": "just checking"})

    assert forged.status == 403
    assert "CSRF" not in forged.text()  # refused for the permission, not the token
    again = Run.objects.get(pk=run.pk)
    assert (again.state, again.version) == (State.NEEDS_REVIEW, run.version)
    assert not RecoveryAction.objects.exists()


def test_recovery_staff_may_not_correct_a_run(
    page: Page, recovery_staff: Person, low_confidence_run: Run
) -> None:
    run = low_confidence_run
    log_in(page, recovery_staff, path=f"/runs/{run.pk}/")

    expect(page.get_by_test_id("run-outcome")).to_have_text("low_confidence")
    expect(page.get_by_test_id("operations")).to_be_visible()  # they may claim and recover
    expect(page.get_by_role("link", name="Correct the fields")).to_have_count(0)

    response = page.goto(f"/runs/{run.pk}/correct")
    assert response is not None and response.status == 403
    expect(page.get_by_role("heading", name="You may not open this page")).to_be_visible()
    forged = forged_post(
        page,
        f"/runs/{run.pk}/correct",
        {
            "category": "support",
            "recommended_route": "service_desk",
            "requested_effect": "create_follow_up",
            "reason_code": "support_request",
            "reason": "sneaking past the form",
        },
    )
    assert forged.status == 403
    held = Run.objects.get(pk=run.pk)
    assert (held.state, held.outcome, held.version) == (
        State.NEEDS_REVIEW,
        Outcome.LOW_CONFIDENCE,
        run.version,
    )
    assert not RecoveryAction.objects.filter(action="correct").exists()
