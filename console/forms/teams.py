"""The forms of the Teams and People pages (console/templates/teams): what a person typed,
read into plain values; the services (accounts.services) check the rest and refuse
at the field the form names."""

from __future__ import annotations

from django import forms

from accounts.roles import ROLES

ROLE_CHOICES = [(role.key, role.name) for role in ROLES.values()]


class TeamForm(forms.Form):
    """A new team: its name, what it is for, and its roles."""

    name = forms.CharField(max_length=150, label="Name")
    description = forms.CharField(
        max_length=1000, required=False, label="What the team does", widget=forms.Textarea
    )
    roles = forms.MultipleChoiceField(
        choices=ROLE_CHOICES, required=False, label="Roles", widget=forms.CheckboxSelectMultiple
    )


class TeamChangeForm(forms.Form):
    """A team's roles and description."""

    description = forms.CharField(
        max_length=1000, required=False, label="What the team does", widget=forms.Textarea
    )
    roles = forms.MultipleChoiceField(
        choices=ROLE_CHOICES, required=False, label="Roles", widget=forms.CheckboxSelectMultiple
    )


class MemberForm(forms.Form):
    """A person to put in the team, by username."""

    username = forms.CharField(max_length=150, label="Username")


class ProviderGroupsForm(forms.Form):
    """The company sign-in's groups that map to the team, one a line."""

    provider_groups = forms.CharField(
        max_length=12000, required=False, label="Sign-in groups", widget=forms.Textarea
    )

    def names(self) -> list[str]:
        return str(self.cleaned_data["provider_groups"]).splitlines()


class PersonChangeForm(forms.Form):
    """A person's name and e-mail address."""

    first_name = forms.CharField(max_length=150, required=False, label="First name")
    last_name = forms.CharField(max_length=150, required=False, label="Last name")
    email = forms.EmailField(max_length=254, required=False, label="E-mail address")


class PersonForm(PersonChangeForm):
    """A new person: a username, their name and address, and how they sign in."""

    username = forms.CharField(max_length=150, label="Username")
    password = forms.CharField(
        max_length=128,
        required=False,
        strip=False,
        label="Password",
        widget=forms.PasswordInput(render_value=False),
    )

    field_order = ["username", "first_name", "last_name", "email", "password"]
