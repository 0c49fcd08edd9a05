"""Writing the customer registry: a CSV file loaded in one transaction, recorded."""

from __future__ import annotations

import csv
from pathlib import Path

from django.db import transaction

from audit.models import AuditAction
from automation.customers import reference_pattern
from automation.models import Customer
from automation.runs.journal import record_audit
from automation.schemas import AccountTier

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
    for line, row in enumerate(_rows(path), start=2):
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


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        missing = set(COLUMNS) - set(reader.fieldnames or [])
        if missing:
            raise ValueError(f"{path}: missing columns {', '.join(sorted(missing))}")
        return list(reader)
