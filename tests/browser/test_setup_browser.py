"""In Chromium: a superuser on an empty install opens the console, is shown what is missing,
adds an intake channel from there with a reader chosen in words, and sees that line done."""

from __future__ import annotations

import re

from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from automation.intake.models import IntakeChannel
from tests.browser.conftest import Person, log_in, screenshot


def test_a_superuser_on_an_empty_install_adds_an_intake_channel_from_the_setup_page(
    page: Page, transactional_db: None
) -> None:
    password = "correct-horse-root-7"
    root = Person(User.objects.create_superuser("root", "root@kennels.example", password), password)

    log_in(page, root)

    expect(page).to_have_url(re.compile(r"/setup/$"))
    expect(page.get_by_role("heading", level=1)).to_have_text("Setting up Gatehouse")
    expect(page.get_by_test_id("state-channel")).to_have_text("Missing")
    expect(page.get_by_test_id("state-policy")).to_have_text("Missing")
    expect(page.get_by_test_id("state-mailbox")).to_have_text("Optional")
    screenshot(page, "setup-empty-install")

    page.get_by_test_id("link-channel").click()
    expect(page).to_have_url(re.compile(r"/setup/channels/new$"))
    page.get_by_label("Name").fill("bookings-mail")
    page.get_by_label("Local reader: the cue words of the business, no model").check()
    screenshot(page, "setup-new-channel")
    page.get_by_role("button", name="Add the channel").click()

    expect(page).to_have_url(re.compile(r"/setup/$"))
    expect(page.get_by_role("status")).to_have_text("Added the channel bookings-mail.")
    expect(page.get_by_test_id("state-channel")).to_have_text("Done")
    expect(page.get_by_test_id("step-channel")).to_contain_text(
        "bookings-mail (Local reader: the cue words of the business, no model)"
    )
    expect(page.get_by_test_id("state-policy")).to_have_text("Missing")  # still to do
    screenshot(page, "setup-channel-added")
    channel = IntakeChannel.objects.get(name="bookings-mail")
    assert (channel.classifier, channel.classifier_version) == ("heuristic", "heuristic-3")
