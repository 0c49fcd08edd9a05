"""About the run states in a real browser: the diagram and the table speak in words."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from automation.models import State
from console import vocabulary
from tests.browser.conftest import PLAYWRIGHT_MISSING, Person, log_in, screenshot

pytest.importorskip("playwright.sync_api", reason=PLAYWRIGHT_MISSING, exc_type=ImportError)
from playwright.sync_api import Page, expect

CODE = re.compile(r"^[a-z]+(_[a-z]+)*$")


def test_a_person_without_a_role_opens_the_run_states_from_the_navigation(
    page: Page, make_person: Callable[..., Person]
) -> None:
    log_in(page, make_person("nadia"), "/qa/")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Run states").click()

    expect(page).to_have_url(re.compile(r"/about/states/$"))
    expect(page.get_by_role("heading", level=1)).to_have_text("About the run states")
    diagram = page.get_by_role("img", name=re.compile("^The run states"))
    expect(diagram).to_be_visible()
    labels = diagram.locator("g[data-state] text.label")
    for words in ("Needs a person", "Waiting for approval", "Stopped by policy"):
        expect(labels.filter(has_text=words)).to_be_visible()
    expect(labels).to_have_count(len(State))
    for text in labels.all_text_contents():
        assert not CODE.match(text.strip()), f"{text!r} reads as a code"
        assert text.strip() in {vocabulary.label("state", s) for s in State}
    table = page.get_by_test_id("state-table")
    expect(table.get_by_test_id("state-needs_review").locator("td").first).to_contain_text(
        "Needs a person"
    )
    expect(table.get_by_test_id("state-needs_review")).to_contain_text(
        vocabulary.explain("state", State.NEEDS_REVIEW)
    )
    screenshot(page, "run-states")
