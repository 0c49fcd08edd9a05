"""The setup pages (`setup:*`, under /setup/): what the install still lacks, and the intake
channels with their mailboxes, added and changed here instead of in the admin."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.core.exceptions import PermissionDenied
from django.forms import BaseForm
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from automation.classifiers.readers import reader_words
from automation.intake.channels import (
    ADD_MAILBOX,
    CHANGE_CHANNEL,
    CHANGE_MAILBOX,
    CHANGE_TOKEN,
    SetupRefused,
    api_token_issue,
    channel_change,
    channel_create,
    mailbox_set,
)
from automation.intake.models import ApiToken, IntakeChannel, Mailbox
from automation.intake.selectors import channels_for_setup
from automation.intake.services import api_tokens_revoke
from console.forms.setup import ChannelForm, MailboxForm, TokenForm
from console.setup import setup_steps
from core.http import AuthenticatedHttpRequest


@require_GET
@login_required
@permission_required(CHANGE_CHANNEL, raise_exception=True)
def checklist(request: AuthenticatedHttpRequest) -> HttpResponse:
    steps = setup_steps()
    missing = [step for step in steps if step.missing]
    return render(request, "setup/checklist.html", {"steps": steps, "missing": missing})


@require_GET
@login_required
@permission_required(CHANGE_CHANNEL, raise_exception=True)
def channels(request: AuthenticatedHttpRequest) -> HttpResponse:
    rows = [(channel, reader_words(channel.classifier)) for channel in channels_for_setup()]
    return render(request, "setup/channels.html", {"rows": rows})


def _refused_at(form: BaseForm, refused: SetupRefused) -> None:
    form.add_error(refused.field if refused.field in form.fields else None, refused.message)


@require_http_methods(["GET", "POST"])
@login_required
@permission_required(CHANGE_CHANNEL, raise_exception=True)
def channel_new(request: AuthenticatedHttpRequest) -> HttpResponse:
    form = ChannelForm(request.POST if request.method == "POST" else None)
    if form.is_bound and form.is_valid():
        try:
            channel = channel_create(
                user=request.user,
                name=form.cleaned_data["name"],
                chosen=form.chosen(),
                shares_mail_identity=form.cleaned_data["shares_mail_identity"],
            )
        except SetupRefused as refused:
            _refused_at(form, refused)
        else:
            messages.success(request, f"Added the channel {channel.name}.")
            return redirect("setup:checklist")
    status = 400 if form.is_bound else 200
    return render(request, "setup/channel.html", {"form": form, "channel": None}, status=status)


@require_http_methods(["GET", "POST"])
@login_required
@permission_required(CHANGE_CHANNEL, raise_exception=True)
def channel_edit(request: AuthenticatedHttpRequest, name: str) -> HttpResponse:
    channel = get_object_or_404(IntakeChannel, name=name)
    form = ChannelForm(request.POST if request.method == "POST" else None, channel=channel)
    if form.is_bound and form.is_valid():
        try:
            channel_change(user=request.user, channel_id=channel.pk, chosen=form.chosen())
        except SetupRefused as refused:
            _refused_at(form, refused)
        else:
            messages.success(request, f"Saved the channel {channel.name}.")
            return redirect("setup:channels")
    status = 400 if form.is_bound else 200
    return _channel_page(request, channel, form, TokenForm(), status=status)


def _channel_page(
    request: AuthenticatedHttpRequest,
    channel: IntakeChannel,
    form: ChannelForm,
    token_form: TokenForm,
    *,
    status: int,
) -> HttpResponse:
    tokens = ApiToken.objects.filter(channel=channel).order_by("-is_active", "name")[:200]
    context = {"form": form, "channel": channel, "token_form": token_form, "tokens": tokens}
    return render(request, "setup/channel.html", context, status=status)


@require_POST
@never_cache  # the answer holds the key, shown once: no cache keeps it
@login_required
@permission_required(CHANGE_TOKEN, raise_exception=True)
def token_new(request: AuthenticatedHttpRequest, name: str) -> HttpResponse:
    """Issue a token for the channel; the page that answers shows its key, once."""
    channel = get_object_or_404(IntakeChannel, name=name)
    token_form = TokenForm(request.POST)
    if token_form.is_valid():
        try:
            token, key = api_token_issue(
                user=request.user, channel_id=channel.pk, name=token_form.cleaned_data["name"]
            )
        except SetupRefused as refused:
            _refused_at(token_form, refused)
        else:
            return render(
                request, "setup/token.html", {"channel": channel, "token": token, "key": key}
            )
    return _channel_page(request, channel, ChannelForm(channel=channel), token_form, status=400)


@require_POST
@login_required
@permission_required(CHANGE_TOKEN, raise_exception=True)
def token_revoke(request: AuthenticatedHttpRequest, name: str, token_id: int) -> HttpResponse:
    token = get_object_or_404(ApiToken, pk=token_id, channel__name=name)
    if api_tokens_revoke(token_ids=[token.pk], user=request.user):
        messages.success(
            request, f"Revoked the token {token.name}: its key is refused from now on."
        )
    return redirect("setup:channel_edit", name=name)


@require_http_methods(["GET", "POST"])
@login_required
def mailbox(request: AuthenticatedHttpRequest, name: str) -> HttpResponse:
    """A channel's mailbox: its settings are the NAMES of the variables holding its secrets.
    Only who may add (or change) mailboxes, a superuser by default: the watcher sends the
    named variable's value to the mailbox's host."""
    channel = get_object_or_404(IntakeChannel, name=name)
    box = Mailbox.objects.filter(channel=channel).first()
    if not request.user.has_perm(ADD_MAILBOX if box is None else CHANGE_MAILBOX):
        raise PermissionDenied("a mailbox is set up by a superuser")
    data = request.POST if request.method == "POST" else None
    form = MailboxForm(data, instance=box or Mailbox(channel=channel))
    if form.is_bound and form.is_valid():
        try:
            mailbox_set(user=request.user, channel_id=channel.pk, values=form.values())
        except SetupRefused as refused:
            _refused_at(form, refused)
        else:
            messages.success(request, f"Saved the mailbox of {channel.name}.")
            return redirect("setup:channels")
    status = 400 if form.is_bound else 200
    context = {"form": form, "channel": channel, "box": box}
    return render(request, "setup/mailbox.html", context, status=status)
