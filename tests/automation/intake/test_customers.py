"""The customer registry for a business of the tests' own (an insurer, tests/insurer.py):
matching by the catalogue's own pattern, the file loaded whole or not at all, one customer
added and changed, and who may."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml
from django.contrib.auth.models import Group, User
from django.core.exceptions import PermissionDenied
from django.core.management import CommandError, call_command

from accounts.roles import roles_ensure
from audit.models import AuditAction, AuditEvent
from automation.classifiers import heuristic
from automation.intake.customers import (
    MAX_FILE_BYTES,
    CustomerFileInvalid,
    CustomerInvalid,
    customer_add,
    customer_change,
    customer_find,
    customers_upload,
)
from automation.intake.models import Customer
from automation.intake.services import intake_submit
from automation.models import Run
from policy.services import parse_policy_text, policy_business
from tests.conftest import Pipeline
from tests.insurer import (
    CUSTOMERS_CSV,
    HOUSEHOLD,
    LANDLORD,
    POLICY_PATTERN,
    activate_insurer,
    claim_mail,
    claim_reading,
    insurer_channel,
    insurer_document,
)


@pytest.fixture
def insurer(db: None) -> None:
    activate_insurer()


@pytest.fixture
def lead(insurer: None) -> User:
    user = User.objects.create_user("insurer-lead")
    user.groups.add(Group.objects.get(name="ops-leads"))
    return user


@pytest.fixture
def auditor(insurer: None) -> User:
    user = User.objects.create_user("insurer-auditor")
    user.groups.add(Group.objects.get(name="auditors"))
    return user


def upload(user: User, text: str) -> tuple[int, int]:
    return customers_upload(user=user, content=text.encode(), source="upload:test.csv")


def test_the_catalogues_pattern_matches_a_policy_number_with_no_setting_changed(
    lead: User, settings: object
) -> None:
    upload(lead, CUSTOMERS_CSV)
    pipeline = Pipeline(insurer_channel())
    body = f"A pipe burst under the sink. My policy is {HOUSEHOLD}."
    with pipeline.capture():
        result = intake_submit(
            channel=pipeline.channel,
            raw=claim_mail(body),
            content_type="message/rfc822",
            source="test",
        )
    assert result.run is not None
    pipeline.record(result.run.event_id, [{"type": "decision", "value": claim_reading()}])
    pipeline.drain()

    run = Run.objects.get(pk=result.run.pk)
    assert run.enrichment["customer"] == {"reference": HOUSEHOLD, "name": "Amira Haddad"}
    assert run.enrichment["customer_matched_by"] == "reference"


def test_a_business_that_matches_no_domains_leaves_a_domain_unmatched(lead: User) -> None:
    upload(lead, CUSTOMERS_CSV)
    matching = policy_business(name=None).matching

    by_domain = customer_find(text="no number", sender="a@greenhill.example", matching=matching)
    by_number = customer_find(text=f"policy {LANDLORD}", sender="", matching=matching)

    assert by_domain.customer is None
    assert by_number.customer is not None and by_number.customer.reference == LANDLORD
    # The server's pattern (CUST-nnnnn) finds nothing of the insurer's.
    assert customer_find(text=f"policy {LANDLORD}").customer is None


def test_the_heuristic_reads_a_customer_reference_as_the_business_writes_one() -> None:
    business = parse_policy_text(yaml.safe_dump(insurer_document())).business
    event = {
        "subject": "Claim",
        "body": f"Water everywhere. Policy {LANDLORD}.",
        "sender": "a@b.example",
    }

    fields = heuristic.read(event, business=business)["fields"]

    assert fields["customer_reference"]["value"] == LANDLORD
    assert "customer_reference" not in heuristic.read(event)["fields"]  # CUST-nnnnn only


def test_without_a_pattern_of_its_own_the_setting_decides(db: None) -> None:
    activate_insurer(customer_matching=None)
    Customer.objects.create(reference="CUST-10077", name="Old style", account_tier="household")
    matching = policy_business(name=None).matching
    found = customer_find(text="about CUST-10077 and POL-2026-004211", matching=matching)

    assert found.customer is not None and found.customer.reference == "CUST-10077"


def test_a_good_file_adds_and_updates_and_is_recorded(lead: User) -> None:
    assert upload(lead, CUSTOMERS_CSV) == (2, 0)
    changed = CUSTOMERS_CSV.replace("Amira Haddad,household", "Amira Haddad-Kerr,landlord")

    assert upload(lead, changed) == (0, 2)

    amira = Customer.objects.get(reference=HOUSEHOLD)
    assert (amira.name, amira.account_tier) == ("Amira Haddad-Kerr", "landlord")
    landlord = Customer.objects.get(reference=LANDLORD)
    assert landlord.email_domains == ["greenhill-lettings.example", "greenhill.example"]
    loads = AuditEvent.objects.filter(action=AuditAction.CUSTOMERS_LOADED).order_by("pk")
    assert [(e.actor, e.data["created"], e.data["updated"]) for e in loads] == [
        (lead, 2, 0),
        (lead, 0, 2),
    ]


def test_a_bad_file_names_each_wrong_line_and_writes_nothing(lead: User) -> None:
    bad = (
        "reference,name,account_tier,email_domains\n"
        f"{HOUSEHOLD},Amira Haddad,household,\n"
        "CUST-10001,Wrong Kind,household,\n"
        "POL-2026-000777,Tier Unknown,gold,\n"
        "POL-2026-000778,,landlord,not a domain!\n"
        f"{HOUSEHOLD},Twice,household,\n"
    )
    with pytest.raises(CustomerFileInvalid) as refused:
        upload(lead, bad)

    lines = refused.value.problems
    assert [line.split(":")[0] for line in lines] == ["line 3", "line 4", "line 5", "line 6"]
    assert "CUST-10001" in lines[0] and POLICY_PATTERN in lines[0]
    assert "gold" in lines[1] and "household, landlord" in lines[1]
    assert "name" in lines[2] and "not a domain" in lines[2]
    assert "listed twice" in lines[3]
    assert not Customer.objects.exists()
    assert not AuditEvent.objects.filter(action=AuditAction.CUSTOMERS_LOADED).exists()


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b"reference,name\nPOL-2026-004211,A\n", "missing columns account_tier, email_domains"),
        (b"\xff\xfe not text", "not UTF-8"),
        (b"x" * (MAX_FILE_BYTES + 1), "larger than"),
    ],
)
def test_a_file_that_is_no_customer_list_is_refused(lead: User, content: bytes, said: str) -> None:
    with pytest.raises(CustomerFileInvalid, match=said):
        customers_upload(user=lead, content=content, source="upload:x.csv")
    assert not Customer.objects.exists()


def test_a_control_character_in_a_file_is_named_not_stored(lead: User) -> None:
    bad = CUSTOMERS_CSV.replace("Amira Haddad", "Amira\x00Haddad")
    with pytest.raises(CustomerFileInvalid, match="line 2: holds a control character"):
        upload(lead, bad)
    assert not Customer.objects.exists()


def test_the_command_loads_through_the_same_checks(insurer: None, tmp_path: Path) -> None:
    good, bad = tmp_path / "good.csv", tmp_path / "bad.csv"
    good.write_text(CUSTOMERS_CSV, encoding="utf-8")
    bad.write_text(CUSTOMERS_CSV + "CUST-10001,X,household,\n", encoding="utf-8")

    with pytest.raises(CommandError, match="line 4"):
        call_command("load_customers", str(bad), stdout=io.StringIO())
    assert not Customer.objects.exists()
    out = io.StringIO()
    call_command("load_customers", str(good), stdout=out)
    assert out.getvalue().strip() == "customers: 2 created, 0 updated"


def test_a_customer_is_added_and_changed_at_its_fields(lead: User) -> None:
    customer = customer_add(
        user=lead,
        reference="pol-2026-000900",
        name="  Jonas Berg ",
        account_tier="household",
        email_domains=["Berg.Example"],
    )
    assert (customer.reference, customer.name) == ("POL-2026-000900", "Jonas Berg")
    assert customer.email_domains == ["berg.example"]

    with pytest.raises(CustomerInvalid) as taken:
        customer_add(
            user=lead,
            reference="POL-2026-000900",
            name="X",
            account_tier="household",
            email_domains=[],
        )
    assert set(taken.value.problems) == {"reference"}
    with pytest.raises(CustomerInvalid) as wrong:
        customer_change(
            user=lead, customer_id=customer.pk, name="", account_tier="gold", email_domains=[]
        )
    assert set(wrong.value.problems) == {"name", "account_tier"}

    customer_change(
        user=lead,
        customer_id=customer.pk,
        name="Jonas Berg",
        account_tier="landlord",
        email_domains=[],
    )
    customer.refresh_from_db()
    assert (customer.account_tier, customer.email_domains) == ("landlord", [])
    event = AuditEvent.objects.get(action=AuditAction.CUSTOMER_CHANGED)
    assert event.actor == lead and event.data["changed"] == ["account_tier", "email_domains"]


def test_only_who_may_change_customers_writes_them(auditor: User) -> None:
    roles_ensure()
    with pytest.raises(PermissionDenied):
        upload(auditor, CUSTOMERS_CSV)
    with pytest.raises(PermissionDenied):
        customer_add(
            user=auditor,
            reference=HOUSEHOLD,
            name="A",
            account_tier="household",
            email_domains=[],
        )
    assert not Customer.objects.exists()
