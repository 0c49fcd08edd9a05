"""The customer forms: one customer added or changed, and a customer file uploaded.

They only read what was typed or sent; the checks that matter (how the business writes a
reference, its tiers) are the service's (automation.intake.customers), and what it refuses
is put back at the field it is about.
"""

from __future__ import annotations

from typing import Any

from django import forms

from automation.intake.customers import (
    MAX_DOMAINS,
    MAX_FILE_BYTES,
    NAME_LENGTH,
    REFERENCE_LENGTH,
    TIER_LENGTH,
    CustomerInvalid,
    domains_read,
)
from automation.intake.models import Customer

DOMAINS_HELP = (
    f"The e-mail domains the customer writes from, separated by commas or spaces, at most "
    f"{MAX_DOMAINS}: a message from one of them is theirs when it names no reference."
)


class CustomerForm(forms.Form):
    """A customer's reference (given once, when it is added), name, tier and domains."""

    reference = forms.CharField(label="Reference", max_length=REFERENCE_LENGTH)
    name = forms.CharField(label="Name", max_length=NAME_LENGTH)
    account_tier = forms.CharField(label="Account tier", max_length=TIER_LENGTH)
    email_domains = forms.CharField(
        label="E-mail domains", required=False, max_length=4000, help_text=DOMAINS_HELP
    )

    def __init__(
        self,
        *args: Any,
        tiers: list[str],
        pattern: str,
        customer: Customer | None = None,
        **kwargs: Any,
    ) -> None:
        if customer is not None:
            kwargs.setdefault(
                "initial",
                {
                    "reference": customer.reference,
                    "name": customer.name,
                    "account_tier": customer.account_tier,
                    "email_domains": ", ".join(customer.email_domains),
                },
            )
        super().__init__(*args, **kwargs)
        self.fields[
            "reference"
        ].help_text = f"As this business writes one (it matches {pattern} in full)."
        if customer is not None:
            # What runs name the customer by: kept as it is.
            self.fields["reference"].disabled = True
            self.fields["reference"].help_text = "What runs name this customer by: it stays."
        if tiers:
            current = customer.account_tier if customer is not None else ""
            choices = [("", "(choose a tier)")] + [(t, t) for t in tiers]
            if current and current not in tiers:
                choices.append((current, f"{current} (no tier of the active business)"))
            self.fields["account_tier"] = forms.ChoiceField(label="Account tier", choices=choices)
        self.fields["account_tier"].help_text = (
            "One of the tiers of the active business." if tiers else "The account's tier."
        )

    def domains(self) -> list[str]:
        return domains_read(self.cleaned_data.get("email_domains") or "")

    def refused(self, exc: CustomerInvalid) -> None:
        """The service's refusal, each problem at its field."""
        for field, message in exc.problems.items():
            self.add_error(
                field if field in self.fields else None, message[:1].upper() + message[1:] + "."
            )


class CustomerFileForm(forms.Form):
    """A CSV file as `manage.py load_customers` takes it."""

    file = forms.FileField(
        label="Customer file (CSV)",
        help_text=(
            "Columns reference, name, account_tier and email_domains (separated by ;), one "
            f"customer a line, at most {MAX_FILE_BYTES // 1_000_000} MB. A customer already "
            "listed is updated; the others are added. One wrong line and nothing is loaded."
        ),
    )

    file_name = ""

    def clean_file(self) -> bytes:
        upload = self.cleaned_data["file"]
        if upload.size is not None and upload.size > MAX_FILE_BYTES:
            raise forms.ValidationError(
                f"The file is larger than {MAX_FILE_BYTES // 1_000_000} MB: split it."
            )
        self.file_name = str(upload.name or "customers.csv")[:100]
        content: bytes = upload.read(MAX_FILE_BYTES + 1)
        return content
