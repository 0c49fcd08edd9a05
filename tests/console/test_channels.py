"""Intake channels and their mailboxes in the console: a channel's reader is chosen from the
readers that exist, in words, its versions filled from the reader; every refusal is shown at
its field and changes nothing; a mailbox names its secrets by variable, never a server's own,
and only a superuser sets one up."""

from __future__ import annotations

import copy
import html
import re
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.contrib.auth.models import Group, User
from django.core.exceptions import PermissionDenied
from django.db import connection
from django.test import Client
from django.urls import reverse

from accounts.roles import roles_ensure
from audit.models import AuditEvent
from automation.classifiers.training import classifier_train
from automation.conf import setting
from automation.intake.channels import (
    ChannelSettings,
    SetupRefused,
    channel_change,
    channel_create,
    mailbox_set,
)
from automation.intake.models import ApiToken, IntakeChannel, Mailbox
from automation.runs.models import Run
from policy.models import PolicyVersion
from policy.services import parse_policy_text, policy_version_activate, policy_version_create
from tests.approvals.claims import CLAIMS, claims_channel
from tests.mailboxes import make_mailbox

NEW = reverse("setup:channel_new")
# Labelled mail of the tests' data: only for a trained model to exist.
LABELLED_MAIL = Path(__file__).resolve().parents[1] / "data" / "mail" / "labels.csv"
REFERENCE = Path(__file__).resolve().parents[2] / "policy" / "defaults" / "default-1.yaml"
LOCAL_WORDS = "Local reader: the cue words of the business, no model"


def client_of(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def lead(db: None) -> User:
    claims_channel("claims-api")  # the claims desk: its teams, its active version
    user = User.objects.create_user("lena")
    user.groups.add(Group.objects.get(name="ops-leads"))
    return user


@pytest.fixture
def root(db: None) -> User:
    return User.objects.create_superuser("root", "root@insurer.example", None)


def new_channel(**changes: Any) -> dict[str, Any]:
    return {
        "name": "claims-mail",
        "classifier": "heuristic",
        "policy_version": "",
        "max_classifier_attempts": "3",
        "shares_mail_identity": "on",
        **changes,
    }


def errors_at(page: str) -> dict[str, list[str]]:
    """Each field's errors, as the page shows them under the field."""
    found: dict[str, list[str]] = {}
    for block in re.split(r'data-testid="field-(?!error")', page)[1:]:
        name = block.split('"', 1)[0]
        messages = [
            html.unescape(part.split("</p>", 1)[0])
            for part in block.split('<p class="error" data-testid="field-error">')[1:]
        ]
        if messages:
            found[name] = messages
    return found


# --- adding a channel -----------------------------------------------------------------------------


def test_the_readers_are_offered_in_words_and_a_model_server_only_once_configured(
    lead: User, settings: Any
) -> None:
    page = html.unescape(client_of(lead).get(NEW).content.decode())

    assert LOCAL_WORDS in page
    assert "Recorded readings: answers written beforehand, for tests and the demo only" in page
    assert 'value="openai-compatible"' not in page and "Model server" not in page
    assert 'value="learned"' not in page  # no model is trained
    assert "The active one, whichever it is when a request is decided" in page

    settings.GATEHOUSE_OPENAI_CONFIGURED = True
    page = html.unescape(client_of(lead).get(NEW).content.decode())
    assert f"Model server: the model {setting('OPENAI_MODEL')} at" in page


def test_the_learned_reader_is_offered_once_a_model_is_trained_and_stamps_its_version(
    lead: User,
) -> None:
    # The sample mail's labels are the reference business's types: a model learns only the
    # active version's, so it is trained while that version is active, then the desk's again.
    desk = PolicyVersion.objects.get(is_active=True).name
    reference, _ = policy_version_create(document=parse_policy_text(REFERENCE.read_text()))
    policy_version_activate(name=reference.name)
    model = classifier_train(labels=[LABELLED_MAIL]).model
    policy_version_activate(name=desk)
    assert "Learned reader: a model trained" in html.unescape(
        client_of(lead).get(NEW).content.decode()
    )

    response = client_of(lead).post(NEW, new_channel(classifier="learned"))

    assert response.status_code == 302
    channel = IntakeChannel.objects.get(name="claims-mail")
    assert (channel.classifier, channel.classifier_version) == ("learned", model.version)


def test_an_ops_lead_adds_a_channel_with_a_reader_from_the_list(lead: User) -> None:
    response = client_of(lead).post(NEW, new_channel())

    assert response.status_code == 302 and response["Location"] == reverse("setup:checklist")
    channel = IntakeChannel.objects.get(name="claims-mail")
    assert (channel.classifier, channel.classifier_version) == ("heuristic", "heuristic-3")
    assert channel.prompt_version == setting("PROMPT_VERSION")
    assert channel.workflow_version == setting("WORKFLOW_VERSION")
    assert (channel.policy_version, channel.max_classifier_attempts) == ("", 3)
    assert channel.shares_mail_identity
    event = AuditEvent.objects.get(action="channel.created")
    assert event.actor == lead and event.data["channel"] == "claims-mail"
    assert event.data["reader"] == LOCAL_WORDS


def test_a_reader_not_in_the_list_is_refused_at_its_field(lead: User) -> None:
    response = client_of(lead).post(NEW, new_channel(classifier="openai-compatible"))

    assert response.status_code == 400
    assert list(errors_at(response.content.decode())) == ["classifier"]
    assert not IntakeChannel.objects.filter(name="claims-mail").exists()


def test_a_name_taken_or_not_a_slug_is_refused_at_the_name(lead: User) -> None:
    client = client_of(lead)
    taken = client.post(NEW, new_channel(name="claims-api"))
    bad = client.post(NEW, new_channel(name="claims mail!"))

    assert taken.status_code == bad.status_code == 400
    assert errors_at(taken.content.decode()) == {
        "name": ["there is a channel named claims-api already"]
    }
    assert list(errors_at(bad.content.decode())) == ["name"]
    assert IntakeChannel.objects.count() == 1


def test_tries_out_of_range_are_refused_at_their_field_and_the_form_keeps_the_rest(
    lead: User,
) -> None:
    response = client_of(lead).post(NEW, new_channel(max_classifier_attempts="40"))

    page = response.content.decode()
    assert list(errors_at(page)) == ["max_classifier_attempts"]
    assert 'value="claims-mail"' in page  # what was typed is still there
    assert not IntakeChannel.objects.filter(name="claims-mail").exists()


def test_a_draft_cannot_be_pinned_and_an_activated_version_can(lead: User) -> None:
    draft, _ = policy_version_create(document=parse_policy_text(_claims_draft_text()))
    client = client_of(lead)

    offered = client.get(NEW).content.decode()
    assert 'value="claims-1"' in offered and f'value="{draft.name}"' not in offered
    with pytest.raises(SetupRefused) as refused:
        channel_create(
            user=lead,
            name="claims-pinned",
            chosen=ChannelSettings("heuristic", draft.name, 3),
            shares_mail_identity=True,
        )
    assert refused.value.field == "policy_version" and "never activated" in refused.value.message

    response = client.post(NEW, new_channel(policy_version="claims-1"))
    assert response.status_code == 302
    assert IntakeChannel.objects.get(name="claims-mail").policy_version == "claims-1"


def _claims_draft_text() -> str:
    document = copy.deepcopy(CLAIMS)
    document["version"] = "claims-draft"
    return yaml.safe_dump(document)


def test_two_people_adding_one_name_at_once_get_one_channel_and_a_refusal(
    transactional_db: None,
) -> None:
    roles_ensure()
    lead = User.objects.create_user("lena")
    lead.groups.add(Group.objects.get(name="ops-leads"))
    results: list[str] = []
    start = threading.Barrier(2)

    def add() -> None:
        try:
            start.wait()
            channel_create(
                user=lead,
                name="claims-mail",
                chosen=ChannelSettings("heuristic", "", 3),
                shares_mail_identity=True,
            )
            results.append("added")
        except SetupRefused as refused:
            results.append(refused.code)
        finally:
            connection.close()

    threads = [threading.Thread(target=add) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(results) == ["added", "name_taken"]
    assert IntakeChannel.objects.filter(name="claims-mail").count() == 1


# --- changing a channel ---------------------------------------------------------------------------


def test_changing_the_reader_stamps_its_versions_and_keeps_name_and_identity(lead: User) -> None:
    channel = IntakeChannel.objects.get(name="claims-api")
    edit = reverse("setup:channel_edit", args=[channel.name])
    page = client_of(lead).get(edit).content.decode()
    form = page.split('data-testid="channel-form"', 1)[1].split("</form>", 1)[0]
    assert 'name="name"' not in form and 'name="shares_mail_identity"' not in form

    response = client_of(lead).post(
        edit, {"classifier": "heuristic", "policy_version": "", "max_classifier_attempts": "2"}
    )

    assert response.status_code == 302
    channel.refresh_from_db()
    assert (channel.name, channel.classifier) == ("claims-api", "heuristic")
    assert channel.classifier_version == "heuristic-3"
    assert channel.max_classifier_attempts == 2
    event = AuditEvent.objects.get(action="channel.changed")
    assert event.data["before"]["classifier_version"] == "recorded-classifier-1"
    assert event.data["after"]["classifier_version"] == "heuristic-3"


def test_a_reader_the_settings_name_for_the_channel_is_changed_there(
    lead: User, settings: Any
) -> None:
    settings.GATEHOUSE = {**settings.GATEHOUSE, "CHANNEL_CLASSIFIERS": {"claims-api": "recorded"}}
    channel = IntakeChannel.objects.get(name="claims-api")

    response = client_of(lead).post(
        reverse("setup:channel_edit", args=[channel.name]),
        {"classifier": "heuristic", "policy_version": "", "max_classifier_attempts": "3"},
    )

    assert response.status_code == 400
    assert "GATEHOUSE_CHANNEL_CLASSIFIERS" in errors_at(response.content.decode())["classifier"][0]
    channel.refresh_from_db()
    assert channel.classifier == "recorded"


def test_who_may_not_change_channels_is_refused_by_the_service_too(db: None) -> None:
    roles_ensure()
    approver = User.objects.create_user("ana")
    approver.groups.add(Group.objects.get(name="security-approvers"))

    assert client_of(approver).post(NEW, new_channel()).status_code == 403
    with pytest.raises(PermissionDenied):
        channel_create(
            user=approver,
            name="claims-mail",
            chosen=ChannelSettings("heuristic", "", 3),
            shares_mail_identity=True,
        )
    channel = claims_channel("claims-api")
    with pytest.raises(PermissionDenied):
        channel_change(
            user=approver, channel_id=channel.pk, chosen=ChannelSettings("heuristic", "", 3)
        )
    assert not IntakeChannel.objects.filter(name="claims-mail").exists()


# --- mailboxes ------------------------------------------------------------------------------------


def mailbox_values(**changes: Any) -> dict[str, Any]:
    return {
        "host": "imap.insurer.example",
        "port": "993",
        "security": "tls",
        "tls_ca_file": "",
        "username": "claims@insurer.example",
        "auth": "password",
        "secret_variable": "CLAIMS_IMAP_PASSWORD",
        "oauth_token_url": "",
        "oauth_client_id": "",
        "oauth_scope": "",
        "refresh_token_variable": "",
        "folder": "INBOX",
        "after_taking": "move",
        "processed_folder": "Processed",
        "rejected_folder": "Rejected",
        "sent_folder": "",
        "use_idle": "on",
        "poll_seconds": "60",
        **changes,
    }


def test_a_superuser_adds_a_channels_mailbox_naming_its_password_by_variable(root: User) -> None:
    channel = claims_channel("claims-mail")
    url = reverse("setup:mailbox", args=[channel.name])

    response = client_of(root).post(url, mailbox_values())

    assert response.status_code == 302
    box = Mailbox.objects.get(channel=channel)
    assert (box.host, box.username) == ("imap.insurer.example", "claims@insurer.example")
    assert box.secret_variable == "CLAIMS_IMAP_PASSWORD" and not box.from_settings
    event = AuditEvent.objects.get(action="mailbox.set")
    assert event.actor == root and event.data["secret_variable"] == "CLAIMS_IMAP_PASSWORD"

    changed = client_of(root).post(url, mailbox_values(folder="Claims", poll_seconds="30"))
    assert changed.status_code == 302
    box.refresh_from_db()
    assert (box.folder, box.poll_seconds) == ("Claims", 30)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("secret_variable", "GATEHOUSE_SECRET_KEY"),
        ("secret_variable", "DATABASE_URL"),
        ("refresh_token_variable", "PGPASSWORD"),
        ("secret_variable", "hunter2 is my password"),
    ],
)
def test_a_mailbox_may_not_name_a_server_variable_nor_a_value(
    root: User, field: str, value: str
) -> None:
    channel = claims_channel("claims-mail")

    response = client_of(root).post(
        reverse("setup:mailbox", args=[channel.name]), mailbox_values(**{field: value})
    )

    assert response.status_code == 400
    assert list(errors_at(response.content.decode())) == [field]
    assert not Mailbox.objects.exists()


def test_an_ops_lead_may_not_set_up_a_mailbox(lead: User) -> None:
    url = reverse("setup:mailbox", args=["claims-api"])

    assert client_of(lead).get(url).status_code == 403
    assert client_of(lead).post(url, mailbox_values()).status_code == 403
    assert not Mailbox.objects.exists()


def test_a_mailbox_from_the_settings_is_changed_there(root: User) -> None:
    box = make_mailbox("support", from_settings=True)
    url = reverse("setup:mailbox", args=["support"])

    assert "defined by the GATEHOUSE_MAILBOXES setting" in client_of(root).get(url).content.decode()
    response = client_of(root).post(url, mailbox_values(host="evil.example.net"))

    assert response.status_code == 400
    assert "GATEHOUSE_MAILBOXES" in errors_at(response.content.decode())["host"][0]
    box.refresh_from_db()
    assert box.host == "imap.example.com"


def test_the_mailbox_service_refuses_who_may_not_set_one_up(lead: User) -> None:
    channel = IntakeChannel.objects.get(name="claims-api")

    with pytest.raises(PermissionDenied):
        mailbox_set(user=lead, channel_id=channel.pk, values=mailbox_values())
    assert not Mailbox.objects.exists()


def test_two_superusers_adding_one_channels_mailbox_at_once_make_one(
    transactional_db: None,
) -> None:
    roots = [User.objects.create_superuser(f"root{n}", None, None) for n in (1, 2)]
    channel = IntakeChannel.objects.create(
        name="claims-mail", workflow_version="workflow-1", prompt_version="prompt-1"
    )
    folders: list[str] = []
    start = threading.Barrier(2)

    def add(user: User, folder: str) -> None:
        try:
            start.wait()
            values = {**mailbox_values(), "folder": folder, "use_idle": True, "port": 993}
            values["poll_seconds"] = 60
            mailbox_set(user=user, channel_id=channel.pk, values=values)
            folders.append(folder)
        finally:
            connection.close()

    threads = [
        threading.Thread(target=add, args=(u, f)) for u, f in zip(roots, ["A", "B"], strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(folders) == ["A", "B"]  # the second changed the one the first added
    box = Mailbox.objects.get(channel=channel)
    assert box.folder == folders[-1]


def test_a_channels_reply_addresses_are_set_in_the_console_and_a_line_break_is_refused(
    lead: User,
) -> None:
    client = client_of(lead)
    made = client.post(
        NEW,
        new_channel(
            reply_from="Claims desk <claims@insurer.example>",
            reply_to="claims-team@insurer.example",
        ),
    )
    assert made.status_code == 302
    channel = IntakeChannel.objects.get(name="claims-mail")
    assert (channel.reply_from, channel.reply_to) == (
        "Claims desk <claims@insurer.example>",
        "claims-team@insurer.example",
    )
    assert AuditEvent.objects.get(action="channel.created").data["reply_from"] == channel.reply_from

    edit = reverse("setup:channel_edit", args=["claims-mail"])
    injected = "claims@insurer.example\r\nBcc: everyone@elsewhere.example"
    refused = client.post(edit, {**new_channel(), "reply_from": injected})
    assert refused.status_code == 400
    assert list(errors_at(refused.content.decode())) == ["reply_from"]
    channel.refresh_from_db()
    assert channel.reply_from == "Claims desk <claims@insurer.example>"  # unchanged

    cleared = client.post(edit, {**new_channel(), "reply_from": "", "reply_to": ""})
    assert cleared.status_code == 302
    channel.refresh_from_db()
    assert (channel.reply_from, channel.reply_to) == ("", "")


# --- API tokens -----------------------------------------------------------------------------------


def send_mail_with(key: str, message_id: str) -> Any:
    message = (
        f"From: Dana <dana@household.example>\r\nTo: claims@insurer.example\r\n"
        f"Subject: Hail damage to our roof\r\nMessage-ID: <{message_id}>\r\n\r\n"
        "The storm last night broke tiles on our roof.\r\n"
    )
    return Client().post(
        "/api/v1/events",
        message.encode(),
        content_type="message/rfc822",
        headers={"authorization": f"Bearer {key}"},
    )


def test_an_ops_lead_issues_a_token_shown_once_that_takes_requests_and_then_revokes_it(
    lead: User,
) -> None:
    client = client_of(lead)
    assert client.post(NEW, new_channel()).status_code == 302
    issued = client.post(
        reverse("setup:token_new", args=["claims-mail"]), {"name": "claims-portal"}
    )

    assert issued.status_code == 200
    assert "no-store" in issued["Cache-Control"]  # the key is in this answer only
    key = re.search(r'data-testid="token-key" readonly value="([^"]+)"', issued.content.decode())
    assert key is not None
    token = ApiToken.objects.get(name="claims-portal")
    assert token.channel.name == "claims-mail" and token.is_active
    assert (
        key.group(1)
        not in client.get(reverse("setup:channel_edit", args=["claims-mail"])).content.decode()
    )
    event = AuditEvent.objects.get(action="api_token.issued")
    assert event.actor == lead and event.data == {
        "token": "claims-portal",
        "channel": "claims-mail",
    }
    assert key.group(1) not in str(event.data)

    # The key takes a request for the channel: an e-mail, as a mail gateway sends it.
    sent = send_mail_with(key.group(1), "portal-1@insurer.example")
    assert sent.status_code == 202, sent.content
    assert Run.objects.get(event_id="portal-1@insurer.example").channel.name == "claims-mail"

    revoke = reverse("setup:token_revoke", args=["claims-mail", token.pk])
    assert client.post(revoke).status_code == 302
    token.refresh_from_db()
    assert not token.is_active
    assert send_mail_with(key.group(1), "portal-2@insurer.example").status_code == 401


def test_a_token_name_taken_or_empty_is_refused_at_its_field_and_nothing_is_issued(
    lead: User,
) -> None:
    client = client_of(lead)
    client.post(NEW, new_channel())
    url = reverse("setup:token_new", args=["claims-mail"])
    assert client.post(url, {"name": "claims-portal"}).status_code == 200

    taken = client.post(url, {"name": "claims-portal"})
    empty = client.post(url, {"name": "  "})
    line_break = client.post(url, {"name": "portal\nBcc"})

    for refused in (taken, empty, line_break):
        assert refused.status_code == 400
        assert list(errors_at(refused.content.decode())) == ["name"]
    assert ApiToken.objects.count() == 1


def test_a_token_of_another_channel_is_not_revoked_through_this_one(lead: User) -> None:
    client = client_of(lead)
    client.post(NEW, new_channel())
    client.post(NEW, new_channel(name="partner-api"))
    client.post(reverse("setup:token_new", args=["partner-api"]), {"name": "partner"})
    token = ApiToken.objects.get(name="partner")

    answer = client.post(reverse("setup:token_revoke", args=["claims-mail", token.pk]))

    assert answer.status_code == 404
    token.refresh_from_db()
    assert token.is_active
