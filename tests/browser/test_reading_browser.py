"""Reading from the console in a real browser: an ops lead of a veterinary clinic (a business
of the tests' own) uploads a labelled set, is told what is wrong with a bad one at its field,
and sees a reader measured on the set per request type, in the clinic's words."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from automation.models import LabelledSet
from tests.automation.vet_clinic import LABELS, activate_vet_clinic, vet_rows, vet_zip
from tests.browser.conftest import PLAYWRIGHT_MISSING, Person, log_in, screenshot

pytest.importorskip("playwright.sync_api", reason=PLAYWRIGHT_MISSING, exc_type=ImportError)
from playwright.sync_api import Page, expect


def test_an_ops_lead_uploads_a_set_and_sees_a_reader_measured_per_type_in_words(
    page: Page, make_person: Callable[..., Person], tmp_path: Path
) -> None:
    activate_vet_clinic()
    lead = make_person("olga", "ops-leads")
    broken = tmp_path / "broken.zip"
    broken.write_bytes(b"file,category,effect,expected_intake\n")
    good = tmp_path / "clinic-march.zip"
    good.write_bytes(vet_zip(vet_rows(per_type=2)))

    log_in(page, lead, "/qa/")
    page.get_by_test_id("reading-link").click()
    expect(page.get_by_test_id("no-sets")).to_be_visible()
    page.get_by_label("Name").fill("clinic-march")
    page.get_by_label("Labelled set (.zip)").set_input_files(broken)
    page.get_by_test_id("upload").click()
    expect(page.get_by_test_id("field-error")).to_contain_text("not a readable .zip file")
    expect(page.get_by_label("Name")).to_have_value("clinic-march")  # nothing lost
    expect(page.get_by_test_id("labelled-sets")).to_contain_text("refused")  # kept as it came
    assert LabelledSet.objects.get().problems == ["the upload is not a readable .zip file"]

    page.get_by_label("Labelled set (.zip)").set_input_files(good)
    page.get_by_test_id("upload").click()
    expect(page.get_by_role("status")).to_contain_text("clinic-march: 8 rows stored")
    types = page.get_by_test_id("set-types")
    for label in LABELS.values():
        expect(types).to_contain_text(label)

    page.get_by_label("Reader").select_option(
        label="Local reader: the cue words of the business, no model"
    )
    page.get_by_test_id("evaluate").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("Local reader")
    expect(page.get_by_test_id("evaluation-summary")).to_contain_text("of 8")
    table = page.get_by_test_id("per-type")
    for kind, label in LABELS.items():
        expect(table.get_by_test_id(f"per-type-{kind}")).to_contain_text(label)
    expect(table).not_to_contain_text("prescription_refill")  # words, not codes
    screenshot(page, "reading-evaluation-per-type")
