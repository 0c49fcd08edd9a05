"""The customer registry: who a reference number or a sender's address belongs to.

Enrichment looks a request's customer up here (deterministic local evidence, before any
model reads it), and extraction checks that a customer reference a reader proposed exists.
Staff load the registry from a CSV file (`customers_load`, `manage.py load_customers`; the
console's upload is `customers_upload`), checked whole and written in one recorded
transaction, or add and change one customer in the console (`customer_add`,
`customer_change`). A customer is held to the active business: its reference written as the
catalogue's `customer_matching.reference_pattern` says (else the server's setting) and its
tier one of the catalogue's `tier` values.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, transaction

from audit.models import AuditAction
from automation.extraction import reference_pattern, references_in
from automation.intake.models import Customer
from automation.runs.journal import record_audit
from policy.catalogue import CustomerMatching
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


def customer_find(
    *, text: str, sender: str = "", matching: CustomerMatching | None = None
) -> CustomerMatch:
    """A reference in the text (as `matching`, the business's, says one is written) wins
    over the sender's domain, which counts unless `matching` says it does not; unknown
    references are listed."""
    matching = matching or CustomerMatching()
    references = references_in(text, reference_pattern(matching))
    if references:
        by_reference = {c.reference: c for c in Customer.objects.filter(reference__in=references)}
        unknown = [r for r in references if r not in by_reference]
        for reference in references:
            if reference in by_reference:
                return CustomerMatch(by_reference[reference], "reference", unknown)
    else:
        unknown = []
    domain = sender.rpartition("@")[2].lower()
    if domain and matching.match_sender_domain:
        # The registry is small (customers, not people): a scan is simpler than a domain table.
        for customer in Customer.objects.only("reference", "name", "account_tier", "email_domains"):
            if domain in {d.lower() for d in customer.email_domains}:
                return CustomerMatch(customer, "sender_domain", unknown)
    return CustomerMatch(None, "none", unknown)


COLUMNS = ("reference", "name", "account_tier", "email_domains")
# The largest customer file taken (about 20,000 customers): a registry, not a data warehouse.
MAX_FILE_BYTES = 2_000_000
# Problems named of one bad file: enough to fix it, not a page per row.
MAX_PROBLEMS = 50
REFERENCE_LENGTH = Customer._meta.get_field("reference").max_length or 40
NAME_LENGTH = Customer._meta.get_field("name").max_length or 200
TIER_LENGTH = Customer._meta.get_field("account_tier").max_length or 60
# A domain as a sender's address ends: labels of letters, digits and dashes.
DOMAIN = re.compile(r"(?=.{1,253}$)(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}")
MAX_DOMAINS = 50
# Characters no name holds: the database refuses a NUL, and a line break splits a line.
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
TAKEN = "there is already a customer with this reference"


class CustomerInvalid(ValueError):
    """A customer that cannot be stored: the problem of each field, in words."""

    def __init__(self, problems: dict[str, str]) -> None:
        super().__init__("; ".join(f"{field}: {why}" for field, why in problems.items()))
        self.problems = problems


class CustomerFileInvalid(ValueError):
    """A customer file that was not loaded: each wrong line and why (nothing was written)."""

    def __init__(self, source: str, problems: list[str]) -> None:
        shown = problems[:MAX_PROBLEMS]
        more = len(problems) - len(shown)
        super().__init__(f"{source}: " + "; ".join(shown) + (f"; and {more} more" if more else ""))
        self.problems = shown
        self.more = more


@dataclass(frozen=True)
class CustomerRules:
    """What the active business holds a customer to: how its references are written and
    the values of its `tier` customer attribute (any name when it has none)."""

    pattern: re.Pattern[str]
    tiers: list[str]

    @classmethod
    def active(cls) -> CustomerRules:
        business = policy_business(name=None)
        return cls(reference_pattern(business.matching), business.tier_values())


def domains_read(text: str) -> list[str]:
    """Domains written with ; (as the file does), commas or spaces between them."""
    return list(dict.fromkeys(d.lower() for d in re.split(r"[;,\s]+", text) if d))


def customer_problems(
    *, reference: str, name: str, account_tier: str, email_domains: list[str], rules: CustomerRules
) -> dict[str, str]:
    """What is wrong with a customer, per field (nothing: it may be stored)."""
    problems: dict[str, str] = {}
    said = {"reference": reference, "name": name, "account_tier": account_tier}
    for field, value in said.items():
        if CONTROL.search(value):
            problems[field] = "holds a control character (a NUL, a line break): write it plainly"
    if problems:
        return problems
    if not reference:
        problems["reference"] = "give the customer's reference"
    elif len(reference) > REFERENCE_LENGTH or not rules.pattern.fullmatch(reference):
        problems["reference"] = (
            f"“{reference[:60]}” is not written as this business writes a customer reference "
            f"({rules.pattern.pattern})"
        )
    if not name:
        problems["name"] = "give the customer's name"
    elif len(name) > NAME_LENGTH:
        problems["name"] = f"a name has at most {NAME_LENGTH} characters"
    if not account_tier:
        problems["account_tier"] = "give the account tier"
    elif rules.tiers and account_tier not in rules.tiers:
        problems["account_tier"] = (
            f"“{account_tier[:60]}” is not a tier of this business: one of {', '.join(rules.tiers)}"
        )
    elif len(account_tier) > TIER_LENGTH:
        problems["account_tier"] = f"a tier has at most {TIER_LENGTH} characters"
    wrong = [d for d in email_domains if not DOMAIN.fullmatch(d)]
    if wrong:
        problems["email_domains"] = f"not a domain: {', '.join(w[:60] for w in wrong[:5])}"
    elif len(email_domains) > MAX_DOMAINS:
        problems["email_domains"] = f"at most {MAX_DOMAINS} domains"
    return problems


def _checked(
    *, reference: str, name: str, account_tier: str, email_domains: list[str]
) -> dict[str, Any]:
    values: dict[str, Any] = {
        "reference": reference.strip().upper(),
        "name": name.strip(),
        "account_tier": account_tier.strip(),
        "email_domains": [d.strip().lower() for d in email_domains if d.strip()],
    }
    problems = customer_problems(**values, rules=CustomerRules.active())
    if problems:
        raise CustomerInvalid(problems)
    return values


def _may_change(user: User) -> None:
    if not user.has_perm("automation.change_customer"):
        raise PermissionDenied("changing customers needs the permission to change them")


@transaction.atomic(durable=True)
def customer_add(
    *, user: User, reference: str, name: str, account_tier: str, email_domains: list[str]
) -> Customer:
    """Add one customer, held to the active business's rules. Raises CustomerInvalid
    (`reference` when it is taken) or PermissionDenied; audited."""
    _may_change(user)
    values = _checked(
        reference=reference, name=name, account_tier=account_tier, email_domains=email_domains
    )
    try:
        # The unique reference decides between two people adding the same one at once: a
        # savepoint, so the refusal leaves the service's transaction usable.
        with transaction.atomic():
            customer = Customer.objects.create(**values)
    except IntegrityError as exc:
        raise CustomerInvalid({"reference": TAKEN}) from exc
    record_audit(None, AuditAction.CUSTOMER_ADDED, actor=user, reference=customer.reference)
    return customer


@transaction.atomic(durable=True)
def customer_change(
    *, user: User, customer_id: int, name: str, account_tier: str, email_domains: list[str]
) -> Customer:
    """Change a customer's name, tier and domains (its reference is what runs name it by,
    and stays). Raises CustomerInvalid, PermissionDenied or Customer.DoesNotExist; audited
    with what changed."""
    _may_change(user)
    customer = Customer.objects.select_for_update().get(pk=customer_id)
    values = _checked(
        reference=customer.reference,
        name=name,
        account_tier=account_tier,
        email_domains=email_domains,
    )
    del values["reference"]
    changed = {k: v for k, v in values.items() if getattr(customer, k) != v}
    if changed:
        for field, value in changed.items():
            setattr(customer, field, value)
        customer.save(update_fields=list(changed))
        record_audit(
            None,
            AuditAction.CUSTOMER_CHANGED,
            actor=user,
            reference=customer.reference,
            changed=sorted(changed),
        )
    return customer


@transaction.atomic(durable=True)
def customers_load(*, path: Path) -> tuple[int, int]:
    """Create or update customers from a CSV (reference,name,account_tier,email_domains): all
    of the file or, on a bad row, none of it."""
    return customers_load_in_transaction(path=path)


def customers_load_in_transaction(*, path: Path) -> tuple[int, int]:
    """customers_load inside the caller's transaction: for a dry run that rolls back
    everything it did (the classifier evaluation)."""
    with path.open("rb") as handle:
        content = handle.read(MAX_FILE_BYTES + 1)
    return customers_import(content=content, source=str(path), user=None)


def customers_upload(*, user: User, content: bytes, source: str) -> tuple[int, int]:
    """customers_load for a file a person sent from the console: the same checks, all or
    nothing, recorded as theirs. Raises PermissionDenied or CustomerFileInvalid."""
    _may_change(user)
    with transaction.atomic(durable=True):
        return customers_import(content=content, source=source, user=user)


def customers_import(*, content: bytes, source: str, user: User | None) -> tuple[int, int]:
    """Create or update the customers of a CSV file, inside the caller's transaction. The
    whole file is checked first; any wrong row and nothing is written (CustomerFileInvalid
    names each with its line). Returns (created, updated)."""
    rows = _file_rows(content, source)
    existing = {c.reference: c for c in Customer.objects.filter(reference__in=list(rows))}
    new = [Customer(reference=ref, **values) for ref, values in rows.items() if ref not in existing]
    changed = []
    for reference, customer in existing.items():
        for field, value in rows[reference].items():
            setattr(customer, field, value)
        changed.append(customer)
    Customer.objects.bulk_create(new)
    Customer.objects.bulk_update(changed, ["name", "account_tier", "email_domains"])
    record_audit(
        None,
        AuditAction.CUSTOMERS_LOADED,
        actor=user,
        file=source[:200],
        created=len(new),
        updated=len(changed),
    )
    return len(new), len(changed)


def _file_rows(content: bytes, source: str) -> dict[str, dict[str, Any]]:
    """Each customer of the file by reference, checked; raises CustomerFileInvalid naming
    every wrong line."""
    if len(content) > MAX_FILE_BYTES:
        raise CustomerFileInvalid(
            source, [f"the file is larger than {MAX_FILE_BYTES // 1_000_000} MB: split it"]
        )
    try:
        text = content.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise CustomerFileInvalid(source, [f"not UTF-8 text (byte {exc.start})"]) from exc
    reader = csv.DictReader(io.StringIO(text, newline=""))
    missing = set(COLUMNS) - set(reader.fieldnames or [])
    if missing:
        raise CustomerFileInvalid(source, [f"missing columns {', '.join(sorted(missing))}"])
    rules = CustomerRules.active()
    rows: dict[str, dict[str, Any]] = {}
    problems: list[str] = []
    try:
        for row in reader:
            line = reader.line_num
            values = _row_values(row)
            said = customer_problems(**values, rules=rules)
            if values["reference"] in rows:
                said["reference"] = f"{values['reference']} is listed twice"
            if said:
                problems.append(f"line {line}: " + "; ".join(said.values()))
            else:
                rows[values["reference"]] = values
    except csv.Error as exc:
        problems.append(f"line {reader.line_num}: {exc}")
    if problems:
        raise CustomerFileInvalid(source, problems)
    for values in rows.values():
        del values["reference"]
    return rows


def _row_values(row: dict[str | Any, Any]) -> dict[str, Any]:
    def cell(name: str) -> str:
        value = row.get(name)
        return value.strip() if isinstance(value, str) else ""

    return {
        "reference": cell("reference").upper(),
        "name": cell("name"),
        "account_tier": cell("account_tier"),
        "email_domains": domains_read(cell("email_domains")),
    }
