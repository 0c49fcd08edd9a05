"""What an effect may send and where (core/egress.py), against a real receiver on 127.0.0.1
(tests/downstream.py): only secrets declared for effects and never the server's, only to
addresses the settings allow, header values as written. Checked when a catalogue is saved,
with its place named, and again at every delivery, so a version written straight into the
table still sends nothing: the attempt is not sent, the run waits for a person."""

from __future__ import annotations

import html
import os
import socket
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from django.contrib.auth.models import Group, User
from django.test import Client
from django.urls import reverse
from pydantic import ValidationError

from accounts.roles import roles_ensure
from automation.effects.services import effect_retry_in_transaction
from automation.models import (
    AuditEvent,
    DeliveryResult,
    Effect,
    EffectAttempt,
    EffectStatus,
    Outcome,
    Run,
    State,
)
from policy.models import PolicyVersion
from policy.services import PolicyError, policy_version_create
from tests.automation.conftest import SettingsWrapper
from tests.catalogues import (
    SIGNING_VARIABLE,
    activate_effects,
    force_effects,
    http_effect,
    with_effects,
)
from tests.conftest import Pipeline, decision_for, make_event
from tests.downstream import Downstream, running_downstream

SECRET = "e" * 32
EFFECT = "create_follow_up"
PLACE = f"catalogue.effects.{EFFECT}.http"
# The server's own secrets, as the attacker of issue 45 named them in a catalogue.
SERVER_HEADERS = {
    "X-Key": "GATEHOUSE_SECRET_KEY",
    "X-Database": "DATABASE_URL",
    "X-Sign-In": "GATEHOUSE_OIDC_CLIENT_SECRET",
}


@pytest.fixture
def server_secrets(monkeypatch: pytest.MonkeyPatch, settings: SettingsWrapper) -> list[str]:
    """The server's secrets are set, and (by mistake) listed as declared for effects too."""
    values = {
        "GATEHOUSE_SECRET_KEY": "server-key-that-must-never-leave",
        "DATABASE_URL": os.environ.get("DATABASE_URL") or "postgres://gh:db-password@db/gh",
        "GATEHOUSE_OIDC_CLIENT_SECRET": "oidc-client-secret-that-must-never-leave",
    }
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    settings.GATEHOUSE_EFFECT_SECRETS = settings.GATEHOUSE_EFFECT_SECRETS | set(values)
    return list(values.values())


@pytest.fixture
def downstream(monkeypatch: pytest.MonkeyPatch) -> Iterator[Downstream]:
    monkeypatch.setenv(SIGNING_VARIABLE, SECRET)
    with running_downstream(SECRET) as server:
        yield server


@pytest.fixture
def private_hosts_refused(settings: SettingsWrapper) -> None:
    """Production's default: no internal address is allowed."""
    settings.GATEHOUSE_EFFECT_PRIVATE_HOSTS = []


def sending(url: str, **http: Any) -> dict[str, dict[str, Any]]:
    return {EFFECT: http_effect(url, **http)}


def secret_headers(names: dict[str, str]) -> dict[str, Any]:
    return {"headers": {header: {"secret": name} for header, name in names.items()}}


def submit(pipeline: Pipeline, event_id: str = "evt-egress") -> tuple[Run, Effect]:
    sent = make_event(event_id=event_id)
    run = pipeline.run(pipeline.submit(sent, [decision_for(sent)]))
    return run, Effect.objects.get(run=run)


def refusal_at_save(effects: dict[str, dict[str, Any]]) -> str:
    """What storing a version with these effects says (through the service every save uses)."""
    roles_ensure()
    versions = PolicyVersion.objects.count()
    with pytest.raises(PolicyError) as refused:
        policy_version_create(document=with_effects(effects, checked=False))
    assert PolicyVersion.objects.count() == versions
    return refused.value.message


def assert_not_sent(run: Run, effect: Effect, downstream: Downstream, *hidden: str) -> str:
    """Nothing reached the receiver; the attempt is NOT_SENT (a definite failure, never
    uncertain); the run waits for a person; no value in `hidden` is kept anywhere."""
    run.refresh_from_db()
    effect.refresh_from_db()
    assert downstream.requests == []
    assert (run.state, run.outcome) == (State.NEEDS_REVIEW, Outcome.EFFECT_UNAVAILABLE)
    assert (effect.status, effect.next_attempt_at) == (EffectStatus.RETRY_WAIT, None)
    (attempt,) = EffectAttempt.objects.filter(effect=effect)
    assert attempt.outcome == DeliveryResult.NOT_SENT
    kept = [effect.last_error, attempt.detail, str(effect.payload)]
    kept += [str(row.data) for row in AuditEvent.objects.filter(run=run)]
    for value in hidden:
        assert not any(value in text for text in kept), value
    return attempt.detail


# --- secrets ----------------------------------------------------------------------------------


def test_the_server_s_secrets_are_refused_in_the_yaml_editor_with_their_place(
    policy: None, server_secrets: list[str]
) -> None:
    roles_ensure()
    lead = User.objects.create_user("lee")
    lead.groups.add(Group.objects.get(name="ops-leads"))
    client = Client()
    client.force_login(lead)
    document = with_effects(sending("https://helpdesk.example.com/api")).stored()
    effect = document["catalogue"]["effects"][EFFECT]
    effect["http"]["headers"] = {h: {"secret": n} for h, n in SERVER_HEADERS.items()}

    response = client.post(reverse("policy:new"), {"document": yaml.safe_dump(document)})

    assert response.status_code == 400
    page = html.unescape(response.content.decode())
    for header, name in SERVER_HEADERS.items():
        assert f"{PLACE}.headers.{header}" in page
        assert f"{name} is a setting of the Gatehouse server itself" in page
    assert not PolicyVersion.objects.filter(name=document["version"]).exists()


def test_the_server_s_secrets_are_refused_by_every_save_even_when_listed(
    policy: None, server_secrets: list[str], downstream: Downstream
) -> None:
    message = refusal_at_save(sending(downstream.url, **secret_headers(SERVER_HEADERS)))

    for header, name in SERVER_HEADERS.items():
        assert f"{PLACE}.headers.{header}: {name} is a setting of the Gatehouse server" in message
    for value in server_secrets:
        assert value not in message
    signing = sending(downstream.url)
    signing[EFFECT]["http"]["signing"] = {"secret": "GATEHOUSE_SECRET_KEY"}
    assert f"{PLACE}.signing: GATEHOUSE_SECRET_KEY is a setting" in refusal_at_save(signing)


def test_a_version_forced_past_save_never_sends_the_server_s_secrets(
    pipeline: Pipeline, server_secrets: list[str], downstream: Downstream
) -> None:
    force_effects(sending(downstream.url, **secret_headers(SERVER_HEADERS)))

    run, effect = submit(pipeline)

    detail = assert_not_sent(run, effect, downstream, *server_secrets)
    assert "is a setting of the Gatehouse server itself" in detail


def test_a_version_forced_past_save_never_signs_with_the_server_s_key(
    pipeline: Pipeline, server_secrets: list[str], downstream: Downstream
) -> None:
    effect = http_effect(downstream.url)
    effect["http"]["signing"] = {"secret": "GATEHOUSE_SECRET_KEY"}
    force_effects({EFFECT: effect})

    run, written = submit(pipeline)

    assert_not_sent(run, written, downstream, *server_secrets)


def test_a_declared_secret_is_sent_and_an_undeclared_one_is_not(
    pipeline: Pipeline,
    downstream: Downstream,
    monkeypatch: pytest.MonkeyPatch,
    settings: SettingsWrapper,
    recoverer: User,
) -> None:
    monkeypatch.setenv("HELPDESK_TOKEN", "Bearer helpdesk-1")
    monkeypatch.setenv("OTHER_SYSTEMS_TOKEN", "Bearer other-1")
    assert "HELPDESK_TOKEN" in settings.GATEHOUSE_EFFECT_SECRETS
    undeclared = secret_headers({"Authorization": "OTHER_SYSTEMS_TOKEN"})
    message = refusal_at_save(sending(downstream.url, **undeclared))
    assert f"{PLACE}.headers.Authorization: OTHER_SYSTEMS_TOKEN is not a secret declared" in (
        message
    )
    activate_effects(sending(downstream.url, **secret_headers({"Authorization": "HELPDESK_TOKEN"})))

    submit(pipeline, "evt-declared")

    (received,) = downstream.requests
    assert received.headers["Authorization"] == "Bearer helpdesk-1"
    assert received.signature_valid

    # Declared when the version was saved, no longer when it is delivered: not sent, held;
    # declared again, a retry sends it.
    settings.GATEHOUSE_EFFECT_SECRETS = settings.GATEHOUSE_EFFECT_SECRETS - {"HELPDESK_TOKEN"}
    downstream.requests.clear()
    run, effect = submit(pipeline, "evt-undeclared")
    assert "HELPDESK_TOKEN is not a secret declared" in assert_not_sent(
        run, effect, downstream, "helpdesk-1"
    )
    settings.GATEHOUSE_EFFECT_SECRETS = settings.GATEHOUSE_EFFECT_SECRETS | {"HELPDESK_TOKEN"}
    with pipeline.capture():
        effect_retry_in_transaction(run_id=run.pk, user=recoverer, reason="token declared")
    pipeline.drain()
    assert [r.headers["Authorization"] for r in downstream.requests] == ["Bearer helpdesk-1"]


# --- addresses --------------------------------------------------------------------------------

INTERNAL = {
    "http://127.0.0.1:8000/hook": "127.0.0.1 is a loopback address",
    "http://[::1]/hook": "::1 is a loopback address",
    "http://2130706433/hook": "2130706433 (127.0.0.1) is a loopback address",
    "http://0x7f.1/hook": "0x7f.1 (127.0.0.1) is a loopback address",
    "http://[::ffff:127.0.0.1]/hook": "::ffff:127.0.0.1 is a loopback address",
    "http://localhost:9000/hook": "localhost (127.0.0.1) is a loopback address",
    "http://169.254.169.254/latest/meta-data/": "169.254.169.254 is a link-local address",
    "http://[fe80::1]/hook": "fe80::1 is a link-local address",
    "http://10.1.2.3/hook": "10.1.2.3 is a private address",
    "http://192.168.0.10/hook": "192.168.0.10 is a private address",
    "http://100.64.0.1/hook": "100.64.0.1 is a non-public address",
    "http://0.0.0.0/hook": "0.0.0.0 is an unspecified address",
    "http://224.0.0.1/hook": "224.0.0.1 is a multicast address",
    "http://[2002:7f00:1::]/hook": "2002:7f00:1:: is a loopback address",  # 6to4
    "http://[64:ff9b::a9fe:a9fe]/hook": "64:ff9b::a9fe:a9fe is a link-local address",  # NAT64
}


@pytest.mark.parametrize("url", INTERNAL)
def test_an_internal_address_in_any_form_is_refused_at_save(
    policy: None, private_hosts_refused: None, url: str
) -> None:
    message = refusal_at_save(sending(url))

    assert f"{PLACE}.url: {INTERNAL[url]}" in message
    assert "GATEHOUSE_EFFECT_PRIVATE_HOSTS" in message


def test_a_host_name_no_lookup_can_be_made_of_is_refused_at_save(policy: None) -> None:
    message = refusal_at_save(sending(f"https://{'a' * 64}.example/hook"))

    assert f"{PLACE}.url: the address's host name cannot be looked up" in message


def test_an_internal_address_is_refused_by_the_catalogue_check_too(
    policy: None, private_hosts_refused: None
) -> None:
    with pytest.raises(ValidationError) as refused:
        with_effects(sending("http://[::1]:8080/hook"))
    assert "::1 is a loopback address" in str(refused.value)


def test_a_version_forced_past_save_never_reaches_an_internal_address(
    pipeline: Pipeline, downstream: Downstream, private_hosts_refused: None
) -> None:
    force_effects(sending(downstream.url.replace("127.0.0.1", "localhost")))

    run, effect = submit(pipeline)

    assert "localhost (127.0.0.1) is a loopback address" in assert_not_sent(run, effect, downstream)


def test_the_operator_allows_an_internal_host_by_name_and_port(
    pipeline: Pipeline, downstream: Downstream, settings: SettingsWrapper
) -> None:
    port = downstream.url.split(":")[2].split("/")[0]
    url = downstream.url.replace("127.0.0.1", "localhost")
    settings.GATEHOUSE_EFFECT_PRIVATE_HOSTS = [f"localhost:{int(port) + 1}"]
    assert "is a loopback address" in refusal_at_save(sending(url))

    settings.GATEHOUSE_EFFECT_PRIVATE_HOSTS = [f"localhost:{port}"]
    activate_effects(sending(url))
    submit(pipeline)

    (received,) = downstream.requests
    assert received.signature_valid
    assert received.headers["Host"] == f"localhost:{port}"


@pytest.mark.parametrize(
    ("allowed", "url", "refused"),
    [
        (["10.20.0.0/16"], "http://10.20.3.4/hook", False),
        (["10.20.0.0/16"], "http://10.21.3.4/hook", True),
        (["*"], "http://169.254.169.254/hook", False),
        (["helpdesk.internal"], "http://10.20.3.4/hook", True),  # a name allows that name only
        (["127.0.0.0/8"], "http://[::ffff:127.0.0.1]:8000/hook", False),  # its IPv6 form too
    ],
)
def test_the_allow_list_takes_networks_names_or_everything(
    policy: None, settings: SettingsWrapper, allowed: list[str], url: str, refused: bool
) -> None:
    settings.GATEHOUSE_EFFECT_PRIVATE_HOSTS = allowed
    if refused:
        assert "GATEHOUSE_EFFECT_PRIVATE_HOSTS" in refusal_at_save(sending(url))
    else:
        roles_ensure()
        version, _ = policy_version_create(document=with_effects(sending(url)))
        assert version.parsed.business.effects[EFFECT].http is not None


def test_the_connection_goes_to_the_address_checked_never_to_a_second_lookup(
    pipeline: Pipeline, downstream: Downstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DNS rebinding: a name answers a public address to the check, then loopback. The
    delivery connects to the address it checked, so the loopback receiver never hears it."""
    real = socket.getaddrinfo
    asked: list[str] = []

    def rebinding(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host != "rebind.example":
            return real(host, port, *args, **kwargs)
        asked.append(host)
        return real("93.184.216.34" if len(asked) == 1 else "127.0.0.1", port, *args, **kwargs)

    port = downstream.url.split(":")[2].split("/")[0]
    # Saved while the name does not resolve: left to the delivery to check.
    activate_effects(
        sending(f"http://rebind.example:{port}/effects", connect_timeout=0.5, max_attempts=1)
    )
    monkeypatch.setattr(socket, "getaddrinfo", rebinding)

    submit(pipeline)

    assert asked == ["rebind.example"]
    assert downstream.requests == []


# --- header values ----------------------------------------------------------------------------

BAD_VALUES = {
    "a\r\nX-Injected: yes": "a header value cannot hold a line break",
    "caf\u00e9": "a header value is ASCII text",
    "{{ run.subject }}": "a header value is sent as written, not rendered as a template",
}


@pytest.mark.parametrize("value", BAD_VALUES)
def test_a_header_value_that_cannot_be_sent_as_written_is_refused_at_save(
    policy: None, value: str
) -> None:
    message = refusal_at_save(sending("https://helpdesk.example.com/api", headers={"X-A": value}))

    assert f"{PLACE}.headers.X-A: {BAD_VALUES[value]}" in message


@pytest.mark.parametrize("value", ["a\r\nX-Injected: yes", "caf\u00e9"])
def test_a_header_value_forced_past_save_is_a_definite_failure_with_nothing_sent(
    pipeline: Pipeline, downstream: Downstream, value: str
) -> None:
    force_effects(sending(downstream.url, headers={"X-A": value}, honours_idempotency_keys=False))

    run, effect = submit(pipeline)

    assert "header X-A" in assert_not_sent(run, effect, downstream)


def test_a_secret_whose_value_cannot_be_a_header_is_not_sent_and_never_shown(
    pipeline: Pipeline, downstream: Downstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HELPDESK_TOKEN", "Bearer one\r\nX-Injected: two")
    activate_effects(sending(downstream.url, **secret_headers({"Authorization": "HELPDESK_TOKEN"})))

    run, effect = submit(pipeline)

    detail = assert_not_sent(run, effect, downstream, "Bearer one", "X-Injected")
    assert "header Authorization: a header value cannot hold a line break" in detail
