"""The customer pages for the insurer of the tests' own (tests/insurer.py): searched by who
reads runs; added, changed and loaded from a file by ops leads, each refusal at its field or
line and nothing written; and the business form's "How customers are matched"."""

from __future__ import annotations

import html
import re

import pytest
from django.contrib.auth.models import Group, User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from audit.models import AuditAction, AuditEvent
from automation.intake.customers import customers_upload
from automation.intake.models import Customer
from policy.models import PolicyVersion
from policy.services import policy_business
from tests.console.test_business_form import error_next_to, starting_values
from tests.insurer import CUSTOMERS_CSV, HOUSEHOLD, LANDLORD, POLICY_PATTERN, activate_insurer

LIST = reverse("customers:list")
NEW = reverse("customers:new")
UPLOAD = reverse("customers:upload")
BUSINESS = reverse("policy:business")


def person(name: str, group: str) -> User:
    user = User.objects.create_user(name)
    user.groups.add(Group.objects.get(name=group))
    return user


def signed_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def lead(db: None) -> User:
    activate_insurer()
    return person("insurer-lead", "ops-leads")


@pytest.fixture
def client(lead: User) -> Client:
    return signed_in(lead)


@pytest.fixture
def loaded(lead: User) -> None:
    customers_upload(user=lead, content=CUSTOMERS_CSV.encode(), source="test")


def rows(page: str) -> list[str]:
    found = re.findall(r'data-testid="customer-row">\s*<td>(?:<a [^>]*>)?([^<]+)<', page)
    return [html.unescape(reference) for reference in found]


def upload_file(client: Client, text: str) -> str:
    csv = SimpleUploadedFile("policyholders.csv", text.encode(), content_type="text/csv")
    response = client.post(UPLOAD, {"file": csv}, follow=True)
    return response.content.decode()


@pytest.mark.usefixtures("loaded")
@pytest.mark.parametrize(
    ("search", "found"),
    [
        ("", [LANDLORD, HOUSEHOLD]),
        ("pol-2026", [HOUSEHOLD]),
        ("greenhill lett", [LANDLORD]),
        ("greenhill.example", [LANDLORD]),
        ("nobody", []),
    ],
)
def test_the_list_is_searched_by_reference_name_and_domain(
    client: Client, search: str, found: list[str]
) -> None:
    page = client.get(LIST, {"q": search}).content.decode()
    assert rows(page) == found
    if not found:
        assert 'data-testid="no-customers"' in page


@pytest.mark.usefixtures("loaded")
def test_a_nul_in_the_search_is_a_clear_refusal(client: Client) -> None:
    assert client.get(LIST, {"q": "Amira\x00"}).status_code == 400
    assert rows(client.get(LIST, {"q": "amira"}).content.decode()) == [HOUSEHOLD]


def test_the_list_is_read_in_pages(client: Client, lead: User) -> None:
    lines = [f"POL-2026-{n:06d},Holder {n},household," for n in range(1, 61)]
    customers_upload(
        user=lead,
        content=("reference,name,account_tier,email_domains\n" + "\n".join(lines)).encode(),
        source="test",
    )
    first = client.get(LIST).content.decode()
    assert len(rows(first)) == 50 and rows(first)[-1] == "POL-2026-000050"
    after = re.search(r'href="\?q=&amp;after=([^"]+)" rel="next"', first)
    assert after is not None
    second = client.get(LIST, {"after": html.unescape(after.group(1))}).content.decode()
    assert rows(second) == [f"POL-2026-{n:06d}" for n in range(51, 61)]


def test_a_customer_is_added_and_a_wrong_one_is_refused_at_its_fields(client: Client) -> None:
    wrong = client.post(
        NEW, {"reference": "CUST-12345", "name": "Jonas Berg", "account_tier": "household"}
    )
    assert wrong.status_code == 400
    page = wrong.content.decode()
    assert POLICY_PATTERN in error_next_to(page, "reference")
    assert not Customer.objects.exists()

    added = client.post(
        NEW,
        {
            "reference": "POL-2026-000900",
            "name": "Jonas Berg",
            "account_tier": "landlord",
            "email_domains": "berg.example, berg-lettings.example",
        },
    )
    assert added.status_code == 302
    customer = Customer.objects.get(reference="POL-2026-000900")
    assert customer.email_domains == ["berg.example", "berg-lettings.example"]
    assert AuditEvent.objects.filter(action=AuditAction.CUSTOMER_ADDED).count() == 1


@pytest.mark.usefixtures("loaded")
def test_a_customer_is_changed_and_keeps_its_reference(client: Client) -> None:
    customer = Customer.objects.get(reference=HOUSEHOLD)
    edit = reverse("customers:edit", args=[customer.pk])
    assert "household" in client.get(edit).content.decode()

    refused = client.post(edit, {"name": "Amira Haddad", "account_tier": "gold"})
    assert refused.status_code == 400
    assert "gold" in error_next_to(refused.content.decode(), "account_tier")

    saved = client.post(
        edit,
        {"reference": "POL-1999-999999", "name": "Amira Haddad", "account_tier": "landlord"},
    )
    assert saved.status_code == 302
    customer.refresh_from_db()
    assert (customer.reference, customer.account_tier) == (HOUSEHOLD, "landlord")


def test_a_file_is_loaded_from_the_page(client: Client) -> None:
    page = upload_file(client, CUSTOMERS_CSV)
    assert "2 customers added, 0 updated" in page
    assert rows(page) == [LANDLORD, HOUSEHOLD]


def test_a_wrong_file_names_its_lines_and_loads_nothing(client: Client) -> None:
    page = upload_file(
        client, CUSTOMERS_CSV + "CUST-10001,Wrong,household,\nPOL-2026-000001,X,gold,\n"
    )
    problems = re.search(r'data-testid="upload-problems">(.*?)</div>', page, re.DOTALL)
    assert problems is not None
    said = html.unescape(re.sub(r"<[^>]+>", "", problems.group(1)))
    assert "Nothing was loaded" in said
    assert "line 4:" in said and "CUST-10001" in said and "line 5:" in said and "gold" in said
    assert not Customer.objects.exists()


@pytest.mark.usefixtures("loaded")
def test_who_reads_runs_reads_the_list_and_changes_nothing(lead: User) -> None:
    auditor = signed_in(person("insurer-auditor", "auditors"))
    page = auditor.get(LIST).content.decode()
    assert rows(page) == [LANDLORD, HOUSEHOLD]
    customer = Customer.objects.get(reference=HOUSEHOLD)
    edit = reverse("customers:edit", args=[customer.pk])
    assert 'data-testid="add-customer"' not in page and f'href="{edit}"' not in page
    assert auditor.get(NEW).status_code == 403
    assert auditor.post(edit, {"name": "Eve", "account_tier": "household"}).status_code == 403
    csv = SimpleUploadedFile("eve.csv", CUSTOMERS_CSV.replace("Amira", "Eve").encode())
    assert auditor.post(UPLOAD, {"file": csv}).status_code == 403
    assert Customer.objects.get(reference=HOUSEHOLD).name == "Amira Haddad"


def test_an_approver_sees_no_customers(lead: User) -> None:
    approver = signed_in(person("insurer-approver", "security-approvers"))
    assert approver.get(LIST).status_code == 403


# --- how customers are matched, in the business form -----------------------------------------


def test_the_business_form_saves_how_customers_are_matched(client: Client) -> None:
    data = starting_values(client)
    assert data["matching-pattern"] == POLICY_PATTERN and "matching-domains" not in data
    data |= {"version": "home-insurer-2", "matching-pattern": r"HP-\d{7}", "matching-domains": "on"}

    response = client.post(BUSINESS, data)

    assert response.status_code == 302
    saved = PolicyVersion.objects.get(name="home-insurer-2").parsed.business.matching
    assert (saved.reference_pattern, saved.match_sender_domain) == (r"HP-\d{7}", True)
    # The active version still decides: customers are held to its pattern until it changes.
    assert policy_business(name=None).matching.reference_pattern == POLICY_PATTERN


@pytest.mark.parametrize(
    ("pattern", "said"),
    [
        (r"(POL-\d+)+", "repeats a repeated group"),
        ("POL-[0-9", "is not a regular expression"),
        ("x*", "matches an empty text"),
    ],
)
def test_a_pattern_that_is_no_reference_is_refused_at_its_field(
    client: Client, pattern: str, said: str
) -> None:
    data = starting_values(client) | {"version": "home-insurer-2", "matching-pattern": pattern}
    response = client.post(BUSINESS, data)

    assert response.status_code == 400
    assert said in error_next_to(response.content.decode(), "matching-pattern")
    assert not PolicyVersion.objects.filter(name="home-insurer-2").exists()
