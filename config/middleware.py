"""Security headers Django 5.2 does not set by itself, and refusing what no field accepts."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, QueryDict

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


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        response.headers.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
        response.headers.setdefault("Referrer-Policy", "same-origin")
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
