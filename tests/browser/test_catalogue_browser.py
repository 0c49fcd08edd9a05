"""A business changed through the console only, end to end in a real browser.

An ops lead adds a request type, `warranty_claim`, with two fields, the route it goes to and
an `http` effect whose body template maps the fields, reads the diff, simulates and
activates. A warranty claim then arrives by e-mail, is read with the new cues and waits for
a finance approver, who approves it in the browser: a real receiver on 127.0.0.1 gets the
templated body exactly once, although its first answer forces a retry. A quote request gets
an `email_reply`, which reaches a real SMTP server on 127.0.0.1 once, in its thread.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import pytest

from approvals.models import ApprovalRequest, ApprovalStatus
from automation.effects.services import effect_deliver
from automation.intake.customers import customers_load
from automation.intake.services import channel_get_or_create, intake_submit
from automation.mail import parse_message
from automation.models import Effect, EffectStatus, Run, State
from policy.models import PolicyVersion
from policy.services import policy_ensure_defaults
from tests.browser.conftest import PLAYWRIGHT_MISSING, Person, log_in, screenshot
from tests.browser.test_business_browser import fill_the_warranty_desk
from tests.catalogues import activate_effects, email_reply_effect
from tests.conftest import Pipeline
from tests.downstream import Downstream, running_downstream
from tests.mailserver import Inbox, send_through, smtp_server

pytest.importorskip("playwright.sync_api", reason=PLAYWRIGHT_MISSING, exc_type=ImportError)
from playwright.sync_api import BrowserContext, Page, expect

MAIL = Path(__file__).resolve().parents[1] / "data" / "mail"
QUOTE = "01-quote-request-northwind.eml"
TOKEN_VARIABLE = "TEST_EFFECT_WARRANTY_DESK_TOKEN"
FIELDS = """serial_number: reference, required, label Serial number, pattern SN-[0-9]{6}
purchase_date: date, required, label Purchase date
"""
CUES = "en: warranty, warranty claim, guarantee\nde: garantie, garantiefall\n"
PARAMETERS = """serial: {value: "{{ fields.serial_number }}", type: reference}
bought: {value: "{{ fields.purchase_date }}", type: date}
"""


def ticket_settings(url: str) -> str:
    return f"""method: POST
url: {url}
headers:
  Authorization: {{secret: {TOKEN_VARIABLE}}}
body:
  ticket:
    subject: "Warranty claim {{{{ params.serial }}}}"
    serial: "{{{{ params.serial }}}}"
    bought: "{{{{ params.bought }}}}"
    requester: "{{{{ run.sender }}}}"
"""


def warranty_mail() -> bytes:
    message = EmailMessage()
    message["From"] = "Ada Park <ada@customer.example>"
    message["To"] = "service@gatehouse.example"
    message["Subject"] = "Warranty claim: the blender stopped"
    message["Message-ID"] = "<warranty-1@customer.example>"
    message["Date"] = "Tue, 01 Dec 2026 09:00:00 +0000"
    message.set_content(
        "Hello,\n\nmy blender gave up after four months, so this is a warranty claim.\n"
        "The serial number is SN-204518 and I bought it on 2026-08-03.\n\nAda Park\n"
    )
    return message.as_bytes()


@pytest.fixture
def receivers(monkeypatch: pytest.MonkeyPatch, settings: Any) -> Iterator[tuple[Downstream, Inbox]]:
    monkeypatch.setenv(TOKEN_VARIABLE, "Bearer warranty-desk")
    with running_downstream("w" * 32) as desk, smtp_server() as inbox:
        send_through(settings, inbox)
        settings.DEFAULT_FROM_EMAIL = "Service <service@gatehouse.example>"
        yield desk, inbox


@pytest.fixture
def mailbox(roles: None, receivers: tuple[Downstream, Inbox]) -> Pipeline:
    """The reference business, whose follow-ups are answered by e-mail, and the mailbox."""
    policy_ensure_defaults()
    customers_load(path=MAIL / "customers.csv")
    activate_effects(
        {
            "create_follow_up": email_reply_effect(
                {"en": {"subject": "Re: {{ run.subject }}", "body": "Thank you, we are on it."}}
            )
        }
    )
    return Pipeline(channel_get_or_create(name="email"))


def take_in(pipeline: Pipeline, raw: bytes) -> Run:
    with pipeline.capture():
        result = intake_submit(
            channel=pipeline.channel, raw=raw, content_type="message/rfc822", source="test"
        )
    pipeline.drain()
    assert result.run is not None
    return Run.objects.get(pk=result.run.pk)


def add_the_warranty_desk(page: Page, desk: Downstream) -> str:
    """Through the business form only; returns the draft's name."""
    page.goto("/policy/")
    page.get_by_test_id("edit-business").click()
    expect(page).to_have_url(re.compile(r"/policy/business$"))
    fill_the_warranty_desk(page, FIELDS, CUES, ticket_settings(desk.url), PARAMETERS)
    page.get_by_role("button", name="Save the business as a draft").click()
    expect(page).to_have_url(re.compile(r"/policy/warranty-1/$"))
    return "warranty-1"


def test_an_ops_lead_adds_a_request_type_and_its_effect_and_the_claim_is_delivered_once(
    page: Page,
    new_context: Callable[..., BrowserContext],
    make_person: Callable[..., Person],
    mailbox: Pipeline,
    receivers: tuple[Downstream, Inbox],
) -> None:
    desk, inbox = receivers
    # A quote request before the change: its follow-up is an answer by e-mail, in its thread.
    quote = take_in(mailbox, (MAIL / QUOTE).read_bytes())
    original = parse_message((MAIL / QUOTE).read_bytes())
    assert quote.state == State.COMPLETED
    (reply,) = inbox.received
    assert reply.recipients == [original.sender]
    assert reply.message["In-Reply-To"] == f"<{original.message_id}>"
    assert reply.message["References"].split()[-1] == f"<{original.message_id}>"
    assert reply.message["Message-ID"].startswith(
        f"<{Effect.objects.get(run=quote).idempotency_key[:40]}@"
    )

    log_in(page, make_person("olga", "ops-leads"), "/policy/")
    name = add_the_warranty_desk(page, desk)
    diff = page.get_by_test_id("diff")
    expect(diff.locator("span.add", has_text="warranty_claim: warranty_desk")).to_have_count(1)
    expect(diff.locator("span.add", has_text="open_warranty_ticket")).not_to_have_count(0)
    expect(diff.locator("span.add", has_text="SN-[0-9]{6}")).not_to_have_count(0)
    page.get_by_role("button", name="Simulate").click()
    expect(page).to_have_url(re.compile(r"/policy/simulations/\d+/$"))
    expect(page.get_by_test_id("simulation-status")).to_contain_text("Finished", timeout=15_000)
    expect(page.get_by_test_id("simulation-progress")).to_contain_text("1 / 1")
    page.get_by_role("link", name=f"← {name}").click()
    page.get_by_role("link", name=f"Activate {name}").click()
    page.get_by_role("button", name=f"Confirm: activate {name}").click()
    expect(page.get_by_role("heading", level=1).locator(".badge")).to_have_text("Active")
    assert PolicyVersion.objects.get(is_active=True).name == name

    # The claim arrives, is read with the new cues and fields, and waits for finance.
    claim = take_in(mailbox, warranty_mail())
    assert (claim.state, claim.category, claim.effect_name) == (
        State.APPROVAL_REQUIRED,
        "warranty_claim",
        "open_warranty_ticket",
    )
    request = ApprovalRequest.objects.get(run=claim, status=ApprovalStatus.PENDING)
    assert request.group == "finance-approvers"
    assert request.effect_payload["params"] == {"serial": "SN-204518", "bought": "2026-08-03"}

    # The receiver fails the first delivery: the outbox tries again, on the same key.
    desk.then(("status", 503, {}))
    approving = new_context().new_page()
    log_in(approving, make_person("fiona", "finance-approvers"))
    approving.goto(f"/approvals/{request.pk}/")
    expect(approving.get_by_test_id("effect-request")).to_contain_text("SN-204518")
    screenshot(approving, "catalogue-approval")
    approving.get_by_role("button", name="Approve").click()
    expect(approving.get_by_test_id("request-status")).to_have_text("Approved")
    effect = Effect.objects.get(run=claim)
    assert (effect.status, len(desk.requests)) == (EffectStatus.RETRY_WAIT, 1)
    effect_deliver(effect_id=effect.pk, now=effect.next_attempt_at)
    effect_deliver(effect_id=effect.pk, now=effect.next_attempt_at)  # a duplicate message

    effect.refresh_from_db()
    assert effect.status == EffectStatus.DELIVERED
    first, second = desk.requests
    assert first.key == second.key == effect.idempotency_key
    assert desk.performed == [effect.idempotency_key]
    assert second.payload == {
        "ticket": {
            "subject": "Warranty claim SN-204518",
            "serial": "SN-204518",
            "bought": "2026-08-03",
            "requester": "ada@customer.example",
        }
    }
    assert second.headers["Authorization"] == "Bearer warranty-desk"
    assert Run.objects.get(pk=claim.pk).state == State.COMPLETED
    assert len(inbox.received) == 1  # the claim sent no mail; the quote's reply went once
