"""A company sets Gatehouse up for its own business in the console, in a real browser, from
an empty install with only a superuser: a vet clinic's teams and people, its business started
from nothing (three request types, two routes owned by the teams, an `http` effect naming a
secret that the surgery team approves, an `email_reply`), simulated and activated, an intake
channel with an API token, its clients uploaded, and the setup page shows nothing missing.
Then an integrator posts owners' e-mails with the key: a vaccination question is answered by
e-mail at once (a real SMTP server on 127.0.0.1 gets the reply, in its thread); a surgery
booking waits for the surgery team. A front-desk member, whose team has no approver role, is
refused it; a surgery team member approves it in her inbox and the clinic's practice system,
a receiver on 127.0.0.1, gets the booking exactly once, with the secret's value in its header.

Nothing after the superuser is made is written by the test: every step is a page.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import Group, User

from approvals.models import ApprovalRequest
from automation.intake.models import ApiToken, Customer, IntakeChannel
from policy.models import PolicyVersion
from tests.browser.conftest import PLAYWRIGHT_MISSING, Person, log_in, screenshot
from tests.downstream import Downstream, running_downstream
from tests.mailserver import Inbox, send_through, smtp_server

pytest.importorskip("playwright.sync_api", reason=PLAYWRIGHT_MISSING, exc_type=ImportError)
from playwright.sync_api import BrowserContext, Page, expect

SECRET = "CLINIC_PRACTICE_SYSTEM_TOKEN"
SECRET_VALUE = "Bearer clinic-7f3a91"
ROOT_PASSWORD = "correct-horse-root-7"
VERA_PASSWORD = "correct-horse-vera-7"
FRANK_PASSWORD = "correct-horse-frank-7"
CLIENTS_CSV = (
    "reference,name,account_tier,email_domains\n"
    "PET-0001,Maple Farm,breeder,maplefarm.example\n"
    "PET-0002,Sam Ortiz,household,\n"
)


def booking_settings(url: str) -> str:
    return f"""method: POST
url: {url}
headers:
  Authorization: {{secret: {SECRET}}}
body:
  booking:
    what: "{{{{ run.subject }}}}"
    owner: "{{{{ run.sender }}}}"
"""


REPLY_SETTINGS = """default_language: en
templates:
  en:
    subject: "Re: {{ run.subject }}"
    body: "Thank you: the clinic's front desk has your message and answers today."
"""


def owner_mail(message_id: str, subject: str, text: str) -> bytes:
    message = EmailMessage()
    message["From"] = "Maple Farm <office@maplefarm.example>"
    message["To"] = "desk@clinic.example"
    message["Subject"] = subject
    message["Message-ID"] = f"<{message_id}@maplefarm.example>"
    message["Date"] = "Thu, 03 Dec 2026 09:00:00 +0000"
    message.set_content(f"Hello,\n\n{text}\n\nMaple Farm\n")
    return message.as_bytes()


def surgery_mail() -> bytes:
    return owner_mail(
        "surgery-1",
        "Surgery booking for our dog Biscuit",
        "please book a surgery for Biscuit: the vet said the operation on his knee should be "
        "done soon. Can we book the surgery next week?",
    )


def vaccination_mail() -> bytes:
    return owner_mail(
        "vaccination-1",
        "Booster for the puppies",
        "our three puppies are due their vaccination booster. When can they come for the jab?",
    )


@pytest.fixture
def receivers(monkeypatch: pytest.MonkeyPatch, settings: Any) -> Iterator[tuple[Downstream, Inbox]]:
    """The practice system and the mail server; the operator declared the secret by name."""
    monkeypatch.setenv(SECRET, SECRET_VALUE)
    settings.GATEHOUSE_EFFECT_SECRETS = settings.GATEHOUSE_EFFECT_SECRETS | {SECRET}
    with running_downstream("c" * 32) as system, smtp_server() as inbox:
        send_through(settings, inbox)
        settings.DEFAULT_FROM_EMAIL = "Riverside Vets <desk@clinic.example>"
        yield system, inbox


@pytest.fixture
def root(transactional_db: None) -> Person:
    """The only thing made outside the browser: the install's superuser."""
    user = User.objects.create_superuser("root", "root@clinic.example", ROOT_PASSWORD)
    return Person(user, ROOT_PASSWORD)


def make_team(page: Page, name: str, does: str, *, approver: bool) -> None:
    page.goto("/teams/new")
    form = page.get_by_test_id("team-form")
    form.get_by_label("Name").fill(name)
    form.get_by_label("What the team does").fill(does)
    if approver:
        form.get_by_role("checkbox", name=re.compile(r"^Approver ")).check()
    form.get_by_role("button", name="Make the team").click()
    expect(page.get_by_role("status")).to_have_text(f"Team {name} made. Add its people here.")
    expect(page.get_by_test_id("team-roles")).to_contain_text(
        "Approver" if approver else "none: its people may do nothing yet"
    )


def add_person(page: Page, username: str, first_name: str, password: str, team: str) -> None:
    page.goto("/people/new")
    person = page.get_by_test_id("person-form")
    person.get_by_label("Username").fill(username)
    person.get_by_label("First name").fill(first_name)
    person.get_by_label("E-mail address").fill(f"{username}@clinic.example")
    person.get_by_label("Password").fill(password)
    person.get_by_role("button", name="Add the person").click()
    expect(page.get_by_role("status")).to_have_text(f"{username} added. Put them in a team.")
    page.goto(f"/teams/{team}/")
    members = page.get_by_test_id("member-form")
    members.get_by_label("Add a person (their username)").fill(username)
    members.get_by_role("button", name="Add to the team").click()
    expect(page.get_by_role("status")).to_have_text(f"{username} is now in {team}.")
    expect(page.get_by_test_id("members")).to_contain_text(username)


def fill(page: Page, values: dict[str, str]) -> None:
    """Type into the business form's fields, each found by the name the form sends."""
    for name, value in values.items():
        field = page.locator(f'[name="{name}"]')
        tag = field.evaluate("e => e.tagName")
        if tag == "SELECT":
            field.select_option(value)
        elif field.get_attribute("type") == "checkbox":
            field.check()
        else:
            field.fill(value)


def add_another(page: Page, kind: str, block: str) -> None:
    page.get_by_test_id(f"add-another-{kind}").click()
    expect(page.get_by_test_id(block)).to_be_visible()


def start_the_clinic(page: Page, system: Downstream) -> None:
    """The whole business in one save of the form started from nothing."""
    page.goto("/policy/business")
    page.get_by_role("link", name="Start from nothing").click()
    expect(page.locator("form[data-business][data-ready]")).to_have_count(1)
    add_another(page, "route", "add-route-2")
    add_another(page, "type", "add-type-2")
    add_another(page, "type", "add-type-3")
    add_another(page, "effect", "add-effect-2")
    fill(
        page,
        {
            "version": "clinic-1",
            "note": "Riverside Vets: surgery bookings, vaccinations and bills.",
            "new_route-name": "surgery",
            "new_route-label": "Surgery",
            "new_route-group": "surgery-team",
            "new_route2-name": "reception",
            "new_route2-label": "Reception",
            "new_route2-group": "front-desk",
            "new_type-name": "surgery_booking",
            "new_type-label": "Surgery booking",
            "new_type-description": "An owner asks for an operation on their animal.",
            "new_type-cues": "en: surgery, operation, book a surgery",
            "new_type-weight": "3",
            "new_type-route": "+new",
            "new_type-effect": "+new",
            "new_type-always": "on",
            "new_type2-name": "vaccination",
            "new_type2-label": "Vaccination",
            "new_type2-description": "A vaccination or a booster.",
            "new_type2-cues": "en: vaccination, booster, jab",
            "new_type2-route": "+new2",
            "new_type2-effect": "+new2",
            "new_type3-name": "bill_question",
            "new_type3-label": "Question about a bill",
            "new_type3-description": "An owner asks about an invoice.",
            "new_type3-cues": "en: invoice, bill, payment",
            "new_type3-route": "+new2",
            "new_type3-effect": "+new2",
            "new_effect-name": "book_surgery",
            "new_effect-label": "Book the surgery",
            "new_effect-description": "A booking in the practice system.",
            "new_effect-adapter": "http",
            "new_effect-settings": booking_settings(system.url),
            "new_effect-allowed": "on",
            "new_effect-approver": "surgery-team",
            "new_effect2-name": "answer_owner",
            "new_effect2-label": "Answer the owner",
            "new_effect2-description": "A reply in the owner's thread.",
            "new_effect2-adapter": "email_reply",
            "new_effect2-settings": REPLY_SETTINGS,
            "new_effect2-allowed": "on",
            "new_attribute-name": "tier",
            "new_attribute-label": "Client",
            "new_attribute-values": "household, breeder",
            "matching-pattern": "PET-[0-9]{4}",
        },
    )
    screenshot(page, "company-setup-business")
    page.get_by_test_id("save").click()
    expect(page).to_have_url(re.compile(r"/policy/clinic-1/$"))


def simulate_and_activate(page: Page, name: str) -> None:
    page.get_by_role("button", name="Simulate").click()
    expect(page).to_have_url(re.compile(r"/policy/simulations/\d+/$"))
    expect(page.get_by_test_id("simulation-status")).to_contain_text("Finished", timeout=15_000)
    page.get_by_role("link", name=f"← {name}").click()
    page.get_by_role("link", name=f"Activate {name}").click()
    page.get_by_role("button", name=f"Confirm: activate {name}").click()
    expect(page.get_by_role("heading", level=1).locator(".badge")).to_have_text("Active")


def add_channel_and_token(page: Page) -> str:
    """The channel, its reader chosen from the list in words, and a token: returns its key."""
    page.goto("/setup/")
    page.get_by_test_id("link-channel").click()
    expect(page).to_have_url(re.compile(r"/setup/channels/new$"))
    page.get_by_label("Name").fill("clinic-api")
    page.get_by_label("Local reader: the cue words of the business, no model").check()
    page.get_by_role("button", name="Add the channel").click()
    expect(page.get_by_role("status")).to_have_text("Added the channel clinic-api.")
    expect(page.get_by_test_id("state-channel")).to_have_text("Done")

    page.get_by_test_id("link-channel").click()  # now "Intake channels"
    page.get_by_role("link", name="clinic-api", exact=True).click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Channel clinic-api")
    tokens = page.get_by_test_id("token-form")
    tokens.get_by_role("textbox").first.fill("practice-website")
    tokens.get_by_role("button", name="Issue a token").click()
    key = page.get_by_test_id("token-key")
    expect(key).not_to_have_value("")
    return key.input_value()


def upload_clients(page: Page, path: Path) -> None:
    page.goto("/customers/")
    page.get_by_test_id("upload-customers").click()
    page.get_by_label("Customer file (CSV)").set_input_files(str(path))
    page.get_by_role("button", name="Load the file").click()
    expect(page.get_by_text("2 customers added, 0 updated")).to_be_visible()
    expect(page.get_by_test_id("customer-row")).to_have_count(2)


def send_mail(url: str, key: str, raw: bytes) -> tuple[int, dict[str, Any]]:
    """What the integrator's system does: the e-mail posted to the intake API."""
    answer = httpx.post(
        f"{url}/api/v1/events",
        content=raw,
        headers={"Authorization": f"Bearer {key}", "Content-Type": "message/rfc822"},
        timeout=30,
    )
    return answer.status_code, answer.json()


def test_a_superuser_sets_a_vet_clinic_up_in_the_console_and_its_first_request_is_approved(
    new_context: Callable[..., BrowserContext],
    root: Person,
    receivers: tuple[Downstream, Inbox],
    live_server: Any,
    tmp_path: Path,
) -> None:
    system, outbox = receivers
    # An empty install: the superuser, and nothing else (no roles set up, no business).
    assert list(User.objects.values_list("username", flat=True)) == ["root"]
    assert not Group.objects.exists()
    assert not PolicyVersion.objects.exists()
    assert not IntakeChannel.objects.exists()
    assert not Customer.objects.exists()

    # 1. Signed in, the superuser is sent to the setup page, which says what is missing.
    page = new_context().new_page()
    log_in(page, root)
    expect(page).to_have_url(re.compile(r"/setup/$"))
    for step in ("approver-team", "route-teams", "policy", "channel"):
        expect(page.get_by_test_id(f"state-{step}")).to_have_text("Missing")
    expect(page.get_by_test_id("state-customers")).to_have_text("Optional")
    screenshot(page, "company-setup-empty")

    # 2. The clinic's teams and their people.
    make_team(page, "surgery-team", "Books and approves operations.", approver=True)
    make_team(page, "front-desk", "Answers the owners' questions.", approver=False)
    add_person(page, "vera", "Vera", VERA_PASSWORD, "surgery-team")
    add_person(page, "frank", "Frank", FRANK_PASSWORD, "front-desk")
    page.goto("/setup/")
    expect(page.get_by_test_id("state-approver-team")).to_have_text("Done")
    expect(page.get_by_test_id("state-route-teams")).to_have_text("Missing")  # no business yet

    # 3. The business, from nothing, saved as a draft, simulated and activated.
    start_the_clinic(page, system)
    diff = page.get_by_test_id("diff")
    expect(diff.locator("span.add", has_text="book_surgery")).not_to_have_count(0)
    simulate_and_activate(page, "clinic-1")

    # 4. and 5. The intake channel with its token, and the clinic's clients.
    key = add_channel_and_token(page)
    clients = tmp_path / "clients.csv"
    clients.write_text(CLIENTS_CSV, encoding="utf-8")
    upload_clients(page, clients)

    # 6. Nothing required is missing any more; the secret is there, its value never shown.
    page.goto("/setup/")
    expect(page.get_by_test_id("setup-summary")).to_have_text(
        "Nothing is missing: this install is set up."
    )
    expect(page.get_by_test_id(f"state-secret-{SECRET}")).to_have_text("Done")
    expect(page.get_by_test_id("state-mail-server")).to_have_text("Done")
    expect(page.get_by_test_id("state-customers")).to_have_text("Done")
    expect(page.get_by_test_id("step-route-teams")).to_contain_text(
        "The routes' work goes to front-desk, surgery-team."
    )
    expect(page.locator("body")).not_to_contain_text(SECRET_VALUE)
    screenshot(page, "company-setup-done")

    # 7. The integrator sends an owner's e-mail with the key.
    status, answer = send_mail(live_server.url, key, surgery_mail())
    assert status == 202, answer
    # A vaccination question is answered at once by the front desk's reply, by e-mail.
    status, answer = send_mail(live_server.url, key, vaccination_mail())
    assert status == 202, answer
    (reply,) = outbox.received
    assert reply.recipients == ["office@maplefarm.example"]
    assert reply.message["Subject"] == "Re: Booster for the puppies"
    assert reply.message["In-Reply-To"] == "<vaccination-1@maplefarm.example>"

    # 8. Vera, of the surgery team, finds it in her inbox and approves it.
    vera = new_context().new_page()
    log_in(vera, Person(User.objects.get(username="vera"), VERA_PASSWORD), "/approvals/")
    vera.get_by_role("link", name=re.compile("Surgery booking for our dog Biscuit")).click()
    expect(vera).to_have_url(re.compile(r"/approvals/\d+/$"))

    # Frank, of the front desk (a team without the approver role), may not decide it.
    frank = new_context().new_page()
    log_in(frank, Person(User.objects.get(username="frank"), FRANK_PASSWORD), "/me/team-queue/")
    expect(frank.locator("main")).to_contain_text(
        "The held runs of the routes your teams own: Reception."
    )
    refused = frank.goto(vera.url)
    assert refused is not None and refused.status == 403
    expect(frank.get_by_role("button", name="Approve", exact=True)).to_have_count(0)

    sent = vera.get_by_test_id("effect-request")
    expect(sent).to_contain_text('"what": "Surgery booking for our dog Biscuit"')
    expect(sent).to_contain_text("credentials are added when it is sent, never shown")
    expect(sent).not_to_contain_text(SECRET_VALUE)
    vera.get_by_role("button", name="Approve", exact=True).click()
    expect(vera.get_by_test_id("request-status")).to_have_text("Approved")
    screenshot(vera, "company-setup-approved")

    (booking,) = system.requests
    assert booking.headers["Authorization"] == SECRET_VALUE
    assert booking.payload == {
        "booking": {
            "what": "Surgery booking for our dog Biscuit",
            "owner": "office@maplefarm.example",
        }
    }
    assert system.performed == [booking.key]
    request = ApprovalRequest.objects.select_related("run").get()
    assert (request.group, request.effect, request.policy_version) == (
        "surgery-team",
        "book_surgery",
        "clinic-1",
    )
    assert [d.user.username for d in request.decisions.select_related("user")] == ["vera"]
    assert (request.run.channel.name, request.run.category) == ("clinic-api", "surgery_booking")
    assert ApiToken.objects.filter(channel__name="clinic-api").count() == 1
