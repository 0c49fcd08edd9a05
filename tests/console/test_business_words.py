"""The console says a business's request types, routes, effects and tiers in the words of
its catalogue: another business needs no change of code, and the reference business's words
are nowhere on its pages."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from django.urls import reverse

from accounts.roles import roles_ensure
from automation.models import IntakeChannel, Run, State
from console import vocabulary
from console.vocabulary import Kind
from policy import selectors
from policy.catalogue import reference_catalogue
from policy.services import parse_policy_text, policy_version_activate, policy_version_create
from tests.conftest import Pipeline, make_event

SHOP = """
version: shop-1
note: A web shop's returns and orders.
routes: {return_request: returns_desk, order_status: order_desk}
allowed_effects: [open_return, answer_order]
approvals: {open_return: {group: ops-leads}}
confidence: {default: 0.8, per_category: {}}
queue_owners: {needs_review: ops-leads, approval_required: ops-leads}
catalogue:
  request_types:
    return_request: {label: Return of goods, description: Goods the customer sends back.}
    order_status: {label: Where is my order, description: A question about an order.}
  routes:
    returns_desk: {label: Returns desk, description: The returns team., group: ops-leads}
    order_desk: {label: Order desk, description: The order team., group: ops-leads}
  effects:
    open_return: {label: Open a return, description: A return for the warehouse., adapter: record}
    answer_order: {label: Answer the customer, description: Where the order is., adapter: record}
  customer_attributes:
    tier: {label: Plan, description: What the customer pays for., values: [basic, plus]}
"""

# Every word the reference business's catalogue has for its codes.
REFERENCE_WORDS = [
    spec.label
    for section in (
        reference_catalogue().request_types,
        reference_catalogue().routes,
        reference_catalogue().effects,
    )
    for spec in section.values()
]


@pytest.fixture
def shop(db: None) -> Pipeline:
    """A test channel on an installation whose only version is the shop's, active."""
    roles_ensure()
    policy_version_create(document=parse_policy_text(SHOP))
    policy_version_activate(name="shop-1")
    channel = IntakeChannel.objects.create(
        name="shop",
        classifier="recorded",
        classifier_version="recorded-classifier-1",
        workflow_version="workflow-1",
        prompt_version="prompt-1",
        max_classifier_attempts=2,
    )
    return Pipeline(channel)


@pytest.fixture
def lead(db: None) -> Client:
    user = User.objects.create_superuser("lee", "lee@example.com", None)
    user.groups.add(Group.objects.get(name="ops-leads"))
    client = Client()
    client.force_login(user)
    return client


def request(event_id: str, kind: str, effect: str, tier: str = "plus") -> dict[str, Any]:
    return make_event(
        event_id=event_id,
        request_type=kind,
        requested_action=effect,
        account_tier=tier,
        subject="About my order 5512",
        body="Please look into my order 5512.",
    )


def reading(kind: str, route: str, effect: str, confidence: float) -> dict[str, Any]:
    value = {
        "category": kind,
        "recommended_route": route,
        "requested_effect": effect,
        "reason_code": "customer_asked",
        "confidence": confidence,
    }
    return {"type": "decision", "value": value}


def waiting(shop: Pipeline) -> Run:
    event = request("evt-return", "return_request", "open_return")
    run = shop.run(
        shop.submit(event, [reading("return_request", "returns_desk", "open_return", 0.95)])
    )
    assert run.state == State.APPROVAL_REQUIRED, run.outcome
    return run


def unsure(shop: Pipeline) -> Run:
    event = request("evt-order", "order_status", "answer_order", tier="basic")
    run = shop.run(shop.submit(event, [reading("order_status", "order_desk", "answer_order", 0.5)]))
    assert run.state == State.NEEDS_REVIEW, run.outcome
    return run


def page(client: Client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200, url
    return response.content.decode()


def assert_no_reference_words(text: str) -> None:
    shown = [word for word in REFERENCE_WORDS if re.search(rf"\b{re.escape(word)}\b", text)]
    assert not shown, f"the reference business's words on the page: {shown}"


def test_the_words_are_the_active_catalogues(shop: Pipeline) -> None:
    assert vocabulary.label(Kind.CATEGORY, "return_request") == "Return of goods"
    assert vocabulary.explain(Kind.ROUTE, "order_desk") == "The order team."
    assert vocabulary.label(Kind.EFFECT, "open_return") == "Open a return"
    assert vocabulary.label(Kind.TIER, "plus") == "Plus plan"
    assert vocabulary.effect_progress("open_return") == (
        "“Open a return” is being done",
        "“Open a return” was done",
    )


def test_a_code_an_older_version_named_keeps_its_words(shop: Pipeline) -> None:
    later = SHOP.replace("shop-1", "shop-2").replace("Return of goods", "Send it back")
    later = later.replace(
        "    order_status: {label: Where is my order, description: A question about an order.}\n",
        "",
    )
    later = later.replace(", order_status: order_desk", "")
    policy_version_create(document=parse_policy_text(later))
    policy_version_activate(name="shop-2")

    assert vocabulary.label(Kind.CATEGORY, "return_request") == "Send it back"
    assert vocabulary.label(Kind.CATEGORY, "order_status") == "Where is my order"
    assert vocabulary.label(Kind.CATEGORY, "support") == "Support"  # the reference, last
    assert vocabulary.label(Kind.CATEGORY, "never_named") == "Never named"


def test_the_run_queue_and_approval_pages_say_the_shops_words(shop: Pipeline, lead: Client) -> None:
    run, held = waiting(shop), unsure(shop)

    run_page = page(lead, reverse("runs:run", args=[run.pk]))
    queue_page = page(lead, reverse("queues:queue", args=[held.outcome]))

    evidence = page(lead, reverse("approvals:evidence", args=[run.approvals.get().pk]))

    for word in ("Return of goods", "Returns desk", "Open a return"):
        assert word in run_page, word
        assert word in evidence, word
    assert "Plus plan" in evidence
    assert "Order desk" in queue_page
    for text in (run_page, queue_page, evidence):
        assert_no_reference_words(text)


def test_the_correction_form_offers_the_shops_choices(shop: Pipeline, lead: Client) -> None:
    held = unsure(shop)

    form = page(lead, reverse("runs:correct", args=[held.pk]))

    options = dict(re.findall(r'<option value="([a-z_]+)"[^>]*>([^<]+)</option>', form))
    assert options == {
        "return_request": "Return of goods",
        "order_status": "Where is my order",
        "returns_desk": "Returns desk",
        "order_desk": "Order desk",
        "open_return": "Open a return",
        "answer_order": "Answer the customer",
    }
    assert_no_reference_words(form)


def test_the_admin_filters_offer_the_stored_versions_routes_and_effects(
    shop: Pipeline, lead: Client
) -> None:
    waiting(shop)

    runs = page(lead, reverse("admin:automation_run_changelist"))
    effects = page(lead, reverse("admin:automation_effect_changelist"))

    for word in ("Returns desk", "Order desk", "Open a return", "Answer the customer"):
        assert word in runs, word
    assert "Open a return" in effects
    assert_no_reference_words(runs)
    assert_no_reference_words(effects)


def test_a_page_checks_the_stored_versions_once_and_reads_them_only_when_they_change(
    shop: Pipeline, lead: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The words cost a page one small query, not one a code: each version's document is read
    once in the process, again only when a version is stored or activated."""
    run = waiting(shop)
    url = reverse("runs:run", args=[run.pk])
    page(lead, url)
    checks, reads = counting(monkeypatch, "_identities"), counting(monkeypatch, "_read_all")

    page(lead, url)
    page(lead, url)
    assert (len(checks), len(reads)) == (2, 0)

    # Stored here: read again, documents and all, in the one query of the next check.
    policy_version_create(document=parse_policy_text(SHOP.replace("shop-1", "shop-2")))
    page(lead, url)
    assert (len(checks), len(reads)) == (2, 1)
    assert "shop-2" in selectors.stored_businesses().by_version


def counting(monkeypatch: pytest.MonkeyPatch, name: str) -> list[None]:
    """Each call of one of policy.selectors' functions, noted."""
    calls: list[None] = []
    original = getattr(selectors, name)

    def counted(*args: Any) -> Any:
        calls.append(None)
        return original(*args)

    monkeypatch.setattr(selectors, name, counted)
    return calls


def test_the_policy_editor_offers_the_edited_versions_types_and_tiers(
    shop: Pipeline, lead: Client
) -> None:
    editor = page(lead, reverse("policy:new") + "?from=shop-1")
    fieldset = editor[editor.index('data-testid="amount-limits"') :]

    for word in ("Return of goods", "Where is my order", "Basic plan", "Plus plan"):
        assert word in editor, word
    assert "<h3>Basic plan</h3>" in fieldset
    assert "Standard account" not in editor
