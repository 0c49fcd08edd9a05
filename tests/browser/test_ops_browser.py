"""The ops console in a real browser: queues, claiming, correcting, batch recovery, read-only audit.

Runs are put in their queues through the real pipeline (recorded classifier decisions), and a
notification effect is held as effect_unavailable by delivering it over HTTP to a local port
nothing listens on. Work the pages start (corrections, batches) runs inline in the live server:
see tasks_run_inline in conftest.py.
"""

from __future__ import annotations

import base64
import contextlib
import re
import socket
from collections.abc import Callable, Iterator

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
from tests.browser.conftest import PLAYWRIGHT_MISSING, Person, log_in, screenshot
from tests.catalogues import SIGNING_VARIABLE, activate_effects, http_effect
from tests.conftest import Pipeline, decision_for, make_event
from tests.downstream import Downstream, running_downstream

pytest.importorskip("playwright.sync_api", reason=PLAYWRIGHT_MISSING, exc_type=ImportError)
from playwright.sync_api import APIResponse, Locator, Page, expect

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
def deliver_notifications_to(
    monkeypatch: pytest.MonkeyPatch, pipeline: Pipeline, roles: None
) -> Callable[[str], None]:
    """Deliver send_internal_notification over HTTP to `url`: one attempt, short timeouts.
    Each call activates a version that says so; notifications written after it go there."""
    monkeypatch.setenv(SIGNING_VARIABLE, SECRET)

    def point_at(url: str) -> None:
        notification = http_effect(
            url, connect_timeout=0.5, read_timeout=1.0, max_attempts=1, deadline_seconds=600
        )
        activate_effects({NOTIFY: notification})

    return point_at


@pytest.fixture
def receiver_port() -> int:
    """The port of the notifications' receiver while it is down: nothing listens on it."""
    return free_port()


@pytest.fixture
def hold_unavailable(
    pipeline: Pipeline,
    roles: None,
    deliver_notifications_to: Callable[[str], None],
    receiver_port: int,
) -> Callable[[int], list[Run]]:
    """Hold `count` billing notifications as effect_unavailable: their receiver is down."""

    def hold(count: int) -> list[Run]:
        deliver_notifications_to(f"http://127.0.0.1:{receiver_port}/effects")
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


@pytest.fixture
def receiver_back(receiver_port: int) -> Iterator[Callable[[], Downstream]]:
    """Bring the receiver of held notifications back, at the address they were sent to: a
    retry is delivered by the version that wrote the effect, so it goes there again."""
    with contextlib.ExitStack() as serving:

        def back() -> Downstream:
            return serving.enter_context(running_downstream(SECRET, port=receiver_port))

        yield back


# --- helpers -------------------------------------------------------------------------------


def message(page: Page) -> Locator:
    return page.get_by_role("status")


def forged_post(page: Page, path: str, form: dict[str, str | float | bool]) -> APIResponse:
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
    row = page.get_by_test_id("queues").locator("tbody tr", has_text="Unsure reading")
    expect(row.locator(".term")).to_have_text("Unsure reading")  # the queue's label first
    expect(row.locator("small.code")).to_have_text("low_confidence")  # its code, secondary
    expect(row).to_contain_text("0 of 1")  # claimed
    expect(row).to_contain_text("Ops leads")  # owner group, from policy queue_owners
    screenshot(page, "queues")

    row.get_by_role("link", name="Unsure reading").click()

    expect(page).to_have_url(re.compile(r"/ops/queues/low_confidence/$"))
    expect(page.get_by_role("heading", level=1)).to_contain_text("Unsure reading")
    item = page.get_by_test_id("queue-items").locator("tbody tr", has_text=run.event_id)
    expect(item).to_have_count(1)
    expect(page.get_by_test_id(f"owner-{run.pk}")).to_have_text("—")
    item.get_by_role("button", name="Claim").click()

    expect(message(page)).to_have_text("Claimed: the run is yours to work on.")
    expect(page).to_have_url(re.compile(r"/ops/queues/low_confidence/$"))
    expect(page.get_by_test_id(f"owner-{run.pk}")).to_have_text(ops_lead.username)
    expect(item.get_by_role("button", name="Claim")).to_have_count(0)
    expect(item.get_by_role("button", name="Release")).to_be_visible()

    link = item.get_by_role("link", name=re.compile(r"^Access question"))  # the subject first
    expect(link.locator("small.code")).to_have_text(f"#{run.pk} · {run.event_id}")
    link.click()

    expect(page).to_have_url(re.compile(rf"/runs/{run.pk}/$"))
    expect(page.get_by_test_id("run-state")).to_have_text("Needs a person")
    expect(page.get_by_test_id("run-outcome")).to_have_text("Unsure reading")
    expect(page.get_by_test_id("run-owner")).to_have_text(ops_lead.username)
    classification = page.get_by_test_id("classification")
    expect(classification.locator("tr", has_text="Confidence").first).to_contain_text("0.5")
    expect(classification.locator("tr", has_text="Customer name")).to_contain_text("Dana Ortis")
    expect(page.get_by_test_id("operations")).to_be_visible()
    expect(page.get_by_role("heading", name="Work on this run")).to_be_visible()
    queue_actions = page.get_by_test_id("queue-actions").get_by_role("button")
    expect(queue_actions).to_have_text(["Release", "Assign"])  # claimed by them already

    page.locator("[data-testid=run-actions] li[data-action=correct]").get_by_role(
        "link", name="Correct the reading"
    ).click()

    expect(page).to_have_url(re.compile(rf"/runs/{run.pk}/correct$"))
    heading = page.get_by_role("heading", level=1)
    expect(heading).to_have_text(re.compile(r"^Correct the reading\b"))
    expect(heading.locator("small.code")).to_have_text(f"run #{run.pk} · {run.event_id}")
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
    # Checked at the end (see there), so that the rest of the journey is still tested.
    reason_code_error = error.inner_text()
    expect(page.locator(".field.invalid")).to_have_count(1)
    expect(page.locator(".field.invalid")).to_contain_text("Reason code")
    # What was entered is kept, so only the wrong value needs fixing.
    expect(page.get_by_label("Reason code")).to_have_value("not valid!")
    expect(page.get_by_label("customer name")).to_have_value("Dana Ortiz")
    expect(page.locator("p.lead")).to_contain_text("Held: Unsure reading.")
    screenshot(page, "correct")
    held = Run.objects.get(pk=run.pk)
    assert (held.state, held.outcome) == (State.NEEDS_REVIEW, Outcome.LOW_CONFIDENCE)
    assert not RecoveryAction.objects.filter(run=run, action="correct").exists()

    page.get_by_label("Reason code").fill("support_request")
    page.get_by_role("button", name="Save and resume").click()

    expect(page).to_have_url(re.compile(rf"/runs/{run.pk}/$"))
    expect(message(page)).to_have_text("Corrected customer name; policy decides again.")
    expect(page.get_by_test_id("run-state")).to_have_text("Done")
    expect(classification.locator("tr", has_text="Customer name")).to_contain_text("Dana Ortiz")
    expect(page.get_by_test_id("recovery")).to_contain_text(
        f"{ops_lead.username}: Correct the reading"
    )
    expect(page.get_by_test_id("history")).to_contain_text(
        f"{ops_lead.username}: Reading corrected"
    )
    expect(page.get_by_test_id("effect")).to_contain_text("“Create a follow-up” · Delivered")
    screenshot(page, "run")

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
    corrected = AuditEvent.objects.get(run=run, action="run.correct_reading", actor=ops_lead.user)
    assert corrected.data["changed"] == correction.data["changed"]
    assert RecoveryAction.objects.filter(run=run, action="claim", actor=ops_lead.user).exists()
    assert Effect.objects.get(run=run).status == EffectStatus.DELIVERED
    assert "Use only lower-case letters" in reason_code_error, (
        "Product bug: the correction form no longer says which characters a reason code may "
        f"use; it shows {reason_code_error!r}. CorrectionForm.add_problems (console/forms/ops.py) "
        "looks for pydantic's 'should match pattern', which core.errors now rewrites."
    )


# The share of a row of pixels painted blue (a bar's fill: the browser's own, or --accent),
# read from a screenshot on a blank page of its own (the console's CSP allows no data: images).
FILLED_SHARE_JS = """async (png) => {
  const image = new Image();
  image.src = "data:image/png;base64," + png;
  await image.decode();
  const canvas = document.createElement("canvas");
  canvas.width = image.width;
  canvas.height = image.height;
  const context = canvas.getContext("2d");
  context.drawImage(image, 0, 0);
  const row = context.getImageData(0, Math.floor(image.height / 2), image.width, 1).data;
  let filled = 0;
  for (let i = 0; i < row.length; i += 4) {
    if (row[i + 2] - row[i] > 80) filled++;
  }
  return filled / image.width;
}"""
COLUMN_JS = """(bar) => {
  const column = bar.parentElement;
  const box = column.getBoundingClientRect();
  const style = getComputedStyle(column);
  const left = box.left + parseFloat(style.paddingLeft);
  const right = box.right - parseFloat(style.paddingRight);
  const own = bar.getBoundingClientRect();
  return {x: left, width: right - left, y: own.top + own.height / 2};
}"""


def filled_share(page: Page, bar: Locator) -> float:
    """How much of the text column a progress bar is seen to fill, from 0 to 1."""
    column = bar.evaluate(COLUMN_JS)
    clip = {"x": column["x"], "y": column["y"] - 1, "width": column["width"], "height": 3}
    png = base64.b64encode(page.screenshot(clip=clip)).decode()
    blank = page.context.new_page()
    try:
        return float(blank.evaluate(FILLED_SHARE_JS, png))
    finally:
        blank.close()


def test_recovery_staff_batch_retry_delivers_each_held_effect_once(
    page: Page,
    recovery_staff: Person,
    hold_unavailable: Callable[[int], list[Run]],
    receiver_back: Callable[[], Downstream],
) -> None:
    held = hold_unavailable(3)
    keys = {Effect.objects.get(run=run).idempotency_key for run in held}
    assert EffectAttempt.objects.filter(error_class="ConnectError").count() == 3
    downstream = receiver_back()

    log_in(page, recovery_staff)
    expect(page).to_have_url(re.compile(r"/ops/queues/$"))
    expect(page.get_by_test_id("count-effect_unavailable")).to_have_text("3")
    page.get_by_test_id("queues").get_by_role("link", name="Delivery failed").click()

    expect(page).to_have_url(re.compile(r"/ops/queues/effect_unavailable/$"))
    expect(page.get_by_role("heading", level=1).locator(".term")).to_have_text("Delivery failed")
    rows = page.get_by_test_id("queue-items").locator("tbody tr")
    expect(rows).to_have_count(3)
    # Why it is held, in words: the notification's system could not be reached.
    expect(rows.first).to_contain_text("Notify the team")
    expect(rows.first).to_contain_text("ConnectError")
    batch_form = page.locator("form.batch")
    expect(batch_form.get_by_label("Action")).to_have_value("retry")
    expect(batch_form.get_by_label("From", exact=True)).not_to_have_value("")
    expect(batch_form.get_by_label("To", exact=True)).not_to_have_value("")
    batch_form.get_by_label("Action").select_option(label="Retry the failed step")
    batch_form.get_by_label("Reason").fill("Notification receiver back after the outage")
    batch_form.get_by_role("button", name="Preview the batch").click()

    # First what would happen, with nothing done yet.
    expect(page).to_have_url(re.compile(r"/ops/batches/\d+/$"))
    expect(page.get_by_role("heading", level=1)).to_have_text(
        "Retry of the queue “Delivery failed”"
    )
    preview = page.get_by_test_id("batch-preview")
    expect(preview.get_by_role("heading", name="What would happen")).to_be_visible()
    expect(page.get_by_test_id("preview-summary").locator("li")).to_have_text(["3 would be sent"])
    preview_rows = page.get_by_test_id("batch-runs").locator("tbody tr")
    expect(preview_rows).to_have_count(3)
    for n in range(3):
        expect(preview_rows.nth(n).locator("td").nth(2)).to_have_text("Would be sent")
        expect(preview_rows.nth(n)).to_contain_text(
            "“Notify the team” would be sent again under the same key"
        )
    expect(page.get_by_test_id("batch-progress")).to_have_count(0)
    assert RecoveryBatch.objects.get().status == "preview"
    assert not RecoveryAction.objects.exists()
    assert downstream.count() == 0
    screenshot(page, "batch-preview")

    page.get_by_test_id("batch-start").get_by_role("button", name="Start: retry 3 runs").click()

    # The page refreshes itself every 2 s until the batch is finished.
    expect(page.get_by_test_id("batch-status")).to_have_text("Finished", timeout=15_000)
    expect(page.get_by_test_id("batch-progress")).to_have_text(
        "3 / 3 done · 3 worked · 0 could not be · Finished"
    )
    expect(page.get_by_test_id("batch-summary")).to_contain_text("3 of 3 runs retried")
    expect(page.locator("progress")).to_have_attribute("value", "3")
    # Done is the whole bar, as wide as the text column; half done is half of it.
    assert filled_share(page, page.locator("progress")) > 0.97
    page.locator("progress").evaluate("bar => { bar.value = bar.max / 2; }")
    assert 0.45 < filled_share(page, page.locator("progress")) < 0.55
    page.locator("progress").evaluate("bar => { bar.value = bar.max; }")
    done_rows = page.get_by_test_id("batch-runs").locator("tbody tr")
    expect(done_rows).to_have_count(3)
    for n in range(3):  # what each retry did, in words: it sent the run to its delivery
        expect(done_rows.nth(n).locator("td").last).to_have_text("Retry; the run is now Done")
    screenshot(page, "batch")

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

    expect(page.get_by_test_id("run-state")).to_have_text("Needs a person")
    expect(page.get_by_test_id("run-outcome")).to_have_text("Delivery failed")
    expect(page.get_by_test_id("failure")).to_contain_text("Delivery failed")
    # Which effect failed: checked at the end (see there), so the rest is still tested.
    failure = page.get_by_test_id("failure").inner_text()
    timeline = page.get_by_test_id("timeline")
    expect(timeline.locator("tbody tr", has_text="Deliver")).not_to_have_count(0)
    expect(page.get_by_test_id("effect")).to_contain_text(
        "“Notify the team” · Gave up after 1 attempt"
    )
    key = page.get_by_test_id("effect").locator("code")
    expect(key).to_have_text(f"{effect.idempotency_key[:12]}…")
    expect(key).to_have_attribute("title", effect.idempotency_key)
    attempts = page.get_by_test_id("effect").locator("xpath=following-sibling::table[1]")
    expect(attempts.locator("tbody tr")).to_have_text([re.compile(r"^1.*Retry.*ConnectError")])
    expect(page.get_by_test_id("history")).to_contain_text("Held for a person → Needs a person")
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
    assert "Notify the team" in failure, (
        "Product bug: the run page's failure box (data-testid=failure, runs/run.html) "
        f"no longer says which effect failed: {failure!r}. It dropped run.failure_field; the "
        "queue row says it (lists.hold_reason: 'Notify the team: attempt limit reached…')."
    )


def test_recovery_staff_may_not_correct_a_run(
    page: Page, recovery_staff: Person, low_confidence_run: Run
) -> None:
    run = low_confidence_run
    log_in(page, recovery_staff, path=f"/runs/{run.pk}/")

    expect(page.get_by_test_id("run-outcome")).to_have_text("Unsure reading")
    expect(page.get_by_test_id("operations")).to_be_visible()  # they may claim and recover
    expect(page.get_by_test_id("queue-actions").get_by_role("button", name="Claim")).to_be_visible()
    expect(page.locator("[data-testid=run-actions] li[data-action=correct]")).to_have_count(0)
    expect(page.get_by_role("link", name="Correct the reading")).to_have_count(0)

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
