"""The 403 page says which roles the account has and where its work is, and nothing about
what was asked for."""

from __future__ import annotations

import html
import re

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from django.urls import reverse

from accounts.roles import roles_ensure
from tests.conftest import Pipeline, decision_for, make_event

pytestmark = pytest.mark.django_db


def person(name: str, *groups: str) -> Client:
    roles_ensure()
    user = User.objects.create_user(name)
    user.groups.add(*Group.objects.filter(name__in=groups))
    client = Client()
    client.force_login(user)
    return client


def refusal(client: Client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 403
    text = html.unescape(re.sub(r"<[^>]+>", " ", response.content.decode()))
    return " ".join(text.split())


def test_an_approver_on_an_ops_page_is_told_their_role_and_sent_to_the_inbox() -> None:
    approver = person("ana", "finance-approvers")

    page = approver.get(reverse("queues:list"))

    assert page.status_code == 403
    text = refusal(approver, reverse("queues:list"))
    assert "does not have the role this page needs" not in text
    assert "This page is not part of your role" in text
    assert "signed in as ana" in text
    assert "Finance approver" in text
    assert "Decides amounts over a limit and changes of bank details." in text
    body = page.content.decode()
    assert f'<a href="{reverse("approvals:inbox")}">Your approvals inbox</a>' in body
    assert reverse("queues:list") + '"' not in body.split("<main>")[1]  # no way back in


def test_an_auditor_asked_to_change_policy_is_sent_to_the_queues_and_reports() -> None:
    auditor = person("ida", "auditors")

    page = auditor.get(reverse("policy:new"))

    assert page.status_code == 403
    body = page.content.decode()
    assert "Auditor" in body and "changes nothing" in body
    assert f'<a href="{reverse("queues:list")}">The queues</a>' in body
    assert f'<a href="{reverse("reports:dashboard")}">The reports</a>' in body


def test_the_refusal_names_nothing_of_the_run_asked_for(pipeline: Pipeline) -> None:
    event = make_event(event_id="evt-secret-7", subject="Merger talks with Northwind")
    run = pipeline.run(pipeline.submit(event, [decision_for(event)]))
    approver = person("ana", "security-approvers", "finance-approvers")

    text = refusal(approver, reverse("runs:run", args=[run.pk]))

    assert "Security approver" in text and "Finance approver" in text
    for secret in ("evt-secret-7", "Merger", "service_desk", "Service desk", f"#{run.pk}"):
        assert secret not in text


def test_an_account_without_a_role_is_told_so() -> None:
    nobody = person("nobody")

    text = refusal(nobody, reverse("queues:list"))

    assert "your account has no role yet" in text
    assert "What you can do instead" not in text
