"""A business started in the console: from nothing or from a shipped starter, saved as a draft
(never activated by itself), with as many request types, routes, effects, customer attributes
and risk signals in one save as the person adds, and every refusal of the new parts at its
field.

The business is the tests' own: a letting agency's tenant desk (repairs, rent questions and
notices to end a tenancy), neither the reference case set nor the online shop.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.conf import settings as django_settings
from django.contrib.auth.models import Group, User
from django.test import Client
from django.urls import reverse

from accounts.roles import roles_ensure
from console.forms.business import BusinessForm
from policy.models import PolicyVersion
from tests.automation.conftest import SettingsWrapper
from tests.console.test_business_form import RAW, error_next_to, problems_on, summary

BUSINESS = reverse("policy:business")
START = reverse("policy:business_start")
POLICY = Path(django_settings.BASE_DIR) / "policy"
# The agency's contractor system takes a bearer token, named here and kept in the environment.
CONTRACTOR_TOKEN = "LETTINGS_CONTRACTOR_TOKEN"

BOOKING_SETTINGS = f"""method: POST
url: https://contractors.example.com/api/jobs
headers:
  Authorization: {{secret: {CONTRACTOR_TOKEN}}}
body:
  job:
    flat: "{{{{ params.flat }}}}"
    what: "{{{{ run.subject }}}}"
"""
BOOKING_PARAMETERS = """flat: {value: "{{ fields.flat_reference }}", type: reference}
"""
REPLY_SETTINGS = """default_language: en
templates:
  en:
    subject: "Re: {{ run.subject }}"
    body: "Dear tenant, we have your message about flat {{ params.flat }} and will answer soon."
  de:
    subject: "AW: {{ run.subject }}"
    body: "Wir haben Ihre Nachricht zur Wohnung {{ params.flat }} erhalten."
"""
REPLY_PARAMETERS = """flat: {value: "{{ fields.flat_reference }}", type: reference, required: false}
"""
FLAT = "flat_reference: reference, required, label Flat, pattern FL-[0-9]{4}"


@pytest.fixture
def lead(db: None, settings: SettingsWrapper) -> Client:
    """An ops lead on an install with no policy version, whose operator declared the
    contractor token for effects; the agency's two teams exist."""
    settings.GATEHOUSE_EFFECT_SECRETS = settings.GATEHOUSE_EFFECT_SECRETS | {CONTRACTOR_TOKEN}
    roles_ensure()
    for team in ("maintenance-team", "lettings-team"):
        Group.objects.get_or_create(name=team)
    user = User.objects.create_user("lena")
    user.groups.add(Group.objects.get(name="ops-leads"))
    client = Client()
    client.force_login(user)
    return client


def shown_values(response: Any) -> dict[str, Any]:
    """The values a page shows, as a browser would send them back (its hidden counts too)."""
    form: BusinessForm = response.context["form"]
    data: dict[str, Any] = {f"shown-{kind}": str(n) for kind, n in form.shown.items()}
    for bound in form:
        value = bound.value()
        if bound.widget_type == "checkbox":
            if value:
                data[bound.name] = "on"
        else:
            data[bound.name] = "" if value is None else str(value)
    return data


def the_agency(data: dict[str, Any]) -> dict[str, Any]:
    """Three request types, two routes and two effects (an http one with a secret by name,
    an e-mail reply), typed into the add blocks of one page."""
    return data | {
        "version": "lettings-1",
        "note": "The tenant desk of a letting agency.",
        "shown-type": "3",
        "shown-route": "2",
        "shown-effect": "2",
        "new_route-name": "maintenance",
        "new_route-label": "Maintenance",
        "new_route-group": "maintenance-team",
        "new_route2-name": "lettings",
        "new_route2-label": "Lettings",
        "new_route2-group": "lettings-team",
        "new_type-name": "repair_request",
        "new_type-label": "Repair request",
        "new_type-description": "Something in the flat is broken.",
        "new_type-fields": f"{FLAT}\nproblem: text, required, label What is broken",
        "new_type-cues": "en: broken, leak, repair\nde: kaputt, undicht",
        "new_type-scene_cues": "en: boiler, kitchen",
        "new_type-weight": "2",
        "new_type-route": "+new",
        "new_type-effect": "+new",
        "new_type-always": "on",
        "new_type2-name": "rent_question",
        "new_type2-label": "Rent question",
        "new_type2-description": "A question about rent or a deposit.",
        "new_type2-fields": f"{FLAT}\ndue: date, label Due date",
        "new_type2-cues": "en: rent, deposit",
        "new_type2-route": "+new2",
        "new_type2-effect": "+new2",
        "new_type3-name": "tenancy_end",
        "new_type3-label": "Notice to end a tenancy",
        "new_type3-description": "A tenant gives notice.",
        "new_type3-fields": f"{FLAT}\nmoving_out: date, required, label Moving out",
        "new_type3-cues": "en: notice, moving out\nfr: préavis",
        "new_type3-route": "+new2",
        "new_type3-effect": "+new2",
        "new_effect-name": "book_contractor",
        "new_effect-label": "Book a contractor",
        "new_effect-description": "A job in the contractors' system.",
        "new_effect-adapter": "http",
        "new_effect-settings": BOOKING_SETTINGS,
        "new_effect-parameters": BOOKING_PARAMETERS,
        "new_effect-allowed": "on",
        "new_effect-cues": "en: send someone, fix it",
        "new_effect-priority": "5",
        "new_effect2-name": "acknowledge",
        "new_effect2-label": "Acknowledge the tenant",
        "new_effect2-description": "A reply in the tenant's thread.",
        "new_effect2-adapter": "email_reply",
        "new_effect2-settings": REPLY_SETTINGS,
        "new_effect2-parameters": REPLY_PARAMETERS,
        "new_effect2-allowed": "on",
        "new_attribute-name": "tier",
        "new_attribute-label": "Tenancy",
        "new_attribute-values": "standard, managed",
        "new_signal-name": "legal_threat",
        "new_signal-description": "The tenant mentions a lawyer or a tribunal.",
        "new_signal-action": "hold",
        "new_signal-phrases": "en: my lawyer, tribunal\nde: mein anwalt",
        "new_signal-patterns": "section\\s+21",
    }


def from_nothing(client: Client) -> dict[str, Any]:
    return shown_values(client.get(BUSINESS, {"start": "nothing"}))


def saved(client: Client, data: dict[str, Any]) -> PolicyVersion:
    response = client.post(BUSINESS, data)
    assert response.status_code == 302, problems_on(response.content.decode())
    assert response["Location"] == reverse("policy:detail", kwargs={"name": data["version"]})
    return PolicyVersion.objects.get(name=data["version"])


def refused(client: Client, data: dict[str, Any]) -> str:
    versions = PolicyVersion.objects.count()
    response = client.post(BUSINESS, data)
    assert response.status_code == 400
    page = response.content.decode()
    for raw in RAW:
        assert raw not in page, raw
    assert PolicyVersion.objects.count() == versions
    return page


# --- starting ---------------------------------------------------------------------------------


def test_with_no_version_the_page_offers_nothing_and_each_shipped_starter(lead: Client) -> None:
    response = lead.get(BUSINESS)

    page = html.unescape(response.content.decode())
    assert response.status_code == 200
    assert "There is no policy version yet" in page
    assert f"{BUSINESS}?start=nothing" in page
    for key, path in (("reference", "defaults/default-1.yaml"), ("shop", "examples/shop-1.yaml")):
        assert f"{BUSINESS}?start={key}" in page
        note = yaml.safe_load((POLICY / path).read_text(encoding="utf-8"))["note"]
        assert note in page  # the sentence is the file's own


def test_the_start_page_is_linked_from_the_policy_list_once_versions_exist(
    lead: Client, policy: None
) -> None:
    listing = lead.get(reverse("policy:list")).content.decode()

    assert f'href="{START}" data-testid="start-business"' in listing
    page = lead.get(START).content.decode()
    assert "the active version" in page
    assert f"{BUSINESS}?start=shop" in page


def test_an_unknown_starter_is_not_found(lead: Client) -> None:
    assert lead.get(BUSINESS, {"start": "bakery"}).status_code == 404


def test_from_nothing_the_form_has_one_empty_block_of_each_and_a_name(lead: Client) -> None:
    response = lead.get(BUSINESS, {"start": "nothing"})

    page = response.content.decode()
    form = response.context["form"]
    assert form["version"].value() == "business-1"
    assert (form.type_blocks, form.route_blocks, form.effect_blocks) == ([], [], [])
    for testid in ("add-type", "add-route", "add-effect", "add-attribute", "add-signal"):
        assert f'data-testid="{testid}"' in page
    assert "Starts from nothing" in page


def test_add_another_shows_one_more_block_and_keeps_what_was_typed(lead: Client) -> None:
    data = from_nothing(lead) | {
        "new_route-name": "maintenance",
        "new_route-label": "Maintenance",
        "new_type-name": "repair_request",
        "new_type-always": "on",
        "add": "route",
    }

    response = lead.post(BUSINESS, data)

    page = response.content.decode()
    assert response.status_code == 200
    assert not PolicyVersion.objects.exists()
    assert 'data-testid="add-route-2"' in page and 'name="new_route2-name"' in page
    assert 'name="shown-route" value="2"' in page
    assert 'name="shown-type" value="1"' in page
    form = response.context["form"]
    assert form["new_route-name"].value() == "maintenance"
    assert form["new_type-name"].value() == "repair_request"
    assert form["new_type-always"].value() is True
    assert form["new_effect-allowed"].value() is False
    # A type may be sent to either new route, the first by the name typed into it.
    assert ("+new", "Maintenance (the new route, added below)") in form.fields[
        "new_type-route"
    ].choices
    assert ("+new2", "New route 2, added below") in form.fields["new_type-route"].choices
    assert 'data-testid="form-problems"' not in page  # nothing was checked


def test_from_nothing_one_save_makes_the_whole_business_as_a_draft(lead: Client) -> None:
    version = saved(lead, the_agency(from_nothing(lead)))

    document = version.document
    catalogue = document["catalogue"]
    assert set(catalogue["request_types"]) == {"repair_request", "rent_question", "tenancy_end"}
    assert set(catalogue["routes"]) == {"maintenance", "lettings"}
    assert catalogue["routes"]["lettings"]["group"] == "lettings-team"
    assert document["routes"] == {
        "repair_request": "maintenance",
        "rent_question": "lettings",
        "tenancy_end": "lettings",
    }
    repair = catalogue["request_types"]["repair_request"]
    assert repair["fields"]["flat_reference"]["pattern"] == "FL-[0-9]{4}"
    assert repair["cues"] == {"en": ["broken", "leak", "repair"], "de": ["kaputt", "undicht"]}
    assert repair["scene_cues"] == {"en": ["boiler", "kitchen"]}
    assert (repair["cue_weight"], repair["default_effect"]) == (2, "book_contractor")
    assert repair["default_effect_always"] is True
    assert catalogue["request_types"]["tenancy_end"]["default_effect"] == "acknowledge"
    booking = catalogue["effects"]["book_contractor"]
    assert booking["http"]["headers"] == {"Authorization": {"secret": CONTRACTOR_TOKEN}}
    assert (booking["cues"], booking["cue_priority"]) == ({"en": ["send someone", "fix it"]}, 5)
    reply = catalogue["effects"]["acknowledge"]
    assert reply["adapter"] == "email_reply"
    assert set(reply["email_reply"]["templates"]) == {"en", "de"}
    assert sorted(document["allowed_effects"]) == ["acknowledge", "book_contractor"]
    assert catalogue["customer_attributes"]["tier"]["values"] == ["standard", "managed"]
    signal = document["signals"]["legal_threat"]
    assert (signal["action"], signal["version"]) == ("hold", 1)
    assert signal["phrases"] == {"en": ["my lawyer", "tribunal"], "de": ["mein anwalt"]}
    assert signal["patterns"] == ["section\\s+21"]
    assert version.is_active is False
    assert not PolicyVersion.objects.filter(is_active=True).exists()


def test_a_starter_saved_as_it_is_is_a_draft_and_nothing_is_activated(lead: Client) -> None:
    response = lead.get(BUSINESS, {"start": "shop"})
    assert "Starts from the example" in response.content.decode()
    data = shown_values(response)
    assert data["version"] == "shop-1"  # the starter's own name, free on this install

    version = saved(lead, data)

    shipped = yaml.safe_load((POLICY / "examples/shop-1.yaml").read_text(encoding="utf-8"))
    assert version.document["catalogue"] == version.parsed.business.model_dump(mode="json")
    assert set(version.document["catalogue"]["request_types"]) == set(
        shipped["catalogue"]["request_types"]
    )
    assert version.document["routes"] == shipped["routes"]
    assert version.is_active is False
    assert not PolicyVersion.objects.filter(is_active=True).exists()


def test_a_starters_name_taken_proposes_the_next_and_a_taken_name_is_refused(
    lead: Client, policy: None
) -> None:
    data = shown_values(lead.get(BUSINESS, {"start": "reference"}))
    assert data["version"] == "default-2"  # default-1 is stored: the next one is proposed

    page = refused(lead, data | {"version": "default-1"})

    assert error_next_to(page, "version").startswith("Another version already has this name")


def test_the_reference_starter_saved_carries_the_reference_catalogue(
    lead: Client, policy: None
) -> None:
    version = saved(lead, shown_values(lead.get(BUSINESS, {"start": "reference"})))

    assert set(version.document["catalogue"]["request_types"]) == {
        "support",
        "billing",
        "sales",
        "security",
    }
    # Untouched, every rule is the file's own: its signals keep their versions and phrases.
    shipped = PolicyVersion.objects.get(name="default-1").document
    kept = ("version", "note", "catalogue")
    assert {k: v for k, v in version.document.items() if k not in kept} == {
        k: v for k, v in shipped.items() if k not in kept
    }
    assert PolicyVersion.objects.get(is_active=True).name == "policy-1"


# --- removing ---------------------------------------------------------------------------------


@pytest.fixture
def agency(lead: Client) -> PolicyVersion:
    return saved(lead, the_agency(from_nothing(lead)))


def from_version(client: Client, version: PolicyVersion, name: str) -> dict[str, Any]:
    return shown_values(client.get(BUSINESS, {"from": version.name})) | {"version": name}


def test_a_route_a_type_is_sent_to_cannot_be_removed(lead: Client, agency: PolicyVersion) -> None:
    data = from_version(lead, agency, "lettings-2") | {"route-lettings-remove": "on"}

    page = refused(lead, data)

    assert error_next_to(page, "route-lettings-remove") == (
        "Notice to end a tenancy and Rent question are sent here: send them to another route "
        "first, or keep this one."
    )
    assert "Lettings > Remove this route" in summary(page)


def test_a_route_and_an_effect_nothing_uses_any_more_are_removed(
    lead: Client, agency: PolicyVersion
) -> None:
    data = from_version(lead, agency, "lettings-2") | {
        "type-rent_question-route": "maintenance",
        "type-tenancy_end-route": "maintenance",
        "type-rent_question-effect": "book_contractor",
        "type-tenancy_end-effect": "book_contractor",
        "route-lettings-remove": "on",
        "effect-acknowledge-remove": "on",
    }

    document = saved(lead, data).document

    assert set(document["catalogue"]["routes"]) == {"maintenance"}
    assert set(document["catalogue"]["effects"]) == {"book_contractor"}
    assert document["allowed_effects"] == ["book_contractor"]


def test_an_effect_that_is_a_usual_effect_cannot_be_removed(
    lead: Client, agency: PolicyVersion
) -> None:
    data = from_version(lead, agency, "lettings-2") | {"effect-acknowledge-remove": "on"}

    page = refused(lead, data)

    assert error_next_to(page, "effect-acknowledge-remove") == (
        "It is the usual effect of Notice to end a tenancy and Rent question: choose another "
        "there first, or keep this one."
    )


def test_the_tier_cannot_be_removed_while_amount_limits_are_written_per_tier(
    lead: Client,
) -> None:
    data = shown_values(lead.get(BUSINESS, {"start": "shop"})) | {"attribute-tier-remove": "on"}

    page = refused(lead, data)

    assert error_next_to(page, "attribute-tier-remove").startswith(
        "The amount limits are written per tier"
    )


def test_a_tier_value_amount_limits_name_cannot_be_dropped(lead: Client) -> None:
    data = shown_values(lead.get(BUSINESS, {"start": "shop"})) | {
        "attribute-tier-values": "standard"
    }

    page = refused(lead, data)

    assert error_next_to(page, "attribute-tier-values").startswith(
        "Amount limits are written for priority"
    )


def test_a_changed_signal_is_a_new_version_of_it_and_a_removed_one_is_gone(
    lead: Client, agency: PolicyVersion
) -> None:
    data = from_version(lead, agency, "lettings-2") | {
        "signal-legal_threat-phrases": "en: my lawyer, tribunal, solicitor",
    }
    changed = saved(lead, data).document["signals"]["legal_threat"]
    assert (changed["version"], changed["phrases"]["en"][-1]) == (2, "solicitor")

    again = from_version(lead, agency, "lettings-3") | {"signal-legal_threat-remove": "on"}
    assert saved(lead, again).document["signals"] == {}


# --- refusals of the new parts, at their fields ----------------------------------------------


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        (
            {"new_type-scene_cues": "en: boiler, leak"},
            "new_type-scene_cues",
            "Leak: listed as a cue word and as a scene cue; keep each word in one.",
        ),
        (
            {"new_type-effect": ""},
            "new_type-always",
            "Choose the usual effect it always gets, or leave this off.",
        ),
        (
            {"new_type-weight": "11"},
            "new_type-weight",
            "Ensure this value is less than or equal to 10.",
        ),
        (
            {"new_type-scene_cues": "english: boiler"},
            "new_type-scene_cues",
            "'english' is not a two-letter language code (en, de, ...).",
        ),
        (
            {"new_effect-priority": "101"},
            "new_effect-priority",
            "Ensure this value is less than or equal to 100.",
        ),
        (
            {"new_effect-cues": "en fix it"},
            "new_effect-cues",
            "Line 1: write each language as its code, a colon and the words.",
        ),
        (
            {"new_attribute-values": "standard, Managed Flats"},
            "new_attribute-values",
            "Entry 2: “Managed Flats” use lower-case letters, digits and underscores, "
            "starting with a letter.",
        ),
        (
            {"new_attribute-values": " , "},
            "new_attribute-values",
            "Give it its values, separated by commas.",
        ),
        (
            {"new_signal-action": "approval"},
            "new_signal-approver",
            "Choose who approves: the signal lets a run go ahead only after an approver agrees.",
        ),
        (
            {"new_signal-phrases": "", "new_signal-patterns": ""},
            "new_signal-phrases",
            "Give the signal at least one phrase, or switch it off.",
        ),
        (
            {"new_signal-patterns": "(a+)+"},
            "new_signal-patterns",
            None,
        ),
        (
            {"new_route2-name": "maintenance"},
            "new_route2-name",
            "There is already a route named maintenance: change that one, or choose another name.",
        ),
        (
            {"new_type2-route": "+new3"},
            "new_type2-route",
            None,
        ),
    ],
)
def test_each_new_part_is_refused_at_its_field(
    lead: Client, change: dict[str, str], field: str, message: str | None
) -> None:
    page = refused(lead, the_agency(from_nothing(lead)) | change)

    shown = error_next_to(page, field)
    if message is not None:
        assert shown == message


def test_a_secret_the_operator_did_not_declare_is_refused_at_the_settings(
    lead: Client, settings: SettingsWrapper
) -> None:
    settings.GATEHOUSE_EFFECT_SECRETS = settings.GATEHOUSE_EFFECT_SECRETS - {CONTRACTOR_TOKEN}

    page = refused(lead, the_agency(from_nothing(lead)))

    assert error_next_to(page, "new_effect-settings").startswith(
        f"Headers > Authorization: {CONTRACTOR_TOKEN} is not a secret declared for effects"
    )
    assert "New effect > Adapter settings" in summary(page)


def test_a_business_from_nothing_with_nothing_in_it_says_what_it_needs(lead: Client) -> None:
    page = refused(lead, from_nothing(lead) | {"version": "empty-1"})

    for kind, what in (("type", "request type"), ("route", "route"), ("effect", "effect")):
        assert error_next_to(page, f"new_{kind}-name") == (
            f"A business needs at least one {what}: give it a name and fill in this block."
        )
    assert "New request type > Name" in summary(page)
