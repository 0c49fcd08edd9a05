"""The demo receiver: signatures, replays, deduplication by key, failures on purpose.

Requests are signed here as docs/integrators.md documents the scheme, with hmac alone: what
an integrator's sender or receiver would compute."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from pytest_django.fixtures import Settings as SettingsWrapper

from automation.effects.http import SIGNATURE_HEADER, new_nonce, sign
from devtools.receiver.models import Delivery, Receipt

SECRET = "demo-secret-for-tests-0123456789"
BODY = json.dumps({"effect": "send_internal_notification", "subject": "x"}).encode()
URL = "/demo/receiver/send_internal_notification"


@pytest.fixture
def receiver_on(settings: SettingsWrapper) -> None:
    settings.DEMO_RECEIVER_SECRET = SECRET
    settings.DEMO_RECEIVER_FAILURE_RATE = 0.0


def documented_signature(secret: str, timestamp: int, nonce: str, body: bytes) -> str:
    """docs/integrators.md: t=<unix>,n=<nonce>,v2=hex HMAC-SHA256(secret, "<t>.<n>." + body)."""
    mac = hmac.new(secret.encode(), f"{timestamp}.{nonce}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},n={nonce},v2={mac.hexdigest()}"


def post(
    client: Client,
    *,
    key: str = "k" * 64,
    stamp: int | None = None,
    nonce: str | None = None,
    secret: str = SECRET,
    body: bytes = BODY,
    signature: str | None = None,
):
    stamp = int(time.time()) if stamp is None else stamp
    nonce = secrets.token_hex(16) if nonce is None else nonce
    signature = signature or documented_signature(secret, stamp, nonce, body)
    return client.post(
        URL,
        body,
        content_type="application/json",
        headers={"Idempotency-Key": key, SIGNATURE_HEADER: signature},
    )


@pytest.mark.django_db
def test_a_repeated_key_is_answered_with_the_first_answer_and_performed_once(
    receiver_on: None, client: Client
) -> None:
    now = int(time.time())
    first = post(client, stamp=now)
    again = post(client, stamp=now)  # a retry in the same second: a new nonce, the same key

    assert (first.status_code, again.status_code) == (201, 201)
    assert again.json() == first.json() == {"receipt": Receipt.objects.get().pk}
    assert again["Location"] == first["Location"]
    assert (first.get("Idempotent-Replayed"), again["Idempotent-Replayed"]) == (None, "true")
    assert Receipt.objects.count() == 1
    assert Delivery.objects.count() == 2


@pytest.mark.django_db
def test_a_key_performed_is_never_failed_on_purpose_again(
    receiver_on: None, client: Client, settings: SettingsWrapper
) -> None:
    assert post(client).status_code == 201
    settings.DEMO_RECEIVER_FAILURE_RATE = 1.0  # every new attempt of a new key fails now

    assert post(client).status_code == 201
    assert post(client, key="j" * 64).status_code == 503


@pytest.mark.django_db
def test_the_same_attempt_replayed_gets_the_first_answer_once_its_key_was_performed(
    receiver_on: None, client: Client
) -> None:
    signature = documented_signature(SECRET, int(time.time()), "a" * 32, BODY)
    first = post(client, signature=signature)
    replayed = post(client, signature=signature)

    assert (first.status_code, replayed.status_code) == (201, 201)
    assert replayed.json() == first.json()
    assert replayed["Idempotent-Replayed"] == "true"
    assert Receipt.objects.count() == 1


@pytest.mark.django_db
def test_a_bad_signature_is_refused(receiver_on: None, client: Client) -> None:
    assert post(client, secret="another-secret-0123456789abcdef").status_code == 401
    assert not Receipt.objects.exists()


@pytest.mark.django_db
def test_an_old_timestamp_is_refused(receiver_on: None, client: Client) -> None:
    assert post(client, stamp=int(time.time()) - 3600).status_code == 401
    assert not Delivery.objects.exists()


@pytest.mark.django_db
def test_the_same_attempt_replayed_is_refused_while_its_key_was_never_performed(
    receiver_on: None, client: Client, settings: SettingsWrapper
) -> None:
    settings.DEMO_RECEIVER_FAILURE_RATE = 1.0
    signature = documented_signature(SECRET, int(time.time()), "b" * 32, BODY)
    assert post(client, signature=signature).status_code == 503
    settings.DEMO_RECEIVER_FAILURE_RATE = 0.0

    replayed = post(client, signature=signature)

    assert (replayed.status_code, replayed.json()) == (409, {"error": "replayed request"})
    assert "Idempotent-Replayed" not in replayed
    assert Delivery.objects.count() == 1
    assert not Receipt.objects.exists()
    # A new attempt of the key (a new nonce) is performed.
    assert post(client).status_code == 201


@pytest.mark.django_db
def test_a_tampered_body_is_refused(receiver_on: None, client: Client) -> None:
    signature = documented_signature(SECRET, int(time.time()), "c" * 32, BODY)
    tampered = post(client, body=b'{"effect": "something else"}', signature=signature)
    assert tampered.status_code == 401
    assert not Delivery.objects.exists()


@pytest.mark.django_db
def test_a_changed_nonce_or_a_signature_without_one_is_refused(
    receiver_on: None, client: Client
) -> None:
    stamp = int(time.time())
    signature = documented_signature(SECRET, stamp, "d" * 32, BODY)
    changed = signature.replace("n=" + "d" * 32, "n=" + "e" * 32)
    mac = hmac.new(SECRET.encode(), f"{stamp}.".encode() + BODY, hashlib.sha256).hexdigest()
    unversioned = f"t={stamp},v1={mac}"  # the timestamp and body alone: no longer accepted

    assert post(client, signature=changed).status_code == 401
    assert post(client, signature=unversioned).status_code == 401
    assert not Delivery.objects.exists()


@pytest.mark.django_db
def test_the_failure_share_answers_503_and_performs_nothing(
    receiver_on: None, client: Client, settings: SettingsWrapper
) -> None:
    settings.DEMO_RECEIVER_FAILURE_RATE = 1.0
    assert post(client).status_code == 503
    assert not Receipt.objects.exists()
    assert Delivery.objects.get().status == 503


@pytest.mark.django_db
def test_the_receiver_is_off_without_a_secret(client: Client) -> None:
    assert post(client).status_code == 404


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def server_logs() -> Iterator[Records]:
    """What Django's request log and runserver's access log say (they do not propagate)."""
    handler = Records()
    loggers = [logging.getLogger(name) for name in ("django.request", "django.server")]
    for logger in loggers:
        logger.addHandler(handler)
    yield handler
    for logger in loggers:
        logger.removeHandler(handler)


@pytest.mark.django_db
def test_a_failure_on_purpose_is_logged_as_info_not_as_a_server_error(
    receiver_on: None, client: Client, settings: SettingsWrapper, server_logs: Records
) -> None:
    settings.DEMO_RECEIVER_FAILURE_RATE = 1.0

    assert post(client).status_code == 503

    (record,) = server_logs.records
    assert (record.name, record.levelname) == ("django.request", "INFO")
    assert URL in record.getMessage()


def access_line(path: str, status: int) -> None:
    """A line as runserver writes it (django.core.servers.basehttp.WSGIRequestHandler)."""
    logging.getLogger("django.server").error(
        '"%s" %s %s', f"POST {path} HTTP/1.1", str(status), "45", extra={"status_code": status}
    )


def test_runserver_logs_the_receivers_503_as_info_and_any_other_5xx_as_an_error(
    server_logs: Records,
) -> None:
    access_line(URL, 503)
    access_line("/api/v1/events", 503)
    access_line(URL, 500)  # a real fault of the receiver stays one

    assert [r.levelname for r in server_logs.records] == ["INFO", "ERROR", "ERROR"]


def guide_verify() -> Any:
    """The verification docs/integrators.md gives integrators, run as they would copy it."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "integrators.md").read_text()
    start = text.index("```python\n", text.index("### Verifying a signature")) + len("```python\n")
    namespace: dict[str, Any] = {}
    exec(text[start : text.index("```", start)], namespace)  # noqa: S102 - our own docs
    return namespace["verify"]


def test_the_guides_verification_accepts_what_gatehouse_signs_and_refuses_the_rest() -> None:
    verify_as_documented = guide_verify()
    now = int(time.time())
    header = sign(SECRET, BODY, timestamp=now, nonce=new_nonce())

    assert verify_as_documented(SECRET.encode(), header, BODY)
    assert not verify_as_documented(SECRET.encode(), header, BODY + b" ")
    assert not verify_as_documented(b"another-secret", header, BODY)
    stale = sign(SECRET, BODY, timestamp=now - 301, nonce=new_nonce())
    assert not verify_as_documented(SECRET.encode(), stale, BODY)
