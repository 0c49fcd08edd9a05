"""An insurer's ops lead loads its policyholders from a file in the console, sees a wrong
file refused line by line with nothing loaded, then finds a customer by a policy number and
by a name."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from automation.intake.models import Customer
from tests.browser.conftest import PLAYWRIGHT_MISSING, Person, log_in, screenshot
from tests.insurer import CUSTOMERS_CSV, HOUSEHOLD, LANDLORD, activate_insurer

pytest.importorskip("playwright.sync_api", reason=PLAYWRIGHT_MISSING, exc_type=ImportError)
from playwright.sync_api import Page, expect


def test_a_customer_file_is_uploaded_and_its_customers_found(
    page: Page, make_person: Callable[..., Person], tmp_path: Path
) -> None:
    activate_insurer()
    lead = make_person("olivia", "ops-leads")
    wrong, good = tmp_path / "wrong.csv", tmp_path / "policyholders.csv"
    wrong.write_text(CUSTOMERS_CSV + "CUST-10001,Old list,household,\n", encoding="utf-8")
    good.write_text(CUSTOMERS_CSV, encoding="utf-8")

    log_in(page, lead, "/customers/")
    page.get_by_test_id("upload-customers").click()
    page.get_by_label("Customer file (CSV)").set_input_files(str(wrong))
    page.get_by_role("button", name="Load the file").click()
    problems = page.get_by_test_id("upload-problems")
    expect(problems).to_contain_text("Nothing was loaded")
    expect(problems).to_contain_text("line 4:")
    expect(problems).to_contain_text("CUST-10001")
    assert not Customer.objects.exists()

    page.get_by_label("Customer file (CSV)").set_input_files(str(good))
    page.get_by_role("button", name="Load the file").click()
    expect(page.get_by_text("2 customers added, 0 updated")).to_be_visible()
    rows = page.get_by_test_id("customer-row")
    expect(rows).to_have_count(2)

    search = page.get_by_test_id("customer-search")
    search.get_by_label("Find a customer").fill(HOUSEHOLD)
    search.get_by_role("button", name="Search").click()
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("Amira Haddad")

    search.get_by_label("Find a customer").fill("greenhill")
    search.get_by_role("button", name="Search").click()
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text(LANDLORD)
    screenshot(page, "customers-found")
