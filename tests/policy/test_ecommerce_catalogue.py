"""The online shop's example policy (policy/examples/shop-1.yaml): a whole document with a
business of its own, which an ops lead loads with `load_policy`, and its labelled mail."""

from __future__ import annotations

import csv
import re
from decimal import Decimal
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command

from accounts.roles import SAMPLE_TEAMS, roles_ensure
from policy.catalogue import CREDENTIAL_HEADER, FieldType, Secret
from policy.evaluation import EventFacts, Interpretation, Verdict, evaluate
from policy.models import PolicyVersion
from policy.risk_signals import match_signals
from policy.schemas import PolicyDocument
from policy.services import parse_policy_text, shipped

ROOT = Path(__file__).resolve().parents[2]
SHOP = ROOT / "policy" / "examples" / "shop-1.yaml"
MAIL = ROOT / "tests" / "data" / "ecommerce"
LANGUAGES = {"en", "de", "fr", "es"}


@pytest.fixture(scope="module")
def shop() -> PolicyDocument:
    return parse_policy_text(SHOP.read_text(encoding="utf-8"))


def refund(shop: PolicyDocument, amount: str, tier: str = "standard") -> Verdict:
    """The verdict on a mail read as a confident refund of `amount` for a `tier` customer."""
    reading = Interpretation(
        category="refund",
        route="refunds",
        effect="issue_refund",
        confidence=0.95,
        amount=Decimal(amount),
    )
    return evaluate(shop, EventFacts(None, None, tier), reading).verdict


def test_the_example_is_a_whole_document_with_a_business_of_its_own(
    shop: PolicyDocument,
) -> None:
    assert shop.version == SHOP.stem == "shop-1"
    assert shop.catalogue is not None
    assert set(shop.business.request_types) == {
        "return_request",
        "refund",
        "address_change",
        "order_status",
        "complaint",
    }
    assert SHOP not in shipped(first="default-1")  # loaded on purpose, never by default


def test_every_request_type_is_routed_to_a_team_that_exists(shop: PolicyDocument) -> None:
    business = shop.business
    assert set(shop.routes) == set(business.request_types)
    assert set(shop.routes.values()) == set(business.routes)
    assert shop.routes["refund"] == "refunds"
    assert business.routes["refunds"].group == "finance-approvers"
    assert {route.group for route in business.routes.values()} <= set(SAMPLE_TEAMS)


def test_every_effect_of_the_catalogue_is_allowed(shop: PolicyDocument) -> None:
    assert sorted(shop.allowed_effects) == sorted(shop.business.effects)


def test_every_request_type_has_cues_in_each_language_and_an_order_number(
    shop: PolicyDocument,
) -> None:
    patterns = set()
    for spec in shop.business.request_types.values():
        assert set(spec.cues) == LANGUAGES
        assert all(len(cues) >= 8 for cues in spec.cues.values())
        order = spec.fields["order_number"]
        assert order.type == FieldType.REFERENCE
        patterns.add(order.pattern)
    assert patterns == {"[0-9]{3}-[0-9]{7}"}  # one shape of order number throughout


def test_a_refund_above_the_tiers_limit_needs_a_finance_approver(shop: PolicyDocument) -> None:
    assert refund(shop, "49.90") == Verdict.EXECUTE
    assert refund(shop, "75.00") == Verdict.EXECUTE
    assert refund(shop, "75.01") == Verdict.APPROVE
    assert refund(shop, "1600.00") == Verdict.BLOCK
    assert refund(shop, "180.00", tier="priority") == Verdict.EXECUTE
    assert refund(shop, "320.00", tier="priority") == Verdict.APPROVE
    assert shop.amount_approval is not None
    assert shop.amount_approval.group == "finance-approvers"


def test_every_tier_has_a_refund_limit(shop: PolicyDocument) -> None:
    """A tier without limits would have its refunds paid whatever their amount."""
    tiers = shop.business.tier_values()
    assert set(shop.amount_limits) == set(tiers)
    assert all(shop.amount_limits[tier].approval_above is not None for tier in tiers)


def test_a_refund_is_never_issued_without_its_amount_and_order_number(
    shop: PolicyDocument,
) -> None:
    """Required parameters: a reading without them waits for a person's correction."""
    parameters = shop.business.effects["issue_refund"].parameters
    assert parameters["amount"].type == FieldType.AMOUNT
    assert parameters["amount"].value == "{{ fields.amount }}"
    assert parameters["amount"].required
    assert parameters["order"].type == FieldType.REFERENCE
    assert parameters["order"].required
    assert shop.business.request_types["refund"].fields["amount"].required


def test_http_effects_name_their_secrets_and_never_hold_them(shop: PolicyDocument) -> None:
    http = [e.http for e in shop.business.effects.values() if e.http is not None]
    assert len(http) == 2
    for config in http:
        credentials = {n: v for n, v in config.headers.items() if CREDENTIAL_HEADER.search(n)}
        assert credentials and all(isinstance(v, Secret) for v in credentials.values())
        assert config.url.startswith("https://")
    assert "Bearer " not in SHOP.read_text(encoding="utf-8").replace('"Bearer …"', "")


def test_the_reply_to_the_customer_speaks_each_language(shop: PolicyDocument) -> None:
    reply = shop.business.effects["reply_to_customer"].email_reply
    assert reply is not None
    assert set(reply.templates) == LANGUAGES


@pytest.mark.parametrize(
    "text",
    [
        "If this is not sorted by Friday I will open a PayPal dispute.",
        "Sonst lasse ich die Lastschrift zurückgeben.",
        "Je vais contester le paiement auprès de ma banque.",
        "Si no me devuelven el dinero, iré a la oficina del consumidor.",
    ],
)
def test_a_customer_who_threatens_to_reverse_a_payment_or_go_to_law_is_held(
    shop: PolicyDocument, text: str
) -> None:
    assert [hit.action for hit in match_signals(shop, text)] == ["hold"]


@pytest.mark.django_db
def test_an_ops_lead_loads_the_example_with_load_policy() -> None:
    roles_ensure()
    out = StringIO()

    call_command("load_policy", str(SHOP), stdout=out)

    assert out.getvalue().startswith("shop-1: stored")
    assert PolicyVersion.objects.get(name="shop-1").parsed.business.routes["refunds"]


# --- the labelled mail of the shop ---------------------------------------------------------


def labels() -> list[dict[str, str]]:
    with (MAIL / "labels.csv").open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_the_shops_mail_is_labelled_in_the_sample_sets_columns() -> None:
    with (ROOT / "tests" / "data" / "mail" / "labels.csv").open(encoding="utf-8") as handle:
        columns = handle.readline().strip()
    assert (MAIL / "labels.csv").read_text(encoding="utf-8").splitlines()[0] == columns
    assert sorted(row["file"] for row in labels()) == sorted(p.name for p in MAIL.glob("*.eml"))


def test_the_shops_labels_name_only_what_its_catalogue_has(shop: PolicyDocument) -> None:
    rows = labels()
    for row in rows:
        assert row["category"] in shop.business.request_types, row["file"]
        assert row["effect"] in shop.allowed_effects, row["file"]
        parent = row["thread_parent"]
        assert not parent or (MAIL / parent).exists(), row["file"]
    per_type = {name: 0 for name in shop.business.request_types}
    for row in rows:
        per_type[row["category"]] += 1
    assert all(count >= 5 for count in per_type.values()), per_type


def test_each_mail_gives_an_order_number_of_the_catalogues_shape_unless_labelled_not_to(
    shop: PolicyDocument,
) -> None:
    """The order number is the one reference every request type reads: each mail gives one
    in the catalogue's shape, except complaints (which may name none) and the mails labelled
    with an `order_number` extraction problem (which give one of the wrong shape)."""
    pattern = shop.business.request_types["refund"].fields["order_number"].pattern
    well_formed = re.compile(rf"(?<![0-9-]){pattern}(?![0-9-])")
    for row in labels():
        text = (MAIL / row["file"]).read_text(encoding="utf-8")
        if row["extraction_problem"] == "order_number":
            assert not well_formed.search(text), row["file"]
        elif row["category"] != "complaint":
            assert well_formed.search(text), row["file"]
