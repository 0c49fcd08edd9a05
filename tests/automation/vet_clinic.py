"""A veterinary clinic, a business of the reading tests' own (tests/data/vet-clinic-1.yaml),
and its labelled mail: written by the test, zipped as the console's upload takes it."""

from __future__ import annotations

import csv
import io
import itertools
import zipfile
from email.message import EmailMessage
from pathlib import Path

from accounts.roles import roles_ensure
from policy.models import PolicyVersion
from policy.services import parse_policy_text, policy_version_activate, policy_version_create

VET_CLINIC = Path(__file__).resolve().parents[1] / "data" / "vet-clinic-1.yaml"
TYPES = ("appointment", "prescription_refill", "invoice_question", "records_transfer")
LABELS = {
    "appointment": "Visit booking",
    "prescription_refill": "Prescription refill",
    "invoice_question": "Question about an invoice",
    "records_transfer": "Medical records transfer",
}
EFFECTS = {
    "appointment": "book_visit",
    "prescription_refill": "refill_prescription",
    "invoice_question": "answer_invoice",
    "records_transfer": "send_records",
}
ANIMALS = ("Bella", "Milo", "Luna", "Oscar", "Daisy", "Rocky", "Nala", "Toby", "Coco", "Max")
# What a client of each type writes: the words the learned reader learns each type from.
WRITES = {
    "appointment": (
        "Appointment for {pet}",
        "Could we book an appointment for {pet} next week? She has been limping since "
        "Tuesday and we would like a vet to see her. Any morning slot works for us.",
    ),
    "prescription_refill": (
        "Refill of {pet}'s tablets",
        "{pet} is nearly out of the heart tablets the vet prescribed. Could you refill the "
        "prescription so we can collect the medicine from the pharmacy this week?",
    ),
    "invoice_question": (
        "Question about the invoice for {pet}",
        "The invoice for {pet}'s last visit charges the consultation fee twice. Could you "
        "check the bill and tell us what we owe? We paid part of it at the desk.",
    ),
    "records_transfer": (
        "Medical records of {pet}",
        "We are moving house and {pet} will be registered with a practice in another town. "
        "Please send his medical records and vaccination history to the new practice.",
    ),
}
_numbers = itertools.count(1)


def activate_vet_clinic() -> PolicyVersion:
    roles_ensure()
    version, _ = policy_version_create(
        document=parse_policy_text(VET_CLINIC.read_text(encoding="utf-8"))
    )
    return policy_version_activate(name=version.name)


def vet_mail(kind: str, pet: str) -> bytes:
    subject, body = WRITES[kind]
    number = next(_numbers)
    message = EmailMessage()
    message["From"] = f"client{number}@pets.example"
    message["To"] = "desk@vet-clinic.example"
    message["Subject"] = subject.format(pet=pet)
    message["Message-ID"] = f"<vet-{kind}-{number}@pets.example>"
    message["Date"] = "Mon, 01 Mar 2027 09:00:00 +0000"
    message.set_content(body.format(pet=pet) + f"\n\nKind regards,\nClient {number}\n")
    return message.as_bytes()


def vet_rows(per_type: int = 8) -> list[tuple[dict[str, str], bytes]]:
    """`per_type` labelled messages of each type: (labels.csv row, the message)."""
    rows = []
    for kind in TYPES:
        for pet in ANIMALS[:per_type]:
            name = f"{kind}-{pet.lower()}.eml"
            row = {
                "file": name,
                "category": kind,
                "effect": EFFECTS[kind],
                "expected_intake": "new",
            }
            rows.append((row, vet_mail(kind, pet)))
    return rows


def labels_csv(rows: list[dict[str, str]]) -> bytes:
    out = io.StringIO()
    columns = list(dict.fromkeys(c for row in rows for c in row))
    writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows({**dict.fromkeys(columns, ""), **row} for row in rows)
    return out.getvalue().encode()


def vet_zip(
    rows: list[tuple[dict[str, str], bytes]] | None = None,
    *,
    extra: dict[str, bytes] | None = None,
    more_rows: list[dict[str, str]] = (),  # type: ignore[assignment]
    folder: str = "vet-set/",
) -> bytes:
    """The set as a .zip: labels.csv in `folder` beside its messages, `more_rows` in
    labels.csv with no message, and `extra` members."""
    rows = vet_rows() if rows is None else rows
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        labels = labels_csv([row for row, _ in rows] + list(more_rows))
        archive.writestr(f"{folder}labels.csv", labels)
        for row, raw in rows:
            archive.writestr(f"{folder}{row['file']}", raw)
        for name, data in (extra or {}).items():
            archive.writestr(name, data)
    return out.getvalue()
