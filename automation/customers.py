"""The customer registry, read: who a reference number or a sender's address belongs to.

Enrichment looks a request's customer up here (deterministic local evidence, before any
model reads it), and extraction checks that a customer reference a reader proposed exists.
The registry is written by `automation.services.customers`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from automation.conf import setting
from automation.intake.models import Customer


def reference_pattern() -> re.Pattern[str]:
    return re.compile(setting("CUSTOMER_REFERENCE_PATTERN"))


def references_in(text: str) -> list[str]:
    """Customer references in a text, in order of appearance, each once."""
    seen: dict[str, None] = {}
    for match in reference_pattern().finditer(text):
        seen.setdefault(match.group(0).upper(), None)
    return list(seen)


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
