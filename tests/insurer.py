"""A home insurer, a business of the tests' own for its customers: policyholders named by
policy numbers (POL-2026-004211), of two tiers, matched by the catalogue's own pattern and
never by the sender's domain (a policyholder writes from any address), and a claim that is
acknowledged by e-mail.

Neither the reference case set nor the online shop: no setting is changed for it.
"""

from __future__ import annotations

import copy
from email.message import EmailMessage
from typing import Any

import yaml
from django.contrib.auth.models import Group

from accounts.roles import roles_ensure
from automation.models import IntakeChannel
from policy.models import PolicyVersion
from policy.services import parse_policy_text, policy_version_activate, policy_version_create

POLICY_PATTERN = r"POL-\d{4}-\d{6}"
HOUSEHOLD = "POL-2026-004211"
LANDLORD = "POL-2025-000318"
ACKNOWLEDGEMENT = {
    "en": {
        "subject": "Re: {{ run.subject }}",
        "body": "Dear {{ customer.name or 'policyholder' }},\n\nwe have your claim.\n",
    }
}
INSURER: dict[str, Any] = {
    "version": "home-insurer-1",
    "routes": {"home_claim": "claims_desk", "policy_question": "claims_desk"},
    "allowed_effects": ["acknowledge_claim"],
    "approvals": {},
    "catalogue": {
        "request_types": {
            "home_claim": {
                "label": "Home claim",
                "description": "Damage to an insured home.",
                "fields": {
                    "policy_number": {
                        "type": "reference",
                        "label": "Policy number",
                        "pattern": POLICY_PATTERN,
                    }
                },
            },
            "policy_question": {
                "label": "Policy question",
                "description": "What a policy covers.",
            },
        },
        "routes": {"claims_desk": {"label": "Claims desk", "group": "home-claims-desk"}},
        "effects": {
            "acknowledge_claim": {
                "label": "Acknowledge the claim",
                "description": "A reply to the policyholder.",
                "adapter": "email_reply",
                "email_reply": {"templates": ACKNOWLEDGEMENT},
            }
        },
        "customer_attributes": {
            "tier": {"label": "Cover", "values": ["household", "landlord"]},
        },
        "customer_matching": {
            "reference_pattern": POLICY_PATTERN,
            "match_sender_domain": False,
        },
    },
}
CUSTOMERS_CSV = (
    "reference,name,account_tier,email_domains\n"
    f"{HOUSEHOLD},Amira Haddad,household,\n"
    f"{LANDLORD},Greenhill Lettings Ltd,landlord,greenhill-lettings.example;greenhill.example\n"
)


def insurer_document(**catalogue: Any) -> dict[str, Any]:
    """The insurer's document, its catalogue changed by `catalogue`."""
    document = copy.deepcopy(INSURER)
    document["catalogue"].update(catalogue)
    return document


def activate_insurer(**catalogue: Any) -> PolicyVersion:
    """The role groups, the insurer's desk, and its version stored and activated."""
    roles_ensure()
    Group.objects.get_or_create(name="home-claims-desk")
    document = insurer_document(**catalogue)
    version, _ = policy_version_create(document=parse_policy_text(yaml.safe_dump(document)))
    return policy_version_activate(name=version.name)


def insurer_channel(name: str = "home-claims", **addresses: str) -> IntakeChannel:
    """A mail channel read by the recorded classifier, with the reply addresses given."""
    return IntakeChannel.objects.create(
        name=name,
        classifier="recorded",
        classifier_version="recorded-classifier-1",
        workflow_version="workflow-1",
        prompt_version="prompt-1",
        max_classifier_attempts=1,
        **addresses,
    )


def claim_mail(body: str, *, sender: str = "amira@mail.example", number: int = 1) -> bytes:
    message = EmailMessage()
    message["From"] = f"Amira Haddad <{sender}>"
    message["To"] = "claims@insurer.example"
    message["Subject"] = "Water damage in the kitchen"
    message["Message-ID"] = f"<claim-{number}@mail.example>"
    message["Date"] = "Thu, 03 Dec 2026 09:12:00 +0000"
    message.set_content(body)
    return bytes(message)


def claim_reading(number: str = HOUSEHOLD) -> dict[str, Any]:
    """What the recorded classifier reads a claim as: a home claim, acknowledged."""
    return {
        "category": "home_claim",
        "recommended_route": "claims_desk",
        "requested_effect": "acknowledge_claim",
        "reason_code": "water_damage",
        "confidence": 1.0,
        "fields": {"policy_number": {"value": number, "confidence": 1.0}},
    }
