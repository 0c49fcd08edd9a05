"""The business catalogue: a section of the policy document, checked before it is stored."""

from __future__ import annotations

import copy
import html
from typing import Any

import pytest
import yaml
from django.contrib.auth.models import Group, User
from django.test import Client
from django.urls import reverse
from jinja2.exceptions import SecurityError

from accounts.roles import roles_ensure
from console.vocabulary import Kind, label
from policy.catalogue import TEMPLATES, reference_catalogue, template_names
from policy.models import PolicyVersion
from policy.schemas import PolicyDocument
from policy.services import (
    DEFAULTS_DIR,
    PolicyError,
    parse_policy_text,
    policy_version_create,
    shipped,
)

# A business that is not the reference one: a manufacturer's warranty desk.
WARRANTY: dict[str, Any] = {
    "version": "warranty-1",
    "routes": {"warranty_claim": "warranty_desk", "question": "warranty_desk"},
    "allowed_effects": ["open_ticket", "reply_to_customer"],
    "approvals": {"open_ticket": {"group": "warranty-approvers"}},
    "catalogue": {
        "request_types": {
            "warranty_claim": {
                "label": "Warranty claim",
                "description": "A product that broke within its warranty.",
                "fields": {
                    "serial_number": {
                        "type": "reference",
                        "required": True,
                        "pattern": "SN-[0-9]{6}",
                    },
                    "purchase_date": {"type": "date", "required": True},
                },
                "cues": {"en": ["warranty", "broken"], "de": ["garantie", "defekt"]},
            },
            "question": {"label": "Question", "description": "Anything else."},
        },
        "routes": {"warranty_desk": {"label": "Warranty desk", "group": "warranty-desk"}},
        "effects": {
            "open_ticket": {
                "label": "Open a ticket",
                "description": "A ticket in the helpdesk.",
                "adapter": "http",
                "http": {
                    "url": "https://helpdesk.example/api/v2/tickets",
                    "headers": {"Authorization": {"secret": "HELPDESK_TOKEN"}},
                    "body": {
                        "ticket": {
                            "subject": "Warranty {{ params.serial }}",
                            "custom_fields": [{"id": 1, "value": "{{ params.bought }}"}],
                        }
                    },
                    "signing": {"secret": "HELPDESK_SIGNING_KEY"},
                },
                "parameters": {
                    "serial": {"value": "{{ fields.serial_number }}", "type": "reference"},
                    "bought": {"value": "{{ fields.purchase_date }}", "type": "date"},
                },
            },
            "reply_to_customer": {
                "label": "Reply to the customer",
                "description": "An answer in the customer's thread.",
                "adapter": "email_reply",
                "email_reply": {
                    "templates": {
                        "en": {
                            "subject": "Re: {{ run.subject }}",
                            "body": "Hello {{ customer.name }}",
                        }
                    }
                },
            },
        },
    },
}


def document(**changes: Any) -> dict[str, Any]:
    """The warranty business with some settings replaced: `catalogue__routes=...` reaches in."""
    data = copy.deepcopy(WARRANTY)
    for path, value in changes.items():
        *parents, last = path.split("__")
        where = data
        for key in parents:
            where = where[key]
        where[last] = value
    return data


def refusal(data: dict[str, Any]) -> str:
    with pytest.raises(PolicyError) as refused:
        parse_policy_text(yaml.safe_dump(data))
    return refused.value.message


def test_a_business_of_its_own_is_read_from_the_policy_document() -> None:
    parsed = parse_policy_text(yaml.safe_dump(WARRANTY))

    business = parsed.business
    assert set(business.request_types) == {"warranty_claim", "question"}
    assert business.request_types["warranty_claim"].fields["serial_number"].required
    assert business.routes["warranty_desk"].group == "warranty-desk"
    assert business.effects["open_ticket"].http is not None
    assert "catalogue" in parsed.canonical_json()


def test_a_version_without_a_catalogue_reads_the_reference_business_and_keeps_its_checksum() -> (
    None
):
    for path in shipped(first="policy-1"):
        parsed = parse_policy_text(path.read_text(encoding="utf-8"))
        assert parsed.catalogue is None
        assert parsed.business == reference_catalogue()
        assert '"catalogue"' not in parsed.canonical_json()


def test_the_reference_catalogue_is_the_business_the_code_knows_today(db: None) -> None:
    """Stored runs, labels and reports carry these codes: the reference catalogue names each
    one, with the words the console shows for it (while no version is stored, its own)."""
    business = reference_catalogue()
    assert set(business.request_types) == {"support", "billing", "sales", "security"}
    assert set(business.routes) == {"service_desk", "finance", "commercial", "security_review"}
    assert set(business.effects) == {
        "create_follow_up",
        "queue_account_review",
        "send_internal_notification",
    }
    assert business.tier_values() == ["standard", "priority"]
    for name, spec in business.request_types.items():
        assert spec.label == label(Kind.CATEGORY, name)
    for name, route in business.routes.items():
        assert route.label == label(Kind.ROUTE, name)
    for name, effect in business.effects.items():
        assert effect.label == label(Kind.EFFECT, name)
        assert effect.adapter == "record"


def test_the_shipped_policies_are_consistent_with_the_reference_catalogue() -> None:
    for path in shipped(first="policy-1"):
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        data["catalogue"] = yaml.safe_load(
            (DEFAULTS_DIR / "catalogues" / "reference-1.yaml").read_text(encoding="utf-8")
        )
        assert PolicyDocument.model_validate(data).business == reference_catalogue()


# --- what a catalogue is refused for, with the place named -----------------------------------


def test_a_parameter_naming_an_unknown_field_is_refused() -> None:
    message = refusal(
        document(
            catalogue__effects__open_ticket__parameters={"serial": {"value": "{{ fields.serial }}"}}
        )
    )
    assert "effects.open_ticket.parameters.serial.value" in message
    assert "unknown field 'serial'" in message


def test_a_body_naming_an_unknown_parameter_is_refused() -> None:
    data = document()
    data["catalogue"]["effects"]["open_ticket"]["http"]["body"] = {"note": "{{ params.colour }}"}
    message = refusal(data)
    assert "effects.open_ticket.http.body.note" in message
    assert "unknown parameter 'colour'" in message


def test_a_template_that_reaches_outside_what_it_is_given_is_refused() -> None:
    data = document()
    data["catalogue"]["effects"]["reply_to_customer"]["email_reply"]["templates"]["en"]["body"] = (
        "{{ settings.SECRET_KEY }}"
    )
    message = refusal(data)
    assert "email_reply.templates.en.body" in message
    assert "names 'settings'; it may use customer, params, run" in message


def test_a_template_that_cannot_be_read_is_refused() -> None:
    data = document()
    data["catalogue"]["effects"]["reply_to_customer"]["email_reply"]["templates"]["en"][
        "subject"
    ] = "Re: {{ run.subject"
    assert "email_reply.templates.en.subject: the template cannot be read" in refusal(data)


def test_a_default_effect_the_catalogue_does_not_have_is_refused_with_its_place() -> None:
    message = refusal(
        document(catalogue__request_types__warranty_claim__default_effect="refund_now")
    )
    assert "request_types.warranty_claim.default_effect: 'refund_now' is no effect" in message
    assert "open_ticket, reply_to_customer" in message  # what it could have named


def test_cues_are_held_to_two_letter_languages_and_counted_one_way() -> None:
    claim = "catalogue__request_types__warranty_claim__"
    assert "'english' is not a two-letter language code" in refusal(
        document(**{f"{claim}scene_cues": {"english": ["warranty"]}})
    )
    assert "'deutsch' is not a two-letter language code" in refusal(
        document(catalogue__effects__open_ticket__cues={"deutsch": ["ticket"]})
    )
    assert "broken: listed as a cue and as a scene cue" in refusal(
        document(**{f"{claim}scene_cues": {"en": ["Broken"]}})
    )
    assert "default_effect_always needs a default_effect" in refusal(
        document(**{f"{claim}default_effect_always": True})
    )
    assert "cue_weight" in refusal(document(**{f"{claim}cue_weight": 0}))


def test_a_business_says_what_its_mail_wants_and_how_much_its_words_count() -> None:
    claim = "catalogue__request_types__warranty_claim__"
    parsed = parse_policy_text(
        yaml.safe_dump(
            document(
                **{
                    f"{claim}default_effect": "open_ticket",
                    f"{claim}default_effect_always": True,
                    f"{claim}cue_weight": 2,
                    f"{claim}scene_cues": {"en": ["serial number"]},
                    "catalogue__effects__open_ticket__cues": {"en": ["open a ticket"]},
                    "catalogue__effects__open_ticket__cue_priority": 3,
                }
            )
        )
    )
    claim_type = parsed.business.request_types["warranty_claim"]
    assert (claim_type.default_effect, claim_type.default_effect_always) == ("open_ticket", True)
    assert (claim_type.cue_weight, claim_type.scene_cues) == (2, {"en": ["serial number"]})
    assert parsed.business.effects["open_ticket"].cue_priority == 3


def test_an_effect_with_no_adapter_is_refused() -> None:
    data = document()
    del data["catalogue"]["effects"]["reply_to_customer"]["adapter"]
    assert "catalogue.effects.reply_to_customer.adapter: is required" in refusal(data)


def test_an_http_effect_without_its_settings_is_refused() -> None:
    data = document()
    del data["catalogue"]["effects"]["open_ticket"]["http"]
    assert "an http effect needs its `http:` settings only" in refusal(data)


def test_a_type_that_policy_routes_nowhere_is_refused() -> None:
    message = refusal(document(routes={"question": "warranty_desk"}))
    assert "routes leave out the request type warranty_claim, so it goes nowhere" in message


def test_rules_naming_what_the_catalogue_does_not_have_are_refused() -> None:
    assert "no route of the catalogue" in refusal(
        document(routes={"warranty_claim": "service_desk", "question": "warranty_desk"})
    )
    assert "allowed_effects name refund, which is no effect of the catalogue" in refusal(
        document(allowed_effects=["open_ticket", "refund"])
    )


def test_a_secret_given_as_a_value_is_refused() -> None:
    data = document()
    data["catalogue"]["effects"]["open_ticket"]["http"]["headers"] = {
        "Authorization": "Bearer 0123456789abcdef"
    }
    message = refusal(data)
    assert "catalogue.effects.open_ticket.http.headers" in message
    assert "header Authorization carries a secret given as a value" in message
    assert "0123456789abcdef" not in message

    data["catalogue"]["effects"]["open_ticket"]["http"]["headers"] = {}
    data["catalogue"]["effects"]["open_ticket"]["http"]["url"] = (
        "https://bot:hunter22@chat.example/hook"
    )
    assert "carries a user name or password" in refusal(data)

    data["catalogue"]["effects"]["open_ticket"]["http"]["url"] = "https://chat.example/hook"
    data["catalogue"]["effects"]["open_ticket"]["http"]["signing"] = {"secret": "lowercase"}
    assert "must be the name of an environment variable" in refusal(data)


@pytest.mark.django_db
def test_a_route_owned_by_a_group_that_does_not_exist_is_refused() -> None:
    Group.objects.create(name="warranty-approvers")
    parsed = parse_policy_text(yaml.safe_dump(WARRANTY))

    with pytest.raises(PolicyError) as refused:
        policy_version_create(document=parsed)
    assert refused.value.message == (
        "catalogue.routes.warranty_desk.group: there is no group named 'warranty-desk'"
    )

    Group.objects.create(name="warranty-desk")
    version, created = policy_version_create(document=parsed)
    assert created and version.parsed.business.routes["warranty_desk"].group == "warranty-desk"


# --- templates ------------------------------------------------------------------------------


def test_the_names_a_template_reads_are_found_however_they_are_written() -> None:
    names = template_names(
        "{{ params.a }} {{ params['b'] }} {% if customer.tier %}{{ run }}{% endif %}"
        "{% for x in params.items %}{{ x }}{{ loop.index }}{% endfor %}"
    )
    assert {root for root, _ in names} == {"params", "customer", "run"}
    assert ("params", "a") in names and ("params", "b") in names
    assert ("customer", "tier") in names and ("run", None) in names
    assert ("params", "items") in names


def test_templates_render_in_a_sandbox() -> None:
    with pytest.raises(SecurityError):
        TEMPLATES.from_string("{{ params.__class__.__mro__ }}").render(params={})


@pytest.mark.django_db
def test_a_version_with_a_catalogue_is_shown_on_its_page(policy: None) -> None:
    roles_ensure()
    for name in ("warranty-approvers", "warranty-desk"):
        Group.objects.get_or_create(name=name)
    policy_version_create(document=parse_policy_text(yaml.safe_dump(WARRANTY)))
    lead = User.objects.create_user("lee")
    lead.groups.add(Group.objects.get(name="ops-leads"))
    client = Client()
    client.force_login(lead)

    page = client.get(reverse("policy:detail", args=["warranty-1"]))

    assert page.status_code == 200
    text = html.unescape(page.content.decode())
    assert "catalogue:" in text and "warranty_claim" in text
    assert "HELPDESK_TOKEN" in text  # the variable's name, the only trace of the secret


@pytest.mark.django_db
def test_a_version_without_a_catalogue_is_stored_as_versions_were_before(policy: None) -> None:
    """A release that knows no catalogue still reads it (a rollback keeps working)."""
    for version in PolicyVersion.objects.all():
        assert "catalogue" not in version.document
        assert version.parsed.business == reference_catalogue()


# What the sandbox refuses only when a template is rendered is refused when it is stored.
UNSAFE_TEMPLATES = {
    "{{ run.subject | attr('__class__') }}": "the filter 'attr', which templates may not use",
    "{{ run.subject.__class__ }}": "reads '__class__', which templates may not read",
    "{{ params['__class__'] }}": "reads '__class__', which templates may not read",
    "{{ params[run.subject] }}": "reads a value by a computed key",
    "{{ params.serial | no_such_filter }}": "the filter 'no_such_filter', which templates do not",
    "{% if params.serial is no_such_test %}x{% endif %}": "the test 'no_such_test'",
    "{{ params.serial | map('attr', '__class__') | list }}": "'map' is given 'attr'",
    "{{ params.serial | sort(attribute='__class__') }}": "'sort' is given '__class__'",
    "{{ params.serial | selectattr('__dict__') | list }}": "'selectattr' is given '__dict__'",
    "{% include 'other.txt' %}": "cannot include, import or extend another template",
    "{% import 'other.txt' as other %}": "cannot include, import or extend another template",
    "{% from 'other.txt' import x %}": "cannot include, import or extend another template",
    "{% extends 'other.txt' %}": "cannot include, import or extend another template",
    # A RecursionError when rendered, which held nothing and left the run where it was.
    "{% for c in run.subject recursive %}{{ loop(c) }}{% endfor %}": "a loop cannot be recursive",
}


@pytest.mark.django_db
@pytest.mark.parametrize("template", list(UNSAFE_TEMPLATES))
def test_a_template_the_sandbox_would_refuse_is_refused_when_the_version_is_stored(
    template: str,
) -> None:
    for name in ("warranty-approvers", "warranty-desk"):
        Group.objects.get_or_create(name=name)
    data = document()
    data["catalogue"]["effects"]["open_ticket"]["http"]["body"]["ticket"]["subject"] = template
    stored = PolicyVersion.objects.count()

    with pytest.raises(PolicyError) as refused:
        policy_version_create(document=parse_policy_text(yaml.safe_dump(data)))

    message = refused.value.message
    assert "effects.open_ticket.http.body.ticket.subject" in message
    assert UNSAFE_TEMPLATES[template] in message
    assert PolicyVersion.objects.count() == stored


def test_a_template_using_what_templates_have_is_stored() -> None:
    data = document()
    data["catalogue"]["effects"]["open_ticket"]["http"]["body"]["ticket"]["subject"] = (
        "{{ run.subject[:40] | upper }} {{ params['serial'] | default('none') }}"
        "{% for word in run.subject.split() | map('lower') %}{{ word }}{% endfor %}"
        "{% if params.bought is defined %}{{ params.bought | truncate(10) }}{% endif %}"
    )
    assert parse_policy_text(yaml.safe_dump(data)).business.effects["open_ticket"].http
