"""An insurer's claims desk, a business of the tests' own: motor claims and bank-detail
changes, each approved by its own group, read from mail by the recorded classifier.

The case it is for: a fleet van claim whose sender signs with an IBAN, read as a bank-detail
change. The approver sends it back (or rejects it); an ops lead corrects the reading.
"""

from __future__ import annotations

import copy
from email.message import EmailMessage
from typing import Any

import yaml
from django.contrib.auth.models import Group

from accounts.roles import roles_ensure
from approvals.models import ApprovalRequest, ApprovalStatus
from automation.intake.services import intake_submit
from automation.models import IntakeChannel, Run, State
from policy.services import parse_policy_text, policy_version_activate, policy_version_create
from tests.conftest import Pipeline

CLAIMS: dict[str, Any] = {
    "version": "claims-1",
    "routes": {"motor_claim": "claims_desk", "bank_details_change": "payments_desk"},
    "allowed_effects": ["open_claim", "change_bank_details"],
    "approvals": {
        "open_claim": {"group": "claims-managers"},
        "change_bank_details": {"group": "payments-approvers"},
    },
    "catalogue": {
        "request_types": {
            "motor_claim": {
                "label": "Motor claim",
                "description": "Damage to an insured vehicle.",
                "fields": {"registration": {"type": "text", "label": "Registration"}},
            },
            "bank_details_change": {
                "label": "Bank details change",
                "description": "A new account for payouts.",
                "fields": {"iban": {"type": "text", "label": "IBAN"}},
            },
        },
        "routes": {
            "claims_desk": {"label": "Claims desk", "group": "claims-desk"},
            "payments_desk": {"label": "Payments desk", "group": "payments-desk"},
        },
        "effects": {
            "open_claim": {
                "label": "Open a claim",
                "description": "A claim in the claims system.",
                "adapter": "record",
            },
            "change_bank_details": {
                "label": "Change the bank details",
                "description": "The payout account on the policy.",
                "adapter": "record",
            },
        },
    },
}
GROUPS = ("claims-managers", "payments-approvers", "claims-desk", "payments-desk")
APPROVER_GROUPS = ("claims-managers", "payments-approvers")

VAN_MAIL_ID = "<van-claim-1@fleet.example>"
VAN_BODY = (
    "Our delivery van LX21 VAN was hit in the depot car park last night; the rear door is "
    "dented. Please open a claim.\n\n-- \nFleet office, Northway Logistics\n"
    "IBAN GB33 BUKB 2020 1555 5555 55"
)
MISREAD = {
    "category": "bank_details_change",
    "recommended_route": "payments_desk",
    "requested_effect": "change_bank_details",
    "reason_code": "iban_given",
    "confidence": 0.9,
    "fields": {"iban": {"value": "GB33 BUKB 2020 1555 5555 55", "confidence": 0.9}},
}
CORRECTED = {
    "category": "motor_claim",
    "recommended_route": "claims_desk",
    "requested_effect": "open_claim",
    "reason_code": "van_damaged",
    "confidence": 1.0,
    "fields": {"registration": {"value": "LX21 VAN", "confidence": 1.0}},
}


def claims_channel(name: str = "claims-mail") -> IntakeChannel:
    """A mail channel read by the recorded classifier, decided by the claims business."""
    roles_ensure()
    # The business's approver groups hold the approver role's permissions, as a shipped
    # approver group does (accounts.roles).
    approver = Group.objects.get(name="finance-approvers").permissions.all()
    for group_name in GROUPS:
        group, _ = Group.objects.get_or_create(name=group_name)
        if group_name in APPROVER_GROUPS:
            group.permissions.set(approver)
    version, _ = policy_version_create(
        document=parse_policy_text(yaml.safe_dump(copy.deepcopy(CLAIMS)))
    )
    policy_version_activate(name=version.name)
    return IntakeChannel.objects.create(
        name=name,
        classifier="recorded",
        classifier_version="recorded-classifier-1",
        workflow_version="workflow-1",
        prompt_version="prompt-1",
        max_classifier_attempts=1,
    )


def van_mail() -> bytes:
    message = EmailMessage()
    message["From"] = "Fleet office <fleet@northway.example>"
    message["To"] = "claims@insurer.example"
    message["Subject"] = "Claim: van damaged in the depot"
    message["Message-ID"] = VAN_MAIL_ID
    message["Date"] = "Thu, 03 Dec 2026 09:12:00 +0000"
    message.set_content(VAN_BODY)
    return bytes(message)


def misread_van_claim(pipeline: Pipeline) -> ApprovalRequest:
    """Take the van claim in, read as a bank-detail change: it waits for a payments approver."""
    with pipeline.capture():
        result = intake_submit(
            channel=pipeline.channel, raw=van_mail(), content_type="message/rfc822", source="test"
        )
    assert result.run is not None
    pipeline.record(result.run.event_id, [{"type": "decision", "value": MISREAD}])
    pipeline.drain()
    run = Run.objects.get(pk=result.run.pk)
    assert run.state == State.APPROVAL_REQUIRED, (run.state, run.outcome, run.failure_detail)
    return ApprovalRequest.objects.get(run=run, status=ApprovalStatus.PENDING)
