"""The policy editor's form, its plain-words errors, and activation through a confirmation."""

from __future__ import annotations

import html
import re
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
import yaml
from django.contrib.auth.models import Group, User
from django.forms import BoundField
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounts.roles import roles_ensure
from automation.models import Simulation
from automation.recovery.simulation import simulation_process, simulation_start
from console.forms.policy import PolicyForm
from policy.catalogue import reference_catalogue
from policy.models import PolicyVersion
from policy.schemas import NEW_VERSION, PolicyDocument
from policy.services import policy_version_activate, policy_version_create
from tests.conftest import Pipeline, decision_for, make_event

NEW = reverse("policy:new")
# What pydantic says in its own words: never on a page.
RAW = ("Value error", "Input should", "String should", "validation error", "pydantic")


@pytest.fixture
def client(policy: None) -> Client:
    roles_ensure()
    user = User.objects.create_user("lee")
    user.groups.add(Group.objects.get(name="ops-leads"))
    client = Client()
    client.force_login(user)
    return client


def field_of(form: PolicyForm, label: str, *, near: str = "") -> str:
    """The name of the field labelled `label` (in the approval, signal or tier `near`)."""
    rows: dict[str, list[BoundField]] = dict(form.tier_rows)
    for approval in form.approval_rows:
        rows[approval.label] = [
            approval.group,
            approval.approvers,
            approval.expires,
            approval.escalate_after,
            approval.escalate_to,
        ]
    for signal in form.signal_rows:
        rows[signal.label] = [signal.enabled, signal.action, signal.approval_group, *signal.phrases]
    fields = rows[near] if near else list(form)
    return next(field.name for field in fields if field.label == label)


def starting_values(client: Client, source: str) -> tuple[PolicyForm, dict[str, Any]]:
    """The editor's form on `source`, and the values it shows, as a browser would send them."""
    form = client.get(NEW, {"from": source}).context["form"]
    data: dict[str, Any] = {}
    for bound in form:
        value = bound.value()
        if bound.widget_type == "checkbox":
            if value:
                data[bound.name] = "on"
        else:
            data[bound.name] = "" if value is None else str(value)
    return form, data


def save(client: Client, data: dict[str, Any]) -> PolicyVersion:
    response = client.post(NEW, data)
    assert response.status_code == 302, _problems(response.content.decode())
    return PolicyVersion.objects.get(name=data["version"])


def _problems(page: str) -> list[str]:
    return re.findall(r'data-testid="field-error">([^<]*)<', page)


def error_next_to(page: str, name: str) -> str:
    """The error shown in the same field block as input `name` (nothing else in between)."""
    block = re.search(rf'id="id_{re.escape(name)}".*?</div>', page, re.DOTALL)
    assert block is not None, f"no field {name}"
    found = re.search(r'data-testid="field-error">([^<]*)<', block.group(0))
    assert found is not None, f"no error next to {name}: {block.group(0)}"
    return html.unescape(found.group(1))


def refused(client: Client, data: dict[str, Any]) -> str:
    response = client.post(NEW, data)
    assert response.status_code == 400
    page = response.content.decode()
    for raw in RAW:
        assert raw not in page, raw
    assert not PolicyVersion.objects.filter(name=data["version"]).exists()
    return page


# --- the form builds the document -------------------------------------------------------------


def test_the_form_starts_from_the_active_version_with_a_new_name(client: Client) -> None:
    _, data = starting_values(client, "policy-1")
    assert (data["version"], data["base"], data["confidence_default"]) == (
        "policy-2",
        "policy-1",
        "0.0",
    )
    page = client.get(NEW).content.decode()
    assert "Starts from policy-1, the active version." in page
    assert "version: policy-2" in page  # the YAML section is on the same page


def test_confidence_thresholds_default_and_per_category(client: Client) -> None:
    form, data = starting_values(client, "default-1")
    data.update(version="conf-2", note="Stricter billing.", confidence_default="0.7")
    data[field_of(form, "Billing")] = "0.9"
    data[field_of(form, "Security")] = ""  # back to the default
    data[field_of(form, "Sales")] = "0.5"

    version = save(client, data)

    assert version.note == "Stricter billing."
    assert version.document["confidence"] == {
        "default": 0.7,
        "per_category": {"billing": 0.9, "sales": 0.5},
    }
    base = PolicyVersion.objects.get(name="default-1").document
    untouched = {
        k: v for k, v in version.document.items() if k not in ("version", "note", "confidence")
    }
    assert untouched == {
        k: v for k, v in base.items() if k not in ("version", "note", "confidence")
    }


def test_amount_limits_per_tier_and_who_approves_them(client: Client) -> None:
    form, data = starting_values(client, "policy-1")
    data.update(version="limits-2")
    data[field_of(form, "Approval above", near="Standard account tier")] = "1000"
    data[field_of(form, "Stop above", near="Standard account tier")] = "5000.50"
    data[field_of(form, "Stop above", near="Priority account tier")] = "20000"
    amount = "An amount over its tier's approval limit"
    data[field_of(form, "Approved by", near=amount)] = "finance-approvers"
    data[field_of(form, "Approvers needed", near=amount)] = "2"

    document = save(client, data).parsed

    assert document.amount_limits["standard"].approval_above == Decimal("1000")
    assert document.amount_limits["standard"].block_above == Decimal("5000.50")
    assert document.amount_limits["priority"].approval_above is None
    assert document.amount_limits["priority"].block_above == Decimal("20000")
    assert document.amount_approval is not None
    assert (document.amount_approval.group, document.amount_approval.approvers) == (
        "finance-approvers",
        2,
    )


def test_approvals_per_effect_are_changed_added_and_removed(client: Client) -> None:
    form, data = starting_values(client, "policy-1")
    data.update(version="approvals-2")
    review, notify = "Queue an account review", "Notify the team"
    data[field_of(form, "Approvers needed", near=review)] = "2"
    data[field_of(form, "Expires after (hours)", near=review)] = "48"
    data[field_of(form, "Escalate to", near=review)] = ""
    data[field_of(form, "Approved by", near=notify)] = "finance-approvers"
    data[field_of(form, "Escalate after (hours)", near=notify)] = "4"
    data[field_of(form, "Escalate to", near=notify)] = "ops-leads"

    document = save(client, data).document

    assert document["approvals"] == {
        "queue_account_review": {
            "group": "security-approvers",
            "approvers": 2,
            "expires_after_hours": 48,
            "escalate_after_hours": 24,
            "escalate_to": None,
            "bulk": False,
        },
        "send_internal_notification": {
            "group": "finance-approvers",
            "approvers": 1,
            "expires_after_hours": 72,
            "escalate_after_hours": 4,
            "escalate_to": "ops-leads",
            "bulk": False,
        },
    }
    form, data = starting_values(client, "approvals-2")
    data.update(version="approvals-3")
    data[field_of(form, "Approved by", near=review)] = ""  # no approval needed any more
    assert list(save(client, data).document["approvals"]) == ["send_internal_notification"]


def test_signals_are_switched_off_changed_and_their_phrases_edited(client: Client) -> None:
    form, data = starting_values(client, "default-1")
    data.update(version="signals-2")
    del data[field_of(form, "On", near="Legal threat")]  # an unticked box is not sent
    data[field_of(form, "When it matches", near="Account access")] = "approval"
    data[field_of(form, "Approved by", near="Account access")] = "security-approvers"
    data[field_of(form, "Phrases in English", near="Payment change")] = (
        "new bank details\n\n  new iban  \nnew bank details\n"
    )
    data[field_of(form, "Phrases in German", near="Payment change")] = ""

    signals = save(client, data).document["signals"]

    base = PolicyVersion.objects.get(name="default-1").document["signals"]
    assert "legal_threat" not in signals
    assert set(signals) == set(base) - {"legal_threat"}
    access = signals["account_access"]
    assert (access["action"], access["approval"]["group"], access["version"]) == (
        "approval",
        "security-approvers",
        2,
    )
    payment = signals["payment_change"]
    assert payment["phrases"]["en"] == ["new bank details", "new iban", "new bank details"]
    assert "de" not in payment["phrases"]
    assert payment["approval"] == base["payment_change"]["approval"]
    assert payment["version"] == 2
    assert signals["account_compromise"] == base["account_compromise"]  # untouched: still v1


def test_saving_unchanged_values_under_a_new_name_keeps_the_document(client: Client) -> None:
    _, data = starting_values(client, "default-1")
    data.update(version="same-2", note=PolicyVersion.objects.get(name="default-1").note)
    version = save(client, data)
    base = PolicyVersion.objects.get(name="default-1")
    assert {**version.document, "version": "default-1"} == base.document


# --- errors next to their field, in plain words ---------------------------------------------


def test_a_threshold_out_of_range_is_shown_at_its_field(client: Client) -> None:
    form, data = starting_values(client, "policy-1")
    data.update(confidence_default="1.5")
    data[field_of(form, "Billing")] = "-1"
    page = refused(client, data)
    assert error_next_to(page, "confidence_default") == "Must be at most 1.0."
    assert error_next_to(page, field_of(form, "Billing")) == "Must be at least 0.0."
    assert 'data-testid="form-problems"' in page


def test_numbers_in_another_scripts_digits_are_shown_at_their_field(client: Client) -> None:
    """Python reads Arabic-Indic digits as the numbers they look like; the editor takes a
    number only in ASCII digits, so what is saved is what the person saw they typed."""
    look_alike = str.maketrans("0123456789", "".join(chr(0x0660 + d) for d in range(10)))
    form, data = starting_values(client, "policy-1")
    approval = "An amount over its tier's approval limit"
    fields = {
        "confidence_default": "0.8",
        field_of(form, "Approval above", near="Standard account tier"): "1000",
        field_of(form, "Approvers needed", near=approval): "2",
    }
    data.update({name: value.translate(look_alike) for name, value in fields.items()})
    page = refused(client, data)
    for name in fields:
        assert error_next_to(page, name).startswith("Enter a"), name


def test_limits_that_contradict_each_other_are_shown_at_the_stop_limit(client: Client) -> None:
    form, data = starting_values(client, "policy-1")
    data[field_of(form, "Approval above", near="Standard account tier")] = "5000"
    data[field_of(form, "Stop above", near="Standard account tier")] = "1000"
    amount = "An amount over its tier's approval limit"
    data[field_of(form, "Approved by", near=amount)] = "finance-approvers"
    page = refused(client, data)
    stop = field_of(form, "Stop above", near="Standard account tier")
    assert error_next_to(page, stop) == "Must not be below the amount that needs approval."


def test_an_approval_limit_without_an_approver_is_shown_at_who_approves(client: Client) -> None:
    form, data = starting_values(client, "policy-1")
    data[field_of(form, "Approval above", near="Priority account tier")] = "100"
    page = refused(client, data)
    amount = "An amount over its tier's approval limit"
    assert error_next_to(page, field_of(form, "Approved by", near=amount)) == (
        "Amounts over a tier's approval limit need someone to approve them: choose a group."
    )


def test_signal_problems_are_shown_at_the_signal_field(client: Client) -> None:
    form, data = starting_values(client, "default-1")
    data[field_of(form, "When it matches", near="Legal threat")] = "approval"
    data[field_of(form, "Phrases in English", near="Data deletion request")] = "delete my data\nx"
    for language in ("English", "German", "French", "Spanish", "Dutch", "Italian"):
        data[field_of(form, f"Phrases in {language}", near="Credential exposure")] = ""
    page = refused(client, data)
    assert error_next_to(page, field_of(form, "Approved by", near="Legal threat")) == (
        "Choose who approves: the signal lets a run go ahead only after an approver agrees."
    )
    deletion = field_of(form, "Phrases in English", near="Data deletion request")
    assert error_next_to(page, deletion) == "“x” must be at least 2 characters."
    exposure = field_of(form, "Phrases in English", near="Credential exposure")
    assert error_next_to(page, exposure) == (
        "Give the signal at least one phrase, or switch it off."
    )


def test_a_bad_or_taken_version_name_is_shown_at_the_name(client: Client) -> None:
    _, data = starting_values(client, "policy-1")
    page = refused(client, {**data, "version": "policy 2"})
    assert "is not a usable version name" in error_next_to(page, "version")
    data.update(version="default-1")
    response = client.post(NEW, data)
    assert response.status_code == 400
    assert error_next_to(response.content.decode(), "version") == (
        "Another version already has this name: versions never change, so give this one a new name."
    )


def test_yaml_problems_say_where_in_plain_words(client: Client) -> None:
    page = client.post(NEW, {"document": "version: x\nroutes: [\n"}).content.decode()
    assert "This is not valid YAML: on line 3, a bracket [ or { is opened and never closed." in page
    assert "expected" not in page.lower().split("policy (yaml)")[0]  # no parser wording

    text = client.get(NEW).context["text"].replace("  default: 0.0", "  default: 1.5")
    response = client.post(NEW, {"document": text.replace("approvers: 1", "approvers: many")})
    assert response.status_code == 400
    shown = response.content.decode()
    assert "<strong>Confidence &gt; Default</strong>: Must be at most 1.0" in shown
    assert '<small class="code">confidence.default</small>' in shown
    assert (
        "Approvals &gt; Queue account review &gt; Approvers</strong>: Must be a whole number"
        in shown
    )
    for raw in RAW:
        assert raw not in shown, raw


# --- activation after a fresh simulation ----------------------------------------------------


def simulated(name: str) -> Simulation:
    now = timezone.now()
    simulation = simulation_start(
        version=name, since=now - timedelta(days=1), until=now, user=None, in_worker=False
    )
    return simulation_process(simulation_id=simulation.pk)


@pytest.fixture
def draft(client: Client) -> PolicyVersion:
    _, data = starting_values(client, "policy-1")
    return save(client, {**data, "version": "policy-2", "confidence_default": "0.8"})


def activate_url(name: str = "policy-2") -> str:
    return reverse("policy:activate", args=[name])


def test_no_activate_button_before_a_simulation(client: Client, draft: PolicyVersion) -> None:
    page = client.get(reverse("policy:detail", args=["policy-2"])).content.decode()
    assert f'href="{activate_url()}"' not in page
    assert "Not yet: activation needs a finished simulation of this version" in page
    confirmation = client.get(activate_url()).content.decode()
    assert "policy-2 cannot be activated yet" in confirmation
    assert 'name="simulation"' not in confirmation


def test_a_hand_made_activation_without_a_simulation_is_refused(
    client: Client, draft: PolicyVersion
) -> None:
    for data in ({}, {"simulation": ""}, {"simulation": "abc"}, {"simulation": "99999999"}):
        response = client.post(activate_url(), data, follow=True)
        assert "Not activated. Activation needs a finished simulation of this version" in (
            response.content.decode()
        )
        assert PolicyVersion.objects.get(is_active=True).name == "policy-1"


def test_a_stale_simulation_is_refused_at_the_confirmation(
    client: Client, draft: PolicyVersion
) -> None:
    simulation = simulated("policy-2")
    policy_version_activate(name="default-1")  # someone else activated a version since

    page = client.get(activate_url()).content.decode()
    assert "another version (default-1) was activated after the simulation started" in page
    response = client.post(activate_url(), {"simulation": simulation.pk}, follow=True)
    assert "Not activated. Another version (default-1) was activated after" in (
        response.content.decode()
    )
    assert PolicyVersion.objects.get(is_active=True).name == "default-1"


def test_a_fresh_simulation_leads_through_the_confirmation_to_activation(
    client: Client, pipeline: Pipeline, draft: PolicyVersion
) -> None:
    event = make_event(event_id="evt-edit-1")
    reading = decision_for(event)
    reading["value"]["confidence"] = 0.6
    pipeline.run(pipeline.submit(event, [reading]))
    simulation = simulated("policy-2")
    moved = (
        "1 run that the active version policy-1 sends straight through would now go to a person "
        "as an unsure reading."
    )

    detail = client.get(reverse("policy:detail", args=["policy-2"])).content.decode()
    assert f'href="{activate_url()}"' in detail
    assert detail.index(f'href="{activate_url()}"') > detail.index('data-testid="diff"')
    assert detail.index(f'href="{activate_url()}"') > detail.index('data-testid="simulations"')
    confirmation = client.get(activate_url()).content.decode()
    assert moved in confirmation
    assert re.search(r"Done</span>.*Unsure reading</span>", confirmation, re.DOTALL)
    assert f'name="simulation" value="{simulation.pk}"' in confirmation
    assert PolicyVersion.objects.get(is_active=True).name == "policy-1"  # not yet

    response = client.post(activate_url(), {"simulation": simulation.pk}, follow=True)

    assert "policy-2 is now the active policy." in response.content.decode()
    assert PolicyVersion.objects.get(is_active=True).name == "policy-2"


def test_right_after_activation_the_impact_says_no_runs_yet(
    client: Client, draft: PolicyVersion
) -> None:
    client.post(activate_url(), {"simulation": simulated("policy-2").pk})
    listing = client.get(reverse("policy:list")).content.decode()
    impact = listing.split('data-testid="impact"')[1]
    assert "No runs decided under this version yet" in impact
    row = impact.split('data-testid="impact-none"')[1].split("</tr>")[0]
    assert "policy-2" in row and "—" not in row


def test_the_simulation_page_reads_in_labels(
    client: Client, pipeline: Pipeline, draft: PolicyVersion
) -> None:
    event = make_event(event_id="evt-edit-2")
    reading = decision_for(event)
    reading["value"]["confidence"] = 0.6
    pipeline.run(pipeline.submit(event, [reading]))
    simulation = simulated("policy-2")
    page = client.get(reverse("policy:simulation", args=[simulation.pk])).content.decode()
    assert "execute → low_confidence" not in page
    assert (
        "1 run that the active version policy-1 sends straight through would now go to a person "
        "as an unsure reading."
    ) in page
    # The verdict's code is not shown beside the words it was named by ("Done execute").
    assert '<small class="code">execute</small>' not in page
    assert ">Finished</span>" in page
    assert "Confidence <strong>now stops it</strong>" in page


def claims_desk_version(name: str) -> PolicyVersion:
    """A version whose finance route is owned by the claims desk, a group that exists now."""
    Group.objects.get_or_create(name="claims-desk")
    data = PolicyVersion.objects.get(name="policy-1").parsed.stored()
    catalogue = reference_catalogue().model_dump(mode="json", exclude_none=True)
    catalogue["routes"]["finance"]["group"] = "claims-desk"
    data.update(version=name, catalogue=catalogue)
    version, _ = policy_version_create(
        document=PolicyDocument.model_validate(data, context=NEW_VERSION)
    )
    return version


NO_DESK = "there is no group named 'claims-desk'"


def test_a_route_owned_by_an_unknown_group_is_refused_in_its_own_words_in_the_form(
    client: Client,
) -> None:
    claims_desk_version("claims-1")
    Group.objects.filter(name="claims-desk").delete()  # the desk was renamed since
    _, data = starting_values(client, "claims-1")

    page = refused(client, data)

    assert "Another version already has this name" not in page
    problems = re.search(r'data-testid="form-problems">(.*?)</div>', page, re.DOTALL)
    assert problems is not None
    assert f"Catalogue &gt; Routes &gt; Finance &gt; Group: {html.escape(NO_DESK)}" in (
        problems.group(1)
    )


def test_a_route_owned_by_an_unknown_group_is_refused_in_its_own_words_in_the_yaml(
    client: Client,
) -> None:
    version = claims_desk_version("claims-1")
    Group.objects.filter(name="claims-desk").delete()
    text = yaml.safe_dump({**version.parsed.stored(), "version": "claims-2"}, sort_keys=False)

    response = client.post(NEW, {"document": text})

    assert response.status_code == 400
    page = response.content.decode()
    assert "Another version already has this name" not in page
    assert (
        f"<strong>Catalogue &gt; Routes &gt; Finance &gt; Group</strong>: "
        f"{html.escape(NO_DESK[:1].upper() + NO_DESK[1:])}"
    ) in page
    assert '<small class="code">catalogue.routes.finance.group</small>' in page
    assert not PolicyVersion.objects.filter(name="claims-2").exists()


@pytest.mark.parametrize(
    "template",
    [
        "{% for c in run.subject recursive %}{{ loop(c) }}{% endfor %}",
        "{% extends 'other.txt' %}",
    ],
)
def test_a_template_that_recurses_or_extends_is_refused_in_the_yaml_with_its_place(
    client: Client, template: str
) -> None:
    document = PolicyVersion.objects.get(is_active=True).parsed.stored()
    catalogue = reference_catalogue().model_dump(mode="json", exclude_none=True)
    catalogue["effects"]["create_follow_up"] |= {
        "adapter": "http",
        "http": {"url": "https://desk.example.com/tickets", "body": {"subject": template}},
    }
    text = yaml.safe_dump({**document, "version": "loops-1", "catalogue": catalogue})

    response = client.post(NEW, {"document": text, "base": "policy-1", "yaml": "1"})

    assert response.status_code == 400
    page = html.unescape(response.content.decode())
    # The place the template is at, in the sentence that says why.
    assert "effects.create_follow_up.http.body.subject: a " in page.lower()
    assert ("cannot be recursive" in page) or ("cannot include, import or extend" in page)
    assert not PolicyVersion.objects.filter(name="loops-1").exists()


# --- money: the base currency and the rates ---------------------------------------------------


def with_money(client: Client) -> None:
    """policy-1 with a base currency and rates, saved from the YAML editor."""
    text = client.get(NEW, {"from": "policy-1"}).context["text"]
    text = text.replace("version: policy-2", "version: money-1").replace(
        "money: null",
        "money:\n  base_currency: EUR\n  rates_as_of: '2026-12-01'\n"
        "  rates:\n    SEK: '0.0863'\n    GBP: '1.17'",
    )
    response = client.post(NEW, {"document": text, "base": "policy-1", "yaml": "1"})
    assert response.status_code == 302, response.content.decode()[-3000:]


def test_an_ops_lead_sees_and_changes_the_base_currency_and_rates(client: Client) -> None:
    with_money(client)
    _, data = starting_values(client, "money-1")
    assert (data["base_currency"], data["rates_as_of"]) == ("EUR", "2026-12-01")
    assert data["rates"].splitlines() == ["GBP 1.17", "SEK 0.0863"]
    page = client.get(reverse("policy:detail", args=["money-1"])).content.decode()
    assert "1 SEK = 0.0863 EUR" in page

    data.update(version="money-2", rates_as_of="2026-12-15", rates="SEK 0.09\nGBP 1.17\nNOK 0.085")
    money = save(client, data).parsed.money

    assert money is not None
    assert (money.base_currency, money.rates_as_of.isoformat()) == ("EUR", "2026-12-15")
    assert money.rates == {"SEK": Decimal("0.09"), "GBP": Decimal("1.17"), "NOK": Decimal("0.085")}


def test_rates_that_cannot_be_read_are_shown_at_their_field(client: Client) -> None:
    with_money(client)
    _, data = starting_values(client, "money-1")
    data.update(version="money-3", rates="SEK 0,09")
    page = refused(client, data)
    assert error_next_to(page, "rates") == (
        "Line 1 is not a rate: write a currency code and a number, such as SEK 0.0863."
    )

    data.update(rates="SEK 0.09", base_currency="")
    page = refused(client, data)
    assert error_next_to(page, "base_currency") == "Give the base currency the rates convert into."

    data.update(base_currency="E1R")
    page = refused(client, data)
    assert error_next_to(page, "base_currency") == (
        "Must be a currency's three-letter code in capitals, such as EUR."
    )


def test_a_base_currency_without_a_rates_date_is_refused_at_the_date(client: Client) -> None:
    _, data = starting_values(client, "policy-1")
    data.update(version="money-4", base_currency="EUR", rates="SEK 0.0863")
    page = refused(client, data)
    assert error_next_to(page, "rates_as_of")


DAY_RANGE = "Enter a date between 1970-01-01 and 2999-12-31."


@pytest.mark.parametrize("day", ["9999-12-31", "0001-01-01"])
def test_a_rates_date_past_the_calendar_is_refused_in_the_form_and_the_yaml(
    client: Client, day: str
) -> None:
    _, data = starting_values(client, "policy-1")
    data.update(version="money-5", base_currency="EUR", rates_as_of=day, rates="SEK 0.0863")
    assert error_next_to(refused(client, data), "rates_as_of") == DAY_RANGE

    text = (
        client.get(NEW, {"from": "policy-1"})
        .context["text"]
        .replace("money: null", f"money:\n  base_currency: EUR\n  rates_as_of: '{day}'")
    )
    response = client.post(NEW, {"document": text})
    assert response.status_code == 400
    assert f"<strong>Money &gt; Rates as of</strong>: {DAY_RANGE}" in response.content.decode()
    assert not PolicyVersion.objects.filter(name="policy-2").exists()


@pytest.mark.parametrize(
    ("change", "place"),
    [
        ("group: security-approvers", "approvals.queue_account_review.group"),
        ("escalate_to: ops-leads", "approvals.queue_account_review.escalate_to"),
    ],
)
def test_an_approval_rule_for_a_team_that_does_not_exist_is_refused_in_the_yaml(
    client: Client, change: str, place: str
) -> None:
    text = client.get(NEW, {"from": "policy-1"}).context["text"]
    assert change in text
    name = change.split(": ")[0]
    text = text.replace(change, f"{name}: security-aprovers")

    response = client.post(NEW, {"document": text})

    assert response.status_code == 400
    page = response.content.decode()
    assert f'<small class="code">{place}</small>' in page
    assert html.escape("There is no group named 'security-aprovers'") in page
    assert not PolicyVersion.objects.filter(name="policy-2").exists()
