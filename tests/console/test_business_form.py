"""The business form: request types, routes and effects edited in fields, saved as a draft,
and every refusal shown at its field with its place in words."""

from __future__ import annotations

import html
import re
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from django.urls import reverse

from accounts.roles import roles_ensure
from console.forms.business import NEW_ROUTE, BusinessForm
from policy.catalogue import reference_catalogue
from policy.models import PolicyVersion
from tests.console.test_policy_editor import claims_desk_version

BUSINESS = reverse("policy:business")
# What pydantic or Django say in their own words: never on the page.
RAW = ("Value error", "Input should", "String should", "validation error", "pydantic")

WARRANTY_FIELDS = """serial_number: reference, required, label Serial number, pattern SN-[0-9]{6}
purchase_date: date, label Purchase date
"""
WARRANTY_CUES = "en: warranty, broken, stopped working\nde: garantie, defekt\n"
TICKET_SETTINGS = """method: POST
url: https://helpdesk.example.com/api/tickets
headers:
  Authorization: {secret: HELPDESK_TOKEN}
body:
  ticket:
    subject: "Warranty claim {{ params.serial }}"
    serial: "{{ params.serial }}"
    bought: "{{ params.bought }}"
"""
TICKET_PARAMETERS = """serial:
  value: "{{ fields.serial_number }}"
  type: reference
  pattern: 'SN-[0-9]{6}'
bought: {value: "{{ fields.purchase_date }}", type: date}
"""


@pytest.fixture
def client(policy: None) -> Client:
    roles_ensure()
    user = User.objects.create_user("lee")
    user.groups.add(Group.objects.get(name="ops-leads"))
    client = Client()
    client.force_login(user)
    return client


def starting_values(client: Client, source: str = "") -> dict[str, Any]:
    """The values the page shows, as a browser would send them back."""
    form: BusinessForm = client.get(BUSINESS, {"from": source} if source else {}).context["form"]
    data: dict[str, Any] = {}
    for bound in form:
        value = bound.value()
        if bound.widget_type == "checkbox":
            if value:
                data[bound.name] = "on"
        else:
            data[bound.name] = "" if value is None else str(value)
    return data


def warranty(data: dict[str, Any]) -> dict[str, Any]:
    """The warranty desk's request type, route and ticket, typed into the add blocks."""
    return data | {
        "version": "warranty-1",
        "note": "Warranty claims go to the warranty desk, which opens a helpdesk ticket.",
        "new_type-name": "warranty_claim",
        "new_type-label": "Warranty claim",
        "new_type-description": "A product that broke within its warranty.",
        "new_type-fields": WARRANTY_FIELDS,
        "new_type-cues": WARRANTY_CUES,
        "new_type-route": NEW_ROUTE,
        "new_type-effect": NEW_ROUTE,  # the usual effect: the new one
        "new_route-name": "warranty_desk",
        "new_route-label": "Warranty desk",
        "new_route-description": "The people who handle warranty claims.",
        "new_route-group": "ops-leads",
        "new_effect-name": "open_warranty_ticket",
        "new_effect-label": "Open a warranty ticket",
        "new_effect-description": "A ticket in the helpdesk for the warranty desk.",
        "new_effect-adapter": "http",
        "new_effect-settings": TICKET_SETTINGS,
        "new_effect-parameters": TICKET_PARAMETERS,
        "new_effect-allowed": "on",
        "new_effect-approver": "finance-approvers",
    }


def save(client: Client, data: dict[str, Any]) -> PolicyVersion:
    response = client.post(BUSINESS, data)
    assert response.status_code == 302, problems_on(response.content.decode())
    assert response["Location"] == reverse("policy:detail", kwargs={"name": data["version"]})
    return PolicyVersion.objects.get(name=data["version"])


def problems_on(page: str) -> list[str]:
    return [html.unescape(p) for p in re.findall(r'data-testid="field-error">([^<]*)<', page)]


def error_next_to(page: str, name: str) -> str:
    """The error shown in the same field block as input `name`."""
    block = re.search(rf'id="id_{re.escape(name)}".*?</div>', page, re.DOTALL)
    assert block is not None, f"no field {name}"
    found = re.search(r'data-testid="field-error">([^<]*)<', block.group(0))
    assert found is not None, f"no error next to {name}: {problems_on(page)}"
    return html.unescape(found.group(1))


def summary(page: str) -> str:
    found = re.search(r'data-testid="form-problems">(.*?)</div>', page, re.DOTALL)
    assert found is not None
    return html.unescape(re.sub(r"<[^>]+>", "", found.group(1)))


def refused(client: Client, data: dict[str, Any]) -> str:
    versions = PolicyVersion.objects.count()
    response = client.post(BUSINESS, data)
    assert response.status_code == 400
    page = response.content.decode()
    for raw in RAW:
        assert raw not in page, raw
    assert PolicyVersion.objects.count() == versions
    return page


# --- the page ---------------------------------------------------------------------------------


def test_the_page_starts_from_the_active_version_with_a_new_name(client: Client) -> None:
    response = client.get(BUSINESS)

    page = response.content.decode()
    assert response.status_code == 200
    assert "Starts from policy-1, the active version, which uses the reference catalogue" in page
    assert response.context["form"]["version"].value() == "policy-2"
    for testid in ("type-support", "route-service_desk", "effect-create_follow_up"):
        assert f'data-testid="{testid}"' in page
    for testid in ("add-type", "add-route", "add-effect"):
        assert f'data-testid="{testid}"' in page
    assert 'name="new_type-name"' in page
    assert "serial_number: reference, required" in page  # the fields' format is explained


def test_the_policy_pages_link_to_it(client: Client) -> None:
    for page in (reverse("policy:list"), reverse("policy:new")):
        assert 'data-testid="edit-business"' in client.get(page).content.decode()


def test_an_unchanged_form_saves_the_reference_catalogue_as_the_versions_own(
    client: Client,
) -> None:
    data = starting_values(client, "default-1") | {"version": "default-2"}

    document = save(client, data).document

    base = PolicyVersion.objects.get(name="default-1").document
    assert document["catalogue"] == reference_catalogue().model_dump(mode="json")
    untouched = ("version", "note", "catalogue")
    assert {k: v for k, v in document.items() if k not in untouched} == {
        k: v for k, v in base.items() if k not in untouched
    }


def test_an_unchanged_form_keeps_a_catalogue_exactly(client: Client) -> None:
    first = save(client, warranty(starting_values(client)))

    again = save(client, starting_values(client, first.name) | {"version": "warranty-2"})

    assert again.document["catalogue"] == first.document["catalogue"]
    assert {k: v for k, v in again.document.items() if k not in ("version", "note")} == {
        k: v for k, v in first.document.items() if k not in ("version", "note")
    }


# --- what it saves ------------------------------------------------------------------------------


def test_adds_a_request_type_its_route_and_an_http_effect_that_is_approved(
    client: Client,
) -> None:
    version = save(client, warranty(starting_values(client)))

    document = version.document
    catalogue = document["catalogue"]
    claim = catalogue["request_types"]["warranty_claim"]
    assert claim["default_effect"] == "open_warranty_ticket"
    assert catalogue["request_types"]["security"]["default_effect"] == "queue_account_review"
    assert (claim["label"], claim["description"]) == (
        "Warranty claim",
        "A product that broke within its warranty.",
    )
    assert claim["fields"]["serial_number"] | {"description": ""} == {
        "type": "reference",
        "required": True,
        "label": "Serial number",
        "description": "",
        "pattern": "SN-[0-9]{6}",
    }
    assert claim["fields"]["purchase_date"] == {
        "type": "date",
        "required": False,
        "label": "Purchase date",
        "description": "",
        "pattern": None,
    }
    assert claim["cues"] == {
        "en": ["warranty", "broken", "stopped working"],
        "de": ["garantie", "defekt"],
    }
    assert catalogue["routes"]["warranty_desk"] == {
        "label": "Warranty desk",
        "description": "The people who handle warranty claims.",
        "group": "ops-leads",
    }
    assert document["routes"]["warranty_claim"] == "warranty_desk"
    ticket = catalogue["effects"]["open_warranty_ticket"]
    assert ticket["adapter"] == "http"
    assert ticket["http"]["headers"] == {"Authorization": {"secret": "HELPDESK_TOKEN"}}
    assert ticket["http"]["body"]["ticket"]["serial"] == "{{ params.serial }}"
    assert ticket["parameters"]["serial"]["value"] == "{{ fields.serial_number }}"
    assert ticket["parameters"]["bought"]["type"] == "date"
    assert document["allowed_effects"][-1] == "open_warranty_ticket"
    assert document["approvals"]["open_warranty_ticket"]["group"] == "finance-approvers"
    assert version.note.startswith("Warranty claims go to the warranty desk")
    assert version.is_active is False


def test_the_drafts_page_shows_what_was_added_in_its_difference(client: Client) -> None:
    version = save(client, warranty(starting_values(client)))

    page = client.get(reverse("policy:detail", kwargs={"name": version.name})).content.decode()

    diff = html.unescape(re.search(r'<pre class="diff"[^>]*>(.*?)</pre>', page, re.DOTALL)[1])
    added = [
        re.sub(r"<[^>]+>", "", line) for line in re.findall(r'<span class="add">(.*?)</span>', diff)
    ]
    assert "+  warranty_claim: warranty_desk" in added
    assert "+- open_warranty_ticket" in added
    assert "+    warranty_claim:" in added
    assert "+    warranty_desk:" in added
    assert "+    open_warranty_ticket:" in added
    assert any("{{ fields.serial_number }}" in line for line in added)


def test_edits_a_request_type_its_cues_and_where_it_goes(client: Client) -> None:
    data = starting_values(client) | {
        "version": "sales-2",
        "type-sales-label": "Sales and renewals",
        "type-sales-cues": "en: quote, renewal\nfr: devis",
        "type-sales-route": "service_desk",
        "type-sales-fields": "customer_reference: reference, label Customer, pattern CUST-\\d{5}\n"
        "seats: text",
        "route-commercial-description": "The sales team, and renewals.",
    }

    document = save(client, data).document

    sales = document["catalogue"]["request_types"]["sales"]
    assert sales["label"] == "Sales and renewals"
    assert sales["cues"] == {"en": ["quote", "renewal"], "fr": ["devis"]}
    assert sales["fields"]["customer_reference"]["pattern"] == "CUST-\\d{5}"
    assert sales["fields"]["seats"]["type"] == "text"
    assert document["routes"]["sales"] == "service_desk"
    assert document["catalogue"]["routes"]["commercial"]["description"] == (
        "The sales team, and renewals."
    )


def test_removing_a_request_type_takes_it_out_of_the_rules_that_name_it(client: Client) -> None:
    data = starting_values(client, "default-1") | {
        "version": "default-2",
        "type-billing-remove": "on",
    }

    document = save(client, data).document

    assert "billing" not in document["catalogue"]["request_types"]
    assert "billing" not in document["routes"]
    assert document["confidence"]["per_category"] == {"security": 0.3}


def test_an_effect_no_longer_allowed_loses_its_approval_and_another_gains_one(
    client: Client,
) -> None:
    data = starting_values(client, "default-1") | {"version": "default-2"}
    data.pop("effect-queue_account_review-allowed")
    data["effect-queue_account_review-approver"] = ""
    data["effect-create_follow_up-approver"] = "finance-approvers"

    document = save(client, data).document

    assert document["allowed_effects"] == ["create_follow_up", "send_internal_notification"]
    assert document["approvals"] == {"create_follow_up": {
        "group": "finance-approvers", "approvers": 1, "expires_after_hours": 72,
        "escalate_after_hours": 24, "escalate_to": None, "bulk": False,
    }}  # fmt: skip


# --- what it refuses, at its field --------------------------------------------------------------


def test_a_template_naming_an_unknown_field_is_refused_at_the_parameters(client: Client) -> None:
    data = warranty(starting_values(client))
    data["new_effect-parameters"] = TICKET_PARAMETERS.replace("serial_number", "serial_no")

    page = refused(client, data)

    assert error_next_to(page, "new_effect-parameters") == (
        "Serial > Value: the template names an unknown field 'serial_no'."
    )
    assert "New effect > Parameters: Serial > Value" in summary(page)


def test_an_effect_with_no_adapter_is_refused_at_its_adapter(client: Client) -> None:
    data = warranty(starting_values(client)) | {"new_effect-adapter": ""}

    page = refused(client, data)

    assert error_next_to(page, "new_effect-adapter") == (
        "Choose how the effect is done: a record, an HTTP request or an e-mail reply."
    )
    assert "New effect > How it is done" in summary(page)


def test_a_route_owned_by_a_group_that_does_not_exist_is_refused(client: Client) -> None:
    data = warranty(starting_values(client)) | {"new_route-group": "warranty-desk"}

    page = refused(client, data)

    assert error_next_to(page, "new_route-group") == (
        "There is no group named “warranty-desk”: choose one of the list."
    )
    assert "New route > Owned by" in summary(page)


def test_a_record_effect_for_a_group_that_does_not_exist_is_refused_when_stored(
    client: Client,
) -> None:
    data = starting_values(client) | {
        "version": "record-2",
        "effect-create_follow_up-settings": "group: warranty-desk",
    }

    page = refused(client, data)

    assert error_next_to(page, "effect-create_follow_up-settings") == (
        "Group: there is no group named 'warranty-desk'."
    )
    assert "Create a follow-up > Adapter settings" in summary(page)


def test_a_request_type_routed_nowhere_is_refused_at_its_route(client: Client) -> None:
    data = warranty(starting_values(client)) | {"new_type-route": ""}

    page = refused(client, data)

    assert error_next_to(page, "new_type-route") == (
        "Choose where requests of this type go: with no route they would go nowhere."
    )
    assert "New request type > Sent to" in summary(page)


def test_the_new_route_chosen_but_not_added_is_refused(client: Client) -> None:
    data = warranty(starting_values(client))
    data = {k: v for k, v in data.items() if not k.startswith("new_route-")}

    page = refused(client, data)

    assert error_next_to(page, "new_type-route").startswith("Add the new route below")


def test_a_secret_given_as_a_value_is_refused_at_the_settings(client: Client) -> None:
    data = warranty(starting_values(client))
    data["new_effect-settings"] = TICKET_SETTINGS.replace(
        "{secret: HELPDESK_TOKEN}", "Bearer 0123456789"
    )

    page = refused(client, data)

    message = error_next_to(page, "new_effect-settings")
    assert message.startswith("Headers: header Authorization carries a secret given as a value")
    assert "Bearer 0123456789" not in problems_on(page)[0]
    assert "New effect > Adapter settings" in summary(page)


def test_a_field_line_that_cannot_be_read_names_its_line(client: Client) -> None:
    data = warranty(starting_values(client))
    data["new_type-fields"] = "serial_number: reference, mandatory\npurchase_date date"

    page = refused(client, data)

    assert error_next_to(page, "new_type-fields") == (
        "Line 1: “mandatory” is not something a field says: after its type write required, "
        "label and its words, or pattern and its expression."
    )


def test_a_field_of_an_unknown_type_is_refused_at_the_fields(client: Client) -> None:
    data = warranty(starting_values(client))
    data["new_type-fields"] = "serial_number: serial\npurchase_date: date"

    page = refused(client, data)

    assert error_next_to(page, "new_type-fields").startswith("Serial number > Type: must be one of")


def test_settings_that_are_not_yaml_are_refused_with_their_line(client: Client) -> None:
    data = warranty(starting_values(client)) | {"new_effect-settings": "url: [https://x"}

    page = refused(client, data)

    assert error_next_to(page, "new_effect-settings").startswith(
        "This is not valid YAML: on line 1"
    )


def test_settings_with_aliases_are_refused_before_they_are_read(client: Client) -> None:
    data = warranty(starting_values(client))
    data["new_effect-parameters"] = "a: &x [1, 2]\nb: *x\n"

    page = refused(client, data)

    assert "aliases (*name) are not allowed" in error_next_to(page, "new_effect-parameters")


def test_a_name_already_taken_is_refused_at_the_name(client: Client) -> None:
    data = warranty(starting_values(client)) | {"new_route-name": "finance"}

    page = refused(client, data)

    assert error_next_to(page, "new_route-name").startswith(
        "There is already a route named finance"
    )


def test_a_version_name_already_taken_is_refused_at_the_name(client: Client) -> None:
    data = warranty(starting_values(client)) | {"version": "default-1"}

    page = refused(client, data)

    assert error_next_to(page, "version").startswith("Another version already has this name")


# --- who may use it -----------------------------------------------------------------------------


@pytest.mark.parametrize("group", ["auditors", "finance-approvers", None])
def test_only_people_who_may_add_versions_use_it(policy: None, group: str | None) -> None:
    roles_ensure()
    user = User.objects.create_user("someone")
    if group:
        user.groups.add(Group.objects.get(name=group))
    client = Client()
    client.force_login(user)
    versions = PolicyVersion.objects.count()

    assert client.get(BUSINESS).status_code == 403
    assert client.post(BUSINESS, warranty({"base": "policy-1"})).status_code == 403
    assert PolicyVersion.objects.count() == versions


def test_nobody_signed_in_is_asked_to_sign_in(policy: None) -> None:
    response = Client().get(BUSINESS)

    assert response.status_code == 302
    assert "login" in response["Location"]


def test_a_usual_effect_chosen_as_the_new_one_needs_the_new_one(client: Client) -> None:
    data = warranty(starting_values(client))
    data = {k: v for k, v in data.items() if not k.startswith("new_effect-")}

    page = refused(client, data)

    assert error_next_to(page, "new_type-effect").startswith("Add the new effect below")


def test_a_route_owned_by_an_unknown_group_is_refused_at_its_field_not_as_a_taken_name(
    client: Client,
) -> None:
    claims_desk_version("claims-1")
    Group.objects.filter(name="claims-desk").delete()  # the desk was renamed since
    data = starting_values(client, "claims-1") | {"version": "claims-2"}

    page = refused(client, data)

    assert "Another version already has this name" not in page
    # At the route's owner field, with its place in words in the summary above.
    assert "There is no group named 'claims-desk'." in problems_on(page)
    assert "Finance > Owned by: There is no group named 'claims-desk'." in summary(page)


@pytest.mark.parametrize(
    ("template", "why"),
    [
        ("{% for c in run.subject recursive %}{{ loop(c) }}{% endfor %}", "cannot be recursive"),
        ("{% include 'other.txt' %}", "cannot include, import or extend another template"),
    ],
)
def test_a_body_template_that_recurses_or_includes_is_refused_at_its_field(
    client: Client, template: str, why: str
) -> None:
    settings = TICKET_SETTINGS.replace('"Warranty claim {{ params.serial }}"', f'"{template}"')
    data = warranty(starting_values(client)) | {"new_effect-settings": settings}

    page = refused(client, data)

    shown = error_next_to(page, "new_effect-settings")
    assert shown.startswith("Body > Ticket > Subject: ") and why in shown
    assert not PolicyVersion.objects.filter(name="warranty-1").exists()


def test_a_body_template_the_sandbox_would_refuse_is_refused_when_saved(client: Client) -> None:
    settings = TICKET_SETTINGS.replace(
        '"Warranty claim {{ params.serial }}"', "\"{{ run.subject | attr('__class__') }}\""
    )
    data = warranty(starting_values(client)) | {"new_effect-settings": settings}

    page = refused(client, data)

    assert error_next_to(page, "new_effect-settings") == (
        "Body > Ticket > Subject: the template uses the filter 'attr', which templates may not use."
    )
    assert not PolicyVersion.objects.filter(name="warranty-1").exists()


def test_a_server_secret_is_refused_at_the_settings_with_its_header(client: Client) -> None:
    data = warranty(starting_values(client))
    data["new_effect-settings"] = TICKET_SETTINGS.replace(
        "{secret: HELPDESK_TOKEN}", "{secret: GATEHOUSE_SECRET_KEY}"
    )

    page = refused(client, data)

    assert error_next_to(page, "new_effect-settings").startswith(
        "Headers > Authorization: GATEHOUSE_SECRET_KEY is a setting of the Gatehouse server"
    )
    assert "New effect > Adapter settings" in summary(page)
