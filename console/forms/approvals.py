from __future__ import annotations

from typing import Any

from django import forms

from approvals.binding import Binding
from console.forms.text import FreeTextField
from core.inputs import ID_DIGITS, BoundedDateTimeField, NumberField


class DecisionForm(forms.Form):
    """Approve, reject or send back, carrying the exact binding the approver was shown."""

    decision = forms.ChoiceField(
        choices=[("approve", "Approve"), ("reject", "Reject"), ("send_back", "Send back")]
    )
    comment = FreeTextField(required=False, widget=forms.Textarea)
    seen_fingerprint = forms.CharField(max_length=64, widget=forms.HiddenInput)
    seen_workflow_version = forms.CharField(max_length=100, widget=forms.HiddenInput)
    seen_policy_version = forms.CharField(max_length=100, widget=forms.HiddenInput)
    seen_effect = forms.CharField(max_length=50, widget=forms.HiddenInput)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("decision") == "reject" and not (data.get("comment") or "").strip():
            self.add_error("comment", "Say why you reject it: the comment goes on the record.")
        if data.get("decision") == "send_back" and not (data.get("comment") or "").strip():
            self.add_error(
                "comment", "Say what is wrong with the reading: the ops team corrects it."
            )
        return data

    @property
    def seen(self) -> Binding:
        return Binding(
            fingerprint=self.cleaned_data["seen_fingerprint"],
            workflow_version=self.cleaned_data["seen_workflow_version"],
            policy_version=self.cleaned_data["seen_policy_version"],
            effect=self.cleaned_data["seen_effect"],
        )


class DelegationForm(forms.Form):
    """Out of office (console/templates/me/delegation.html): who decides for me, and the
    window, each end a bounded date and time; the service checks the rest (who may be given
    it, an end after the start, the reason's length)."""

    delegate = NumberField(
        min_value=1,
        max_value=10**ID_DIGITS - 1,
        label="Who decides for me",
        error_messages=dict.fromkeys(
            ("required", "invalid", "min_value", "max_value"), "Choose a person."
        ),
    )
    starts_at = BoundedDateTimeField(label="From")
    ends_at = BoundedDateTimeField(label="Until")
    reason = forms.CharField(required=False, strip=False, label="Why")
