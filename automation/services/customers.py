"""Writing the customer registry: a CSV file loaded in one transaction, recorded."""

from __future__ import annotations

import csv
from pathlib import Path

from django.db import transaction

from audit.models import AuditAction
from automation.customers import reference_pattern
from automation.models import Customer
from automation.schemas import AccountTier
from automation.services.journal import record_audit

COLUMNS = ("reference", "name", "account_tier", "email_domains")


def customers_load(*, path: Path) -> tuple[int, int]:
    """Create or update customers from a CSV (reference,name,account_tier,email_domains)."""
    created = updated = 0
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        missing = set(COLUMNS) - set(reader.fieldnames or [])
        if missing:
            raise ValueError(f"{path}: missing columns {', '.join(sorted(missing))}")
        rows = list(reader)
    pattern = reference_pattern()
    with transaction.atomic():
        for line, row in enumerate(rows, start=2):
            reference = row["reference"].strip().upper()
            if not pattern.fullmatch(reference):
                raise ValueError(f"{path}:{line}: {reference!r} is not a customer reference")
            tier = row["account_tier"].strip()
            if tier not in set(AccountTier):
                raise ValueError(f"{path}:{line}: account_tier {tier!r} is not standard/priority")
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
