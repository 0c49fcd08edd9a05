"""An ops lead sees a model server's trouble and what reading costs, in a real browser: the
open breaker on the queues page, why a run waits on its page, the cost panel of the reports,
at a desk and on a phone; and on the queues page, a mailbox not heard from. The runs are read
by a real chat-completions server on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from policy.services import policy_ensure_defaults
from tests.automation.conftest import MODEL, llm_pipeline, point_at
from tests.browser.conftest import PLAYWRIGHT_MISSING, Person, log_in, screenshot
from tests.chatserver import ChatServer, content, running_chat_server, status
from tests.conftest import decision_for, make_event
from tests.mailboxes import make_mailbox

pytest.importorskip("playwright.sync_api", reason=PLAYWRIGHT_MISSING, exc_type=ImportError)
from playwright.sync_api import BrowserContext, Page, expect

PHONE = {"viewport": {"width": 390, "height": 844}, "is_mobile": True, "has_touch": True}


@pytest.fixture
def chat() -> Iterator[ChatServer]:
    with running_chat_server(model=MODEL) as server:
        yield server


def test_an_ops_lead_sees_the_open_breaker_the_waiting_run_and_the_cost(
    page: Page,
    new_context: Callable[..., BrowserContext],
    make_person: Callable[..., Person],
    chat: ChatServer,
    settings: Any,
) -> None:
    lead = make_person("olga", "ops-leads")
    policy_ensure_defaults()
    point_at(settings, chat, OPENAI_PRICES={MODEL: "0.15/0.60"}, OPENAI_BREAKER_FAILURES=1)
    pipeline = llm_pipeline("model", attempts=3)
    read = make_event(event_id="evt-read")
    chat.usage = (812, 57)  # 0.000156 by the price table
    chat.then(content(decision_for(read)["value"]))
    pipeline.submit(read)
    # The server fails once: the breaker opens, and the next run waits without a call.
    chat.default = status(503)
    pipeline.submit(make_event(event_id="evt-down"), drain=False)
    pipeline.drain(fast_forward=False)
    waiting = pipeline.run(pipeline.submit(make_event(event_id="evt-waits"), drain=False))
    pipeline.drain(fast_forward=False)
    assert chat.count() == 2

    make_mailbox("support", status="idle", last_contact_at=timezone.now(), day=timezone.localdate())
    make_mailbox("billing", status="idle", last_contact_at=timezone.now() - timedelta(minutes=20))

    log_in(page, lead, "/ops/queues/")
    server = page.get_by_test_id("model-server")
    expect(server).to_contain_text(chat.base_url)
    expect(page.get_by_test_id("model-server-breaker")).to_contain_text(
        "The circuit breaker is open after 1 failure in a row"
    )
    expect(page.get_by_test_id("model-server-waiting")).to_contain_text("for the breaker")
    screenshot(page, "queues-model-server")
    mailboxes = page.get_by_test_id("mailboxes")
    expect(mailboxes).to_contain_text("Waiting for mail (IDLE)")
    expect(page.get_by_test_id("mailbox-state-billing")).to_contain_text("Not heard from since")

    page.goto(f"/runs/{waiting.pk}/")
    expect(page.get_by_test_id("waiting")).to_contain_text("Waiting for the model server")
    expect(page.get_by_test_id("waiting")).to_contain_text("No attempt is spent")

    page.goto("/reports/")
    panel = page.locator("#model-spend")
    expect(panel.get_by_role("heading", name="What reading costs")).to_be_visible()
    expect(page.get_by_test_id("spend-total")).to_contain_text("0.0002 for 3 runs")
    expect(panel.get_by_role("img", name="What reading cost, by route")).to_be_visible()

    # On a phone the panel keeps to the screen; its wide tables scroll inside it.
    phone = new_context(**PHONE).new_page()
    log_in(phone, lead, "/reports/")
    spend = phone.locator("#model-spend")
    spend.scroll_into_view_if_needed()
    expect(phone.get_by_test_id("spend-total")).to_be_visible()
    box = spend.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390 + 1, box
    screenshot(phone, "reports-model-spend-phone")
    # So does the mailboxes' panel of the queues page.
    phone.goto("/ops/queues/")
    panel = phone.get_by_test_id("mailboxes")
    panel.scroll_into_view_if_needed()
    expect(panel).to_be_visible()
    box = panel.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390 + 1, box
    screenshot(phone, "queues-mailboxes-phone")
