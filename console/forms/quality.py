"""Forms of the QA review: a reviewer's correction, an ops lead's reconciliation."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from django import forms

from console.forms.ops import business_choices
from console.forms.text import FreeTextField
from policy.catalogue import Catalogue


class QACorrectionForm(forms.Form):
    """A reviewer's reading of a sampled run: the request types and effects of the catalogue
    the run was read under (`business`); the names are the values sent, a person chooses
    among their labels."""

    category = forms.ChoiceField()
    effect = forms.ChoiceField()
    note = FreeTextField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="what the request really asked for",
    )

    def __init__(self, *args: Any, business: Catalogue, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        fields: dict[str, Mapping[str, Any]] = {
            "category": business.request_types,
            "effect": business.effects,
        }
        for name, names in fields.items():
            cast(forms.ChoiceField, self.fields[name]).choices = business_choices(names)


class ReconcileForm(forms.Form):
    note = FreeTextField(
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="what was done about the effect that followed the wrong reading",
    )
