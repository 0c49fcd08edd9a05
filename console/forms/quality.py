"""Forms of the QA review: a reviewer's correction, an ops lead's reconciliation."""

from __future__ import annotations

from django import forms

from automation.schemas import EffectName, RequestType
from console.forms.text import FreeTextField
from console.vocabulary import Kind, label


class QACorrectionForm(forms.Form):
    # The codes are the values sent; a person chooses among their labels.
    category = forms.ChoiceField(
        choices=[(m.value, label(Kind.CATEGORY, m.value)) for m in RequestType]
    )
    effect = forms.ChoiceField(choices=[(m.value, label(Kind.EFFECT, m.value)) for m in EffectName])
    note = FreeTextField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="what the request really asked for",
    )


class ReconcileForm(forms.Form):
    note = FreeTextField(
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="what was done about the effect that followed the wrong reading",
    )
