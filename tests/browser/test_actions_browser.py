"""The run page offers only what can work, and a batch replay starts from its preview.

Runs are put in their states through the real pipeline (recorded classifier outcomes, a
notification delivered to a port nothing listens on, approvals expired by the service). The
page's offer is read from what a person sees, and compared with what each state allows.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from automation.models import Outcome, RecoveryAction, RecoveryBatch, Run, State
from tests.automation.recovery.test_recovery import completed, exhausted, invalid
from tests.automation.test_admin import awaiting_approval, held_for_its_effect
from tests.browser import test_ops_browser as ops
from tests.browser.conftest import PLAYWRIGHT_MISSING, Person, log_in, screenshot
from tests.conftest import Pipeline, decision_for, make_event
from tests.downstream import Downstream

NOTIFY = ops.NOTIFY
# The ops tests' fixtures: a live receiver, and notifications delivered to a given address.
deliver_notifications_to = ops.deliver_notifications_to
downstream = ops.downstream

pytest.importorskip("playwright.sync_api", reason=PLAYWRIGHT_MISSING, exc_type=ImportError)
from playwright.sync_api import Page, expect  # noqa: E402


@pytest.fixture
def lead(make_person: Callable[..., Person]) -> Person:
    return make_person("lee", "ops-leads")


def blocked(pipeline: Pipeline) -> Run:
    event = make_event(event_id="evt-blocked", subject="Move this to finance")
    reading = decision_for(event, requested_effect="send_internal_notification")
    return pipeline.run(pipeline.submit(event, [reading]))


def refused_delivery(pipeline: Pipeline, downstream: Downstream, event_id: str) -> Run:
    """A notification its receiver refused (HTTP 400): failed, in the effect_rejected queue."""
    downstream.then(("status", 400, {}))
    event = make_event(
        event_id=event_id,
        request_type="billing",
        requested_action=NOTIFY,
        subject=f"Invoice {event_id}",
    )
    run = pipeline.run(pipeline.submit(event, [decision_for(event)]))
    assert (run.state, run.queue) == (State.FAILED, Outcome.EFFECT_REJECTED)
    return run


def received(pipeline: Pipeline) -> Run:
    """Taken in, its first step not taken yet: a worker owes it that, a person nothing."""
    event = make_event(event_id="evt-new")
    run = pipeline.run(pipeline.submit(event, [decision_for(event)], drain=False))
    assert run.state == State.RECEIVED
    return run


def offered_on_page(page: Page, run: Run) -> list[str]:
    page.goto(f"/runs/{run.pk}/")
    actions = page.get_by_test_id("run-actions").locator("li")
    return [actions.nth(i).get_attribute("data-action") or "" for i in range(actions.count())]


def test_the_run_page_offers_only_the_actions_each_state_allows(
    page: Page,
    lead: Person,
    pipeline: Pipeline,
    monkeypatch: pytest.MonkeyPatch,
    deliver_notifications_to: Callable[[str], None],
    downstream: Downstream,
) -> None:
    held = held_for_its_effect(pipeline, monkeypatch)  # points notifications at a dead port
    deliver_notifications_to(downstream.url)
    runs = {
        "classifier ran out": (
            exhausted(pipeline, "evt-ran-out"),
            ["correct", "retry", "resolve", "abandon"],
        ),
        "unusable reading": (invalid(pipeline), ["correct", "resolve", "abandon"]),
        "delivery failed": (held, ["retry_effect", "resolve", "abandon"]),
        "waiting for approval": (awaiting_approval(pipeline), ["reconsider"]),
        "done": (completed(pipeline), ["replay"]),
        "stopped by policy": (blocked(pipeline), ["replay"]),
        "failed": (refused_delivery(pipeline, downstream, "evt-refused"), ["replay"]),
        "just received": (received(pipeline), []),
    }
    states = {run.state for run, _ in runs.values()}
    assert len(states) >= 6 and len({(r.state, r.outcome) for r, _ in runs.values()}) == 8
    log_in(page, lead)

    for name, (run, expected) in runs.items():
        assert offered_on_page(page, run) == expected, name
        badge = page.get_by_test_id("run-state")
        expect(badge).not_to_have_text(re.compile(r"_|^[a-z]+$"))  # a label, not a code

    run, _ = runs["just received"]
    page.goto(f"/runs/{run.pk}/")
    expect(page.get_by_test_id("no-actions")).to_have_text("Nothing can be done to this run now.")

    run, _ = runs["unusable reading"]
    page.goto(f"/runs/{run.pk}/")
    expect(page.get_by_test_id("run-state")).to_have_text("Needs a person")
    expect(page.get_by_test_id("run-outcome")).to_have_text("Unusable reading")
    expect(page.get_by_test_id("run-actions")).not_to_contain_text("Resume")
    screenshot(page, "run-page")


def test_a_hand_made_post_of_an_action_not_offered_is_refused(
    page: Page, lead: Person, pipeline: Pipeline
) -> None:
    run = invalid(pipeline)
    log_in(page, lead, path=f"/runs/{run.pk}/")
    csrf = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
    origin = "/".join(page.url.split("/", 3)[:3])

    response = page.context.request.post(
        f"{origin}/runs/{run.pk}/recover/resume",
        form={"reason": "forged"},
        headers={"X-CSRFToken": csrf, "Referer": f"{origin}/"},
        max_redirects=0,
    )

    assert response.status == 303
    page.goto(f"/runs/{run.pk}/")
    expect(page.get_by_role("status")).to_contain_text(
        "Resume is not possible for this run now: it is “Needs a person” (Unusable reading)."
    )
    assert not RecoveryAction.objects.filter(run=run).exists()
    assert Run.objects.get(pk=run.pk).version == run.version


def test_a_single_replay_is_previewed_before_it_starts(
    page: Page, lead: Person, pipeline: Pipeline
) -> None:
    run = completed(pipeline)
    log_in(page, lead, path=f"/runs/{run.pk}/")

    page.get_by_role("link", name="Replay…").click()

    expect(page).to_have_url(re.compile(rf"/runs/{run.pk}/preview/replay$"))
    expect(page.get_by_role("heading", level=1)).to_have_text("Replay: what would happen")
    expect(page.get_by_test_id("preview")).to_contain_text("Already delivered")
    expect(page.get_by_test_id("preview")).to_contain_text(
        "“Create a follow-up” was already delivered under the same key: it is not sent again."
    )
    page.get_by_label("Reason, for the run's record").fill("customer asked twice")
    page.get_by_role("button", name="Replay").click()

    expect(page).to_have_url(re.compile(rf"/runs/{run.pk}/$"))
    replay = Run.objects.get(replay_of=run)
    expect(page.get_by_role("status")).to_have_text(f"Replay: done. The new run is #{replay.pk}.")


def test_a_batch_replay_starts_only_from_its_preview(
    page: Page,
    lead: Person,
    pipeline: Pipeline,
    deliver_notifications_to: Callable[[str], None],
    downstream: Downstream,
) -> None:
    deliver_notifications_to(downstream.url)
    runs = [refused_delivery(pipeline, downstream, f"evt-refused-{n}") for n in range(3)]
    downstream.heal()  # the receiver's configuration was fixed
    log_in(page, lead, path="/ops/queues/effect_rejected/")

    batch_form = page.locator("form.batch")
    batch_form.get_by_label("Action").select_option("replay")
    batch_form.get_by_label("Reason").fill("the receiver's schema was fixed")
    batch_form.get_by_role("button").click()

    expect(page).to_have_url(re.compile(r"/ops/batches/\d+/$"))
    expect(page.get_by_role("heading", level=1)).to_have_text(
        "Replay of the queue “Delivery refused”"
    )
    expect(page.get_by_test_id("batch-preview")).to_contain_text("Nothing has been done yet.")
    expect(page.get_by_test_id("preview-summary")).to_have_text("3 would be sent")
    rows = page.get_by_test_id("batch-runs").locator("tbody tr")
    expect(rows).to_have_count(3)
    expect(rows.first).to_contain_text(
        "“Notify the team” would be sent again under the same key (last time: Refused)."
    )
    screenshot(page, "replay-preview")
    assert not Run.objects.filter(replay_of__isnull=False).exists()

    page.get_by_test_id("batch-start").get_by_role("button").click()

    expect(page.get_by_role("status")).to_contain_text("Started")
    expect(page.get_by_test_id("batch-status")).to_have_text("Finished", timeout=15_000)
    expect(page.get_by_test_id("batch-summary")).to_contain_text("3 of 3 runs replayed")
    batch = RecoveryBatch.objects.get()
    assert (batch.status, batch.succeeded) == ("finished", 3)
    replays = Run.objects.filter(replay_of__in=runs)
    assert {r.state for r in replays} == {State.COMPLETED}  # as the preview said: sent
    assert len(downstream.performed) == 3  # once each, under the original keys
