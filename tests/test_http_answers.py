"""What every answer carries whoever serves it: HEAD answers without a body (under gunicorn
too, on a kept-alive connection), static files with the pages' security headers, and a
sign-in that lasts a working day."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from wsgiref.util import setup_testing_defaults

import pytest
from django.contrib.auth.models import User
from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import request_finished
from django.db import close_old_connections
from django.http import StreamingHttpResponse
from django.test import Client, RequestFactory

from core.middleware import CONTENT_SECURITY_POLICY, PERMISSIONS_POLICY, HeadWithoutBodyMiddleware
from tests.servers import gunicorn

ROOT = Path(__file__).resolve().parents[1]
LOGIN = "/accounts/login/"


def wsgi(method: str, path: str) -> tuple[str, dict[str, str], bytes]:
    """One request through Django's WSGI handler, as a WSGI server calls it (no test
    client, which drops a HEAD body by itself)."""
    environ: dict[str, Any] = {"REQUEST_METHOD": method, "PATH_INFO": path}
    setup_testing_defaults(environ)
    started: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]], *_: Any) -> None:
        started.update(status=status, headers=dict(headers))

    # As the test client does: the end of a request would close the test's connection.
    request_finished.disconnect(close_old_connections)
    try:
        answer = WSGIHandler()(environ, start_response)
        body = b"".join(answer)
        getattr(answer, "close", lambda: None)()
    finally:
        request_finished.connect(close_old_connections)
    return started["status"], started["headers"], body


@pytest.mark.django_db
@pytest.mark.parametrize("path", [LOGIN, "/admin/login/"])
def test_a_head_answer_has_the_get_answers_headers_and_no_body(path: str) -> None:
    status, headers, body = wsgi("HEAD", path)
    got_status, got_headers, got = wsgi("GET", path)

    assert status == got_status == "200 OK"
    assert body == b""
    assert int(headers["Content-Length"]) == int(got_headers["Content-Length"]) == len(got) > 0
    assert headers["Content-Type"] == got_headers["Content-Type"]


@pytest.mark.django_db
def test_a_refusal_of_head_has_no_body_either() -> None:
    status, headers, body = wsgi("HEAD", "/api/v1/openapi.json")  # a GET-only view

    assert (status, body) == ("405 Method Not Allowed", b"")
    assert int(headers["Content-Length"]) > 0


def test_a_head_answer_does_not_read_a_stream() -> None:
    read: list[str] = []

    def rows() -> Iterator[bytes]:
        read.append("read")
        yield b"a,b\n"

    middleware = HeadWithoutBodyMiddleware(lambda request: StreamingHttpResponse(rows()))
    response = middleware(RequestFactory().head("/export.csv"))

    assert isinstance(response, StreamingHttpResponse)
    assert list(response.streaming_content) == []
    assert read == []
    # The server closes it; as the test client does, without closing the test's connection.
    request_finished.disconnect(close_old_connections)
    try:
        response.close()
    finally:
        request_finished.connect(close_old_connections)


def read_answer(sock: socket.socket, buffer: bytearray, *, body: bool) -> tuple[bytes, bytes]:
    """The next answer on the connection: its status line and, if `body`, its body (of its
    Content-Length). Whatever follows stays in `buffer`, to be read as the next answer."""
    while b"\r\n\r\n" not in buffer:
        chunk = sock.recv(65536)
        if not chunk:
            break
        buffer += chunk
    head, _, rest = bytes(buffer).partition(b"\r\n\r\n")
    status, *lines = head.split(b"\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(b":") for line in lines)}
    length = int(headers.get(b"content-length", b"0")) if body else 0
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    buffer[:] = rest[length:]
    assert headers.get(b"connection", b"").lower() != b"close", "the server closed the connection"
    return status, rest[:length]


@pytest.mark.django_db(transaction=True)
def test_under_gunicorn_a_head_answer_leaves_the_kept_alive_connection_intact() -> None:
    """It sent the page after the headers of a HEAD answer: on a kept-alive connection the
    next answer read began with those bytes (a proxy would hand them to someone else)."""
    with gunicorn(threads=2) as base_url:
        address = urlsplit(base_url)
        with socket.create_connection((address.hostname, address.port), timeout=10) as sock:
            buffer = bytearray()
            host = f"Host: {address.netloc}\r\n\r\n".encode()
            sock.sendall(b"HEAD " + LOGIN.encode() + b" HTTP/1.1\r\n" + host)
            status, _ = read_answer(sock, buffer, body=False)
            assert status == b"HTTP/1.1 200 OK"
            sock.sendall(b"GET /api/v1/openapi.json HTTP/1.1\r\n" + host)
            status, body = read_answer(sock, buffer, body=True)

    assert status == b"HTTP/1.1 200 OK", status[:80]
    assert "openapi" in json.loads(body)
    assert buffer == b""


@pytest.mark.django_db
@pytest.mark.parametrize("method", ["GET", "HEAD"])
def test_static_files_carry_the_pages_security_headers(method: str) -> None:
    status, headers, body = wsgi(method, "/static/gatehouse.css")

    assert status == "200 OK"
    assert headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
    assert headers["X-Frame-Options"] == "DENY"
    assert headers["Permissions-Policy"] == PERMISSIONS_POLICY
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert (body == b"") == (method == "HEAD")


@pytest.mark.django_db
def test_a_sign_in_lasts_twelve_hours_not_two_weeks(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    User.objects.create_user("ana", password="right-password-123")
    client = Client()

    answer = client.post(LOGIN, {"username": "ana", "password": "right-password-123"})

    assert answer.status_code == 302
    assert answer.cookies[settings.SESSION_COOKIE_NAME]["max-age"] == 12 * 3600
    assert client.session.get_expiry_age() == 12 * 3600


PROBE = (
    "import django; django.setup(); "
    "from django.conf import settings; print(settings.SESSION_COOKIE_AGE)"
)


def production_session_age(hours: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings"}
    env["GATEHOUSE_SESSION_HOURS"] = hours
    return subprocess.run(  # noqa: S603 - our own interpreter
        [sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True
    )


def test_the_operator_sets_how_long_a_sign_in_lasts() -> None:
    assert production_session_age("2").stdout.split()[-1] == "7200"
    refused = production_session_age("0")
    assert refused.returncode != 0
    assert "GATEHOUSE_SESSION_HOURS must be a whole number of hours, 1 or more" in refused.stderr
