"""Security headers Django 5.2 does not set by itself, answers to HEAD without a body, and
refusing what no field accepts."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from wsgiref.headers import Headers

from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, QueryDict
from django.http.response import HttpResponseBase

# No inline script anywhere: text from requests and from the model can never run as code.
CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data:",
        "object-src 'none'",
        "base-uri 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)

# Browser features no page of the console uses, denied to it and to anything it might embed:
# a page made to run script here (an injected one, a compromised dependency) cannot ask for a
# camera, a location or a payment either. Each name is one Chromium recognizes (it warns of
# any other in the console; the browser test holds that).
DENIED_FEATURES = (
    "accelerometer",
    "autoplay",
    "camera",
    "display-capture",
    "encrypted-media",
    "fullscreen",
    "geolocation",
    "gyroscope",
    "hid",
    "idle-detection",
    "magnetometer",
    "microphone",
    "midi",
    "payment",
    "picture-in-picture",
    "publickey-credentials-get",
    "screen-wake-lock",
    "serial",
    "usb",
    "xr-spatial-tracking",
)
PERMISSIONS_POLICY = ", ".join(f"{feature}=()" for feature in DENIED_FEATURES)


def static_file_headers(headers: Headers, path: str, url: str) -> None:
    """WhiteNoise's hook for the files it serves (WHITENOISE_ADD_HEADERS_FUNCTION): it
    answers before the middleware below it runs, so a static file gets the pages' security
    headers here (an SVG or an HTML file among them cannot run script, be framed or ask for
    a camera)."""
    headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
    headers["X-Frame-Options"] = "DENY"
    headers["Permissions-Policy"] = PERMISSIONS_POLICY
    headers["Referrer-Policy"] = "same-origin"


class HeadWithoutBodyMiddleware:
    """An answer to HEAD is the answer to GET without its body: its headers, Content-Length
    included. Django's development server drops the body itself, but a WSGI server need not
    (gunicorn sends it), and on a kept-alive connection the client would read those bytes as
    the start of the next answer: a proxy reusing the connection could hand one person's
    page to another. First in MIDDLEWARE, so it sees every answer (static files too)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        response = self.get_response(request)
        if request.method == "HEAD":
            without_body(response)
        return response


def without_body(response: HttpResponseBase) -> None:
    """Drop the body, keeping the headers that describe it. A stream (a file, a download) is
    not read: its closers stay registered, so the server still closes what it holds."""
    if isinstance(response, HttpResponse):
        response.headers.setdefault("Content-Length", str(len(response.content)))
        response.content = b""
    elif response.streaming:
        response.streaming_content = []  # type: ignore[attr-defined]


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        response.headers.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
        response.headers.setdefault("Referrer-Policy", "same-origin")
        response.headers.setdefault("Permissions-Policy", PERMISSIONS_POLICY)
        return response


FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


def _has_nul(values: Iterable[str]) -> bool:
    return any("\x00" in value for value in values)


class RejectNulMiddleware:
    """400 for a NUL character in the path, the query string or a submitted form.

    PostgreSQL text cannot hold NUL, so such a value, used in any filter or lookup, fails
    in the database as a 500, wherever it is read (our pages, the admin's filters and
    search, a form's raw field). No person types one: refuse it before any view runs.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if self._carries_nul(request):
            return HttpResponseBadRequest(
                "The request contains a NUL character (%00), which no field accepts.\n",
                content_type="text/plain; charset=utf-8",
            )
        return self.get_response(request)

    @staticmethod
    def _carries_nul(request: HttpRequest) -> bool:
        if "\x00" in request.path or _has_nul(_items(request.GET)):
            return True
        if request.method == "POST" and request.content_type in FORM_TYPES:
            return _has_nul(_items(request.POST))
        return False


def _items(query: QueryDict) -> Iterator[str]:
    for key, values in query.lists():
        yield key
        yield from values
