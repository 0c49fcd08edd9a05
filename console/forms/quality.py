"""Forms of the QA review: a reviewer's correction, an ops lead's reconciliation."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from django import forms

from automation.classifiers.labelled import MAX_UPLOAD_BYTES
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


class LabelledSetUploadForm(forms.Form):
    """A labelled set as one .zip: labels.csv and the .eml files its rows name."""

    name = forms.CharField(max_length=100, help_text="how the set is listed, e.g. claims-march")
    upload = forms.FileField(
        label="Labelled set (.zip)",
        help_text="a .zip holding labels.csv (file, category, effect, expected_intake) and "
        "the .eml files it names; customers.csv beside it is used when measuring",
    )

    def clean_upload(self) -> Any:
        upload = self.cleaned_data["upload"]
        if upload.size > MAX_UPLOAD_BYTES:  # refused before a byte of it is read
            raise forms.ValidationError(
                f"the upload is larger than {MAX_UPLOAD_BYTES // (1024 * 1024)} MB"
            )
        return upload


class EvaluateForm(forms.Form):
    classifier = forms.ChoiceField(label="Reader")

    def __init__(self, *args: Any, readers: list[tuple[str, str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cast(forms.ChoiceField, self.fields["classifier"]).choices = readers


class TrainForm(forms.Form):
    channel = forms.ChoiceField(label="Put it in shadow on the channel")
    people = forms.BooleanField(
        required=False, label="Learn from the labels people gave as well (QA, corrections)"
    )

    def __init__(self, *args: Any, channels: list[tuple[str, str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cast(forms.ChoiceField, self.fields["channel"]).choices = channels
