"""The API reference page for people: the OpenAPI document rendered, with curl commands that
work as printed."""

from __future__ import annotations

import html
import json
import re
import shlex
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from django.urls import reverse

from accounts.roles import roles_ensure
from automation.intake.services import api_token_create
from automation.models import IntakeChannel, Run
from automation.openapi import openapi_document

pytestmark = pytest.mark.django_db

PAGE = "/integrators/api/"


def page_text(client: Client) -> str:
    response = client.get(PAGE)
    assert response.status_code == 200
    return html.unescape(re.sub(r"<[^>]+>", "", response.content.decode()))


def test_the_page_is_public_like_the_document_it_renders(client: Client) -> None:
    assert reverse("integrators:api_reference") == PAGE
    assert client.get(PAGE).status_code == 200  # nobody signed in, no token
    assert client.post(PAGE).status_code == 405


def test_every_operation_answer_and_field_of_the_document_is_on_the_page(client: Client) -> None:
    raw = page_text(client)
    text = " ".join(raw.split())
    spec = openapi_document()

    def shown(words: str) -> bool:
        return " ".join(words.replace("`", "").split()) in text

    for path, methods in spec["paths"].items():
        for method, operation in methods.items():
            assert f"{method.upper()} {path}" in text
            assert shown(operation["summary"]) and shown(operation["description"])
            for status, answer in operation["responses"].items():
                assert shown(answer["description"]), (path, status)
    contract = spec["components"]["schemas"]["IntakeEvent"]
    for name, field in contract["properties"].items():
        assert name in text and shown(field["description"])
    assert "1 to 200 characters" in text and "one of web_form, partner_portal" in text
    for code in spec["components"]["schemas"]["Error"]["properties"]["error"]["oneOf"]:
        assert shown(f"{code['const']}: {code['description']}")
    assert shown(spec["components"]["securitySchemes"]["bearer"]["description"])
    assert "Authorization: Bearer <token>" in text
    assert '"run_page": "https://gatehouse.example.com/runs/123/"' in text  # an answer example
    assert '\n  "event_id": "crm-2026-000123",\n' in raw  # pretty-printed, as sent


def curls(client: Client) -> list[str]:
    raw = client.get(PAGE).content.decode()
    return [html.unescape(c) for c in re.findall(r'<pre class="code curl">(.*?)</pre>', raw, re.S)]


def run_curl(client: Client, command: str, token: str) -> Any:
    """What the shell would send for this command: continuation lines joined, the token read
    from the environment, a here-document as the body."""
    command, _, heredoc = command.partition("<<'MESSAGE'\n")
    args = shlex.split(command.replace("\\\n", " ").replace("$GATEHOUSE_TOKEN", token))
    assert args[0] == "curl"
    method, url, headers, data = "GET", "", {}, ""
    words = iter(args[1:])
    for word in words:
        if word == "-X":
            method = next(words)
        elif word == "-H":
            name, _, value = next(words).partition(": ")
            headers[name.lower()] = value
        elif word == "--data-binary":
            data = next(words)
            data = heredoc.removesuffix("MESSAGE") if data == "@-" else data
        else:
            url = word
    content_type = headers.pop("content-type", "")
    path = url.removeprefix("http://testserver")
    return client.generic(method, path, data, content_type=content_type, headers=headers)


def test_each_curl_command_on_the_page_does_what_it_says(
    client: Client, channel: IntakeChannel
) -> None:
    _, token = api_token_create(name="partner", channel=channel)
    json_curl, mail_curl, get_curl = curls(client)

    sent = run_curl(client, json_curl, token)
    mailed = run_curl(client, mail_curl, token)

    assert (sent.status_code, mailed.status_code) == (202, 202), (sent.content, mailed.content)
    assert Run.objects.get(pk=mailed.json()["run"]["id"]).event_id == "quote-2026-001@example.com"
    run_id = sent.json()["run"]["id"]
    detail = run_curl(client, get_curl.replace("/runs/123", f"/runs/{run_id}"), token)
    assert detail.status_code == 200
    assert (
        detail.json()["event_id"]
        == json.loads(
            re.search(r"--data-binary '(.*?)'", json_curl, re.S).group(1)  # type: ignore[union-attr]
        )["event_id"]
    )


def test_the_document_and_every_console_page_link_to_the_page(client: Client) -> None:
    roles_ensure()
    approver = User.objects.create_user("approver")
    approver.groups.add(Group.objects.get(name="security-approvers"))
    client.force_login(approver)

    inbox = client.get(reverse("approvals:inbox")).content.decode()

    assert f'href="{PAGE}"' in inbox
    assert f'href="{PAGE}"' in Client().get(reverse("login")).content.decode()
    assert client.get("/api/v1/openapi.json").json()["externalDocs"]["url"].endswith(PAGE)
