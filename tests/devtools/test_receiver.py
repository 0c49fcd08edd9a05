"""The demo receiver: signatures, replays, deduplication by key, failures on purpose."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator

import pytest
from django.test import Client
from pytest_django.fixtures import Settings as SettingsWrapper

from automation.effects.http import SIGNATURE_HEADER, sign
from devtools.receiver.models import Delivery, Receipt

SECRET = "demo-secret-for-tests-0123456789"
BODY = json.dumps({"effect": "send_internal_notification", "subject": "x"}).encode()
URL = "/demo/receiver/send_internal_notification"


@pytest.fixture
def receiver_on(settings: SettingsWrapper) -> None:
    settings.DEMO_RECEIVER_SECRET = SECRET
    settings.DEMO_RECEIVER_FAILURE_RATE = 0.0


def post(
    client: Client,
    *,
    key: str = "k" * 64,
    stamp: int | None = None,
    secret: str = SECRET,
    body: bytes = BODY,
):
    signature = sign(secret, int(time.time()) if stamp is None else stamp, body)
    return client.post(
        URL,
        body,
        content_type="application/json",
        headers={"Idempotency-Key": key, SIGNATURE_HEADER: signature},
    )


@pytest.mark.django_db
def test_a_signed_request_is_performed_once_per_key(receiver_on: None, client: Client) -> None:
    now = int(time.time())  # read once: two reads a second apart would sign alike
    first = post(client, stamp=now)
    again = post(client, stamp=now - 1)  # a retry: new signature, same key
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["duplicate"] is True
    assert Receipt.objects.count() == 1
    assert Delivery.objects.count() == 2


@pytest.mark.django_db
def test_a_bad_signature_is_refused(receiver_on: None, client: Client) -> None:
    assert post(client, secret="another-secret-0123456789abcdef").status_code == 401
    assert not Receipt.objects.exists()


@pytest.mark.django_db
def test_an_old_timestamp_is_refused(receiver_on: None, client: Client) -> None:
    assert post(client, stamp=int(time.time()) - 3600).status_code == 401
    assert not Delivery.objects.exists()


@pytest.mark.django_db
def test_a_replayed_request_is_refused(receiver_on: None, client: Client) -> None:
    stamp = int(time.time())
    assert post(client, stamp=stamp).status_code == 201
    assert post(client, stamp=stamp).status_code == 409
    assert Delivery.objects.count() == 1


@pytest.mark.django_db
def test_a_tampered_body_is_refused(receiver_on: None, client: Client) -> None:
    signature = sign(SECRET, int(time.time()), BODY)
    response = client.post(
        URL,
        b'{"effect": "something else"}',
        content_type="application/json",
        headers={"Idempotency-Key": "k" * 64, SIGNATURE_HEADER: signature},
    )
    assert response.status_code == 401


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
