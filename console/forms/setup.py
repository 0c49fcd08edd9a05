"""The forms of the setup pages: an intake channel (its reader chosen from the readers that
exist, in words) and a channel's mailbox. They carry input; the services
(automation.intake.channels) judge it and name the field of each refusal."""

from __future__ import annotations

from typing import Any, cast

from django import forms

from automation.classifiers.readers import reader_words, readers_available
from automation.intake.channels import MOST_ATTEMPTS, TOKEN_NAME_LIMIT, ChannelSettings
from automation.intake.models import IntakeChannel, Mailbox
from console.admin.intake import MailboxForm as AdminMailboxForm
from core.addresses import MAX_ADDRESS
from core.inputs import NumberField
from policy.models import PolicyVersion

ACTIVE_ONE = ""  # the policy version choice: the version active when a run is decided


def reader_choices(current: str | None) -> list[tuple[str, str]]:
    """The readers offered here, and the channel's own reader even if it no longer is."""
    choices = [(reader.name, reader.words) for reader in readers_available()]
    if current and current not in dict(choices):
        choices.append((current, f"{reader_words(current)} (as it is now; not offered here)"))
    return choices


def version_choices(current: str) -> list[tuple[str, str]]:
    """The active one, then the versions that have been active (newest first)."""
    versions = PolicyVersion.objects.exclude(is_active=False, activated_at=None).order_by(
        "-created_at"
    )
    choices = [(ACTIVE_ONE, "The active one, whichever it is when a request is decided")]
    choices += [
        (v.name, f"{v.name} (active now)" if v.is_active else f"{v.name} (active before)")
        for v in versions[:200]
    ]
    if current and current not in dict(choices):
        choices.append((current, f"{current} (as it is now)"))
    return choices


class ChannelForm(forms.Form):
    """A channel: on a new one, its name and whether it takes real mail too."""

    name = forms.SlugField(
        max_length=100,
        label="Name",
        help_text="Letters, digits, - and _; for example claims-mail. It cannot change later.",
    )
    classifier = forms.ChoiceField(
        label="How it reads requests", widget=forms.RadioSelect, choices=[]
    )
    policy_version = forms.ChoiceField(label="Policy version", required=False, choices=[])
    max_classifier_attempts = NumberField(
        label="Tries to read a request",
        min_value=1,
        max_value=MOST_ATTEMPTS,
        initial=3,
        help_text="Before the request goes to a person.",
    )
    reply_from = forms.CharField(
        label="Replies are from",
        required=False,
        max_length=MAX_ADDRESS,
        help_text="For example Claims desk <claims@example.com>. Empty: the server's address. "
        "An e-mail reply effect may name its own.",
    )
    reply_to = forms.CharField(
        label="Answers to replies go to",
        required=False,
        max_length=MAX_ADDRESS,
        help_text="The Reply-To of the channel's replies. Empty: none.",
    )
    shares_mail_identity = forms.BooleanField(
        label="Takes real mail: a message another mail channel already took in is the same "
        "request here",
        required=False,
        initial=True,
        help_text="Leave it ticked unless the channel is a sandbox. It cannot change later.",
    )

    def __init__(self, *args: Any, channel: IntakeChannel | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.channel = channel
        field = cast(forms.ChoiceField, self.fields["classifier"])
        field.choices = reader_choices(channel.classifier if channel else None)
        versions = cast(forms.ChoiceField, self.fields["policy_version"])
        versions.choices = version_choices(channel.policy_version if channel else "")
        if channel is not None:  # what makes a request's identity never changes
            del self.fields["name"]
            del self.fields["shares_mail_identity"]
            self.initial.update(
                classifier=channel.classifier,
                policy_version=channel.policy_version,
                max_classifier_attempts=channel.max_classifier_attempts,
                reply_from=channel.reply_from,
                reply_to=channel.reply_to,
            )
        elif field.choices:
            self.initial.setdefault("classifier", field.choices[0][0])

    def chosen(self) -> ChannelSettings:
        data = self.cleaned_data
        return ChannelSettings(
            classifier=data["classifier"],
            policy_version=data["policy_version"],
            max_classifier_attempts=data["max_classifier_attempts"],
            reply_from=data["reply_from"].strip(),
            reply_to=data["reply_to"].strip(),
        )


class MailboxForm(AdminMailboxForm):
    """A channel's mailbox: the admin's fields, the channel being the page's."""

    class Meta(AdminMailboxForm.Meta):
        model = Mailbox
        fields = [name for name in AdminMailboxForm.Meta.fields if name != "channel"]

    def values(self) -> dict[str, Any]:
        return {name: self.cleaned_data[name] for name in self.Meta.fields}


class TokenForm(forms.Form):
    """A new API token for a channel, named for the integration that will use it."""

    name = forms.CharField(
        label="Who uses it",
        max_length=TOKEN_NAME_LIMIT,
        help_text="A name for the integration, for example claims-portal. The key is shown once.",
    )
