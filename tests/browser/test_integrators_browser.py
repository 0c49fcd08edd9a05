"""In Chromium: the API reference from the footer, a refusal that says what the account may
do instead, and the browser features the console denies itself."""

from __future__ import annotations

from collections.abc import Callable

from playwright.sync_api import Page, expect

from tests.browser.conftest import Person, log_in, screenshot


def test_an_approver_finds_the_api_reference_in_the_footer(
    page: Page, make_person: Callable[..., Person]
) -> None:
    log_in(page, make_person("ana", "security-approvers"))

    page.get_by_role("link", name="API reference for integrators").click()

    expect(page.get_by_role("heading", level=1)).to_contain_text("Gatehouse intake API")
    expect(page.get_by_role("heading", name="Send one request")).to_be_visible()
    expect(page.get_by_role("heading", name="What became of a run")).to_be_visible()
    send = page.locator("#submitEvent")
    expect(send.get_by_role("cell", name="requested_action", exact=True)).to_be_visible()
    expect(send.locator("pre.curl").first).to_contain_text("curl -X POST")
    example = send.locator("details", has_text="Example: A run started")
    expect(example.locator("pre")).not_to_be_visible()
    example.get_by_text("Example: A run started").click()
    expect(example.locator("pre")).to_contain_text('"run_page": "https://')
    screenshot(page, "api-reference")


def test_an_approver_on_an_ops_page_is_shown_their_role_and_their_inbox(
    page: Page, make_person: Callable[..., Person]
) -> None:
    log_in(page, make_person("fin", "finance-approvers"))

    response = page.goto("/ops/queues/")

    assert response is not None and response.status == 403
    expect(page.get_by_role("heading", name="You may not open this page")).to_be_visible()
    expect(page.get_by_test_id("your-roles")).to_contain_text("Finance approver")
    page.get_by_role("link", name="Your approvals inbox").click()
    expect(page).to_have_url(f"{page.url.split('/approvals/')[0]}/approvals/")
    screenshot(page, "forbidden-approver-sent-to-inbox")


def test_the_console_denies_itself_the_browser_features_it_never_uses(
    page: Page, make_person: Callable[..., Person]
) -> None:
    """Chromium reads the Permissions-Policy header without a complaint (an unknown feature
    name is a console warning) and refuses the features it names."""
    warnings: list[str] = []
    page.on("console", lambda message: warnings.append(message.text))
    log_in(page, make_person("ana", "security-approvers"))
    page.goto("/approvals/")

    allowed = page.evaluate(
        "names => names.map(name => document.featurePolicy.allowsFeature(name))",
        ["camera", "microphone", "geolocation", "payment", "usb"],
    )

    assert allowed == [False] * 5
    assert not [text for text in warnings if "Permissions-Policy" in text]
