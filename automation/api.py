"""The intake API for integrators: JSON events and e-mail messages, token authentication,
clear 4xx answers, and every answer under /api/ in JSON (ApiErrorsAsJsonMiddleware)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from functools import wraps
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import get_script_prefix, reverse
from django.views.decorators.csrf import csrf_exempt

from automation.api_schemas import ERROR_MEANINGS, LENGTH_REQUIRED, ApiError
from automation.conf import IntSetting, setting
from automation.intake.selectors import channel_may_read, run_for_channel, run_summary
from automation.intake.selectors import run_detail as detail_of
from automation.intake.services import (
    MAIL_TYPE,
    api_token_find,
    intake_submit,
)
from automation.models import ApiToken, Outcome, Run
from automation.openapi import openapi_document
from core.inputs import parse_number
from policy.models import PolicyVersion
from policy.services import policy_business

View = Callable[..., JsonResponse]

STATUS_BY_CODE = {
    "accepted": 202,
    Outcome.IDEMPOTENT_REPLAY: 200,
    Outcome.IDEMPOTENCY_CONFLICT: 409,
    Outcome.INVALID_EVENT: 422,
    Outcome.UNSUPPORTED_REQUEST: 422,
}


API_PREFIX = "/api/"


def _error(status: int, code: ApiError, message: str) -> JsonResponse:
    return JsonResponse({"error": code, "message": message}, status=status)


def _not_allowed(methods: tuple[str, ...]) -> JsonResponse:
    response = _error(
        405, ApiError.METHOD_NOT_ALLOWED, f"this address takes {' or '.join(methods)} only"
    )
    response["Allow"] = ", ".join(methods)
    return response


def api_view(*methods: str) -> Callable[[View], View]:
    """An API endpoint taking `methods`: any other is answered 405 in the API's error shape
    (with Allow). Exempt from CSRF: a token authenticates it, and no cookie is read, so a
    method it refuses gets that 405, not Django's CSRF page."""

    def decorate(view: View) -> View:
        @wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> JsonResponse:
            if request.method not in methods:
                return _not_allowed(methods)
            return view(request, *args, **kwargs)

        return csrf_exempt(wrapper)

    return decorate


@csrf_exempt
def not_found(request: HttpRequest) -> JsonResponse:
    """Any address under /api/ that names no endpoint (config.urls sends them all here)."""
    return _error(
        404, ApiError.NOT_FOUND, "no such address in the API: /api/v1/openapi.json lists them"
    )


# An error answer made outside the API's views, by its status.
ERROR_BY_STATUS = {
    400: ApiError.BAD_REQUEST,
    404: ApiError.NOT_FOUND,
    405: ApiError.METHOD_NOT_ALLOWED,
    413: ApiError.TOO_LARGE,
}
KEPT_HEADERS = ("Allow", "Retry-After")


class ApiErrorsAsJsonMiddleware:
    """Under /api/, an error answered by anything but an API view (the NUL refusal, Django's
    400 for a request it cannot read, its 500 page) is answered in the API's error shape too,
    with its status and the headers that tell a client what to do (Allow, Retry-After): an
    integrator's client reads every answer as JSON. First in MIDDLEWARE, so that it sees
    every other answer."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if response.status_code < 400 or not request.path_info.startswith(API_PREFIX):
            return response
        if response.get("Content-Type", "").startswith("application/json"):
            return response
        return _as_json(response)


def _as_json(response: HttpResponse) -> JsonResponse:
    status = response.status_code
    fallback = ApiError.SERVER_ERROR if status >= 500 else ApiError.BAD_REQUEST
    code = ERROR_BY_STATUS.get(status, fallback)
    answer = _error(status, code, f"HTTP {status}: {ERROR_MEANINGS[code]}")
    for header in KEPT_HEADERS:
        if header in response:
            answer[header] = response[header]
    return answer


def _run_page(request: HttpRequest, run: Run) -> str:
    """The run's page in the console, absolute: the answer is read far from this host."""
    return request.build_absolute_uri(_run_path(get_script_prefix()).format(run.pk))


@functools.cache
def _run_path(script_prefix: str) -> str:
    """The run page's path with `{}` for the run's id: reversed once per script prefix (the
    key), where reversing it for every answer cost more than the rest of the answer."""
    marker = 2**62
    return reverse("runs:run", args=[marker]).replace(str(marker), "{}")


def _bearer_key(request: HttpRequest) -> str | None:
    # From the WSGI environ: request.headers would copy every header for this one.
    header = request.META.get("HTTP_AUTHORIZATION", "")
    scheme, _, key = header.partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        return None
    return key.strip()


def _unauthenticated(key: str | None) -> JsonResponse:
    if key is None:
        return _error(401, ApiError.UNAUTHENTICATED, "send 'Authorization: Bearer <token>'")
    return _error(401, ApiError.UNAUTHENTICATED, "unknown or revoked token")


def token_required(view: View) -> View:
    """Bearer token: only its SHA-256 is stored; the token names the intake channel. The
    view gets the token as its second argument."""

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> JsonResponse:
        key = _bearer_key(request)
        token = api_token_find(key=key) if key is not None else None
        if token is None:
            return _unauthenticated(key)
        return view(request, token, *args, **kwargs)

    return wrapper


ACCEPTED_TYPES: dict[str, IntSetting] = {
    "application/json": "MAX_EVENT_BYTES",
    MAIL_TYPE: "MAX_MESSAGE_BYTES",
}


def _chunked(request: HttpRequest) -> bool:
    """Sent with `Transfer-Encoding: chunked` and no Content-Length: Django reads such a body
    as empty, whichever server decoded it."""
    encoding = request.META.get("HTTP_TRANSFER_ENCODING", "")
    return "chunked" in encoding.lower() and not request.META.get("CONTENT_LENGTH")


def _read_chunked(request: HttpRequest, limit: int) -> bytes | None:
    """A chunked body, at most `limit` + 1 bytes of it, from a server that decoded it and ends
    the input where the body ends (it says so with `wsgi.input_terminated`, as gunicorn
    does); None under a server that passes the chunks on undecoded (runserver)."""
    if not request.META.get("wsgi.input_terminated"):
        return None
    return bytes(request.META["wsgi.input"].read(limit + 1))


def _body(request: HttpRequest) -> bytes | JsonResponse:
    """The body, within its content type's limit; or the answer that refuses it, before
    anything is stored."""
    content_type = request.content_type or ""
    if content_type not in ACCEPTED_TYPES:
        return _error(
            415,
            ApiError.UNSUPPORTED_MEDIA_TYPE,
            "send an event as application/json or an e-mail message as message/rfc822",
        )
    limit = setting(ACCEPTED_TYPES[content_type])
    too_large = _error(
        413, ApiError.TOO_LARGE, f"a request sent as {content_type} is at most {limit} bytes"
    )
    if _chunked(request):
        raw = _read_chunked(request, limit)
        if raw is None:
            return _error(411, ApiError.LENGTH_REQUIRED, LENGTH_REQUIRED)
    else:
        declared = parse_number(request.META.get("CONTENT_LENGTH") or "0")
        if declared is None or declared > limit:
            return too_large
        raw = request.body
    return too_large if len(raw) > limit else raw


@api_view("POST")
@token_required
def submit_event(request: HttpRequest, token: ApiToken) -> JsonResponse:
    raw = _body(request)
    if isinstance(raw, JsonResponse):
        return raw
    try:
        result = intake_submit(
            channel=token.channel,
            raw=raw,
            content_type=request.content_type or "",
            source=f"api:{token.name}",
        )
    except PolicyVersion.DoesNotExist:
        # The raw request is kept; nothing can be decided until a policy is loaded.
        return _error(
            503,
            ApiError.NO_ACTIVE_POLICY,
            "no policy version is active, so nothing can be taken in: "
            "an operator runs `manage.py load_policy`; send the event again then",
        )
    body: dict[str, Any] = {"outcome": str(result.code), "intake_id": result.intake.pk}
    if result.run is not None:
        # A duplicate may name a run another channel took in (e-mail identity is shared):
        # see run_for_channel for what this token may then read of it.
        readable = channel_may_read(run=result.run, channel=token.channel)
        body["run"] = run_summary(
            result.run, readable=readable, run_page=_run_page(request, result.run)
        )
    if result.problems:
        body["problems"] = [p.model_dump() for p in result.problems]
    status = STATUS_BY_CODE[result.code]
    if result.malformed:
        status = 400  # not JSON at all: malformed, not merely invalid
    return JsonResponse(body, status=status)


@api_view("GET")
@token_required
def run_detail(request: HttpRequest, token: ApiToken, run_id: int) -> JsonResponse:
    run = run_for_channel(run_id=run_id, channel=token.channel)
    if run is None:
        return _error(404, ApiError.NOT_FOUND, "no such run for this token")
    return JsonResponse(detail_of(run, run_page=_run_page(request, run)))


@api_view("GET")
def openapi(request: HttpRequest) -> JsonResponse:
    """The API described for integrators (OpenAPI 3.1): public, like any API's reference.
    It names its page for people (the same document, rendered) by an absolute address."""
    reference = request.build_absolute_uri(reverse("integrators:api_reference"))
    external = {"description": "The same reference as a page for people", "url": reference}
    document = openapi_document(policy_business(name=None))
    return JsonResponse({**document, "externalDocs": external})
