"""The customer registry: who a reference number or a sender's address belongs to.

Enrichment looks a request's customer up here (deterministic local evidence, before any
model reads it), and extraction checks that a customer reference a reader proposed exists.
Staff load the registry from a CSV file (`customers_load`), in one recorded transaction.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.db import transaction

from audit.models import AuditAction
from automation.extraction import reference_pattern, references_in
from automation.intake.models import Customer
from automation.runs.journal import record_audit
from policy.services import policy_business


def customers_known(references: list[str]) -> set[str]:
    return set(
        Customer.objects.filter(reference__in=[r.upper() for r in references]).values_list(
            "reference", flat=True
        )
    )


@dataclass(frozen=True)
class CustomerMatch:
    customer: Customer | None
    matched_by: str  # reference, sender_domain, none
    unknown_references: list[str]

    def as_enrichment(self) -> dict[str, Any]:
        customer = self.customer
        return {
            "customer": (
                {"reference": customer.reference, "name": customer.name}
                if customer is not None
                else None
            ),
            "customer_matched_by": self.matched_by,
            "unknown_customer_references": self.unknown_references,
        }


def customer_find(*, text: str, sender: str = "") -> CustomerMatch:
    """A reference in the text wins over the sender's domain; unknown references are listed."""
    references = references_in(text)
    if references:
        by_reference = {c.reference: c for c in Customer.objects.filter(reference__in=references)}
        unknown = [r for r in references if r not in by_reference]
        for reference in references:
            if reference in by_reference:
                return CustomerMatch(by_reference[reference], "reference", unknown)
    else:
        unknown = []
    domain = sender.rpartition("@")[2].lower()
    if domain:
        # The registry is small (customers, not people): a scan is simpler than a domain table.
        for customer in Customer.objects.only("reference", "name", "account_tier", "email_domains"):
            if domain in {d.lower() for d in customer.email_domains}:
                return CustomerMatch(customer, "sender_domain", unknown)
    return CustomerMatch(None, "none", unknown)


COLUMNS = ("reference", "name", "account_tier", "email_domains")


@transaction.atomic(durable=True)
def customers_load(*, path: Path) -> tuple[int, int]:
    """Create or update customers from a CSV (reference,name,account_tier,email_domains): all
    of the file or, on a bad row, none of it."""
    return customers_load_in_transaction(path=path)


def customers_load_in_transaction(*, path: Path) -> tuple[int, int]:
    """customers_load inside the caller's transaction: for a dry run that rolls back
    everything it did (the classifier evaluation)."""
    created = updated = 0
    pattern = reference_pattern()
    # The active business's tiers; a catalogue without a `tier` attribute takes any name.
    tiers = policy_business(name=None).tier_values()
    for line, row in enumerate(_rows(path), start=2):
        reference = row["reference"].strip().upper()
        if not pattern.fullmatch(reference):
            raise ValueError(f"{path}:{line}: {reference!r} is not a customer reference")
        tier = row["account_tier"].strip()
        if tiers and tier not in tiers:
            raise ValueError(
                f"{path}:{line}: account_tier {tier!r} is not one of {', '.join(tiers)}"
            )
        if not tier:
            raise ValueError(f"{path}:{line}: account_tier is empty")
        domains = [d.strip().lower() for d in row["email_domains"].split(";") if d.strip()]
        _, was_created = Customer.objects.update_or_create(
            reference=reference,
            defaults={
                "name": row["name"].strip(),
                "account_tier": tier,
                "email_domains": domains,
            },
        )
        created += was_created
        updated += not was_created
    record_audit(
        None, AuditAction.CUSTOMERS_LOADED, file=str(path), created=created, updated=updated
    )
    return created, updated


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        missing = set(COLUMNS) - set(reader.fieldnames or [])
        if missing:
            raise ValueError(f"{path}: missing columns {', '.join(sorted(missing))}")
        return list(reader)
