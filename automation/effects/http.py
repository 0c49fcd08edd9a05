"""Effects delivered over HTTP: keyed by the request, never by the attempt, signed if asked.

An `http` effect of the catalogue (policy.catalogue.HttpConfig) says the method, the address,
the headers (a credential by the name of its environment variable) and the body: a structure
whose strings were rendered from the run when the effect was written (the payload's
`request.body`), sent as JSON. An effect with no body sends Gatehouse's own canonical payload.
Each request carries the effect's key in the idempotency header; with `signing`, also
`X-Gatehouse-Signature: t=<unix time>,n=<nonce>,v2=<hex>` where the nonce is new for every
attempt and the hex is HMAC-SHA256(secret, "<t>.<n>." + body): a receiver verifies it,
refuses old timestamps and a nonce it has seen (the same attempt replayed), and deduplicates
by key. Two attempts never carry the same signature, even within one second.

An answer that says the effect was already performed (a 2xx, or a 409 marked with
`Idempotent-Replayed: true` or a JSON body with `"already_performed": true`) is a delivery.

Before anything is sent, each attempt checks again what the catalogue was checked for when
it was saved (core.egress): every secret is one declared for effects and none of the server's,
every header value can be sent as it is, and every address the host resolves to is one the
settings allow. The connection then goes to the address that was checked, never to the name
again (a second lookup could answer otherwise). A refusal sends nothing: the attempt is
NOT_SENT, and the run waits for a person. The request leaves by core.egress.send_request,
which follows no redirect.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import time
from email.utils import parsedate_to_datetime

import httpx

from automation.effects.base import Delivery
from automation.effects.models import DeliveryResult, Effect
from core.egress import (
    EgressRefused,
    checked_address,
    header_value_refusal,
    secret_refusal,
    send_request,
)
from policy.catalogue import HttpConfig, Secret
from policy.schemas import canonical_json

SIGNATURE_HEADER = "X-Gatehouse-Signature"
# What a receiver answers to say it performed this key before (Stripe's header name); a 409
# carrying it (or the JSON marker) is a delivery, a 409 without it a refusal.
REPLAYED_HEADER = "Idempotent-Replayed"
PERFORMED_MARKER = "already_performed"
MARKER_BODY_LIMIT = 64 * 1024
# A nonce is what a receiver keeps to refuse a replayed attempt: short, printable, no commas.
NONCE = re.compile(r"[A-Za-z0-9_-]{16,64}")
RETRYABLE_STATUS = frozenset({408, 429})
BODY_KEPT = 2000
# A Retry-After longer than any delivery deadline (at most 7 days) means the same as one just
# past it; the cap keeps an absurd value (a 40-digit number) out of date arithmetic.
MAX_RETRY_AFTER = 8 * 24 * 3600.0


class MissingSecret(Exception):
    """The environment variable a header or the signing names is not set."""


def secret_value(secret: Secret) -> str:
    """The value of a secret the settings let effects send. Raises EgressRefused for one they
    do not (whatever the stored document says), MissingSecret for one that is not set."""
    refusal = secret_refusal(secret.secret)
    if refusal is not None:
        raise EgressRefused(refusal)
    value = os.environ.get(secret.secret, "")
    if not value:
        raise MissingSecret(f"the environment variable {secret.secret} is not set")
    return value


def pinned(url: str, headers: dict[str, str]) -> tuple[httpx.URL, dict[str, str]]:
    """The address to send to, with the host the settings allow replaced by the address it
    was checked at, and the request's extensions: the Host header (set in `headers`) and TLS
    (the certificate is checked against the name, sent as SNI) still say the name. Raises
    EgressRefused, or OSError when the name does not resolve."""
    try:
        target = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise EgressRefused(f"the address cannot be read: {exc}") from exc
    host = target.raw_host.decode("ascii")
    port = target.port or (443 if target.scheme == "https" else 80)
    address = checked_address(host, port)
    headers["Host"] = target.netloc.decode("ascii")
    return target.copy_with(host=str(address)), {"sni_hostname": host}


def new_nonce() -> str:
    """A nonce for one attempt: 128 random bits, so no two attempts share a signature."""
    return secrets.token_hex(16)


def sign(secret: str, body: bytes, *, timestamp: int, nonce: str) -> str:
    """The signature header's value: t, n and the HMAC-SHA256 of "<t>.<n>." + body."""
    return f"t={timestamp},n={nonce},v2={_mac(secret, timestamp, nonce, body)}"


def _mac(secret: str, timestamp: int, nonce: str, body: bytes) -> str:
    signed = f"{timestamp}.{nonce}.".encode() + body
    return hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def signature_parts(header: str) -> dict[str, str]:
    """The header's `name=value` items (t, n, v2); the first of a name counts."""
    parts: dict[str, str] = {}
    for item in header.split(","):
        name, _, value = item.strip().partition("=")
        parts.setdefault(name, value)
    return parts


def verify(secret: str, header: str, body: bytes, *, now: float, tolerance: float = 300) -> bool:
    """Receiver side: a valid signature over this body and nonce, made within the tolerance.
    Refusing a nonce seen before is the receiver's part (it keeps them for the tolerance)."""
    parts = signature_parts(header)
    stamp, nonce = parts.get("t", ""), parts.get("n", "")
    if not (stamp.isascii() and stamp.isdigit() and len(stamp) <= 12) or not NONCE.fullmatch(nonce):
        return False  # isascii: int() reads other scripts' digits; 12 digits: year 33658
    if abs(now - int(stamp)) > tolerance:
        return False
    return hmac.compare_digest(_mac(secret, int(stamp), nonce, body), parts.get("v2", ""))


def already_performed(response: httpx.Response) -> bool:
    """The receiver says it performed this key before (a 409 then means success)."""
    if response.headers.get(REPLAYED_HEADER, "").strip().lower() == "true":
        return True
    if not response.content or len(response.content) > MARKER_BODY_LIMIT:
        return False  # a marker is a small answer: a long one is not parsed to look for it
    try:
        answer = json.loads(response.content)
    except ValueError:  # UnicodeDecodeError is one
        return False
    return isinstance(answer, dict) and answer.get(PERFORMED_MARKER) is True


def _retry_after(response: httpx.Response) -> float | None:
    """Seconds the receiver asks us to wait: delay-seconds or an HTTP date; None if unreadable."""
    value = (response.headers.get("Retry-After") or "").strip()
    if not value:
        return None
    if value.isascii() and value.isdigit():  # not isdigit() alone: '²' passes it
        return min(float(value), MAX_RETRY_AFTER)
    try:
        wait = parsedate_to_datetime(value).timestamp() - time.time()
    except (TypeError, ValueError, OverflowError):
        return None
    return min(max(0.0, wait), MAX_RETRY_AFTER)


class HttpAdapter:
    local = False

    def __init__(self, config: HttpConfig) -> None:
        self.config = config
        self.honours_idempotency_keys = config.honours_idempotency_keys
        self.max_attempts = config.max_attempts
        self.deadline_seconds = config.deadline_seconds

    def request(self, effect: Effect) -> tuple[bytes, dict[str, str]]:
        """The body and headers one attempt sends. Raises MissingSecret, or EgressRefused for
        a secret or a header value that may not be sent (its value is never in the message)."""
        rendered = (effect.payload.get("request") or {}).get("body")
        body = canonical_json(effect.payload if rendered is None else rendered).encode()
        headers = {"Content-Type": "application/json"}
        for name, value in self.config.headers.items():
            headers[name] = secret_value(value) if isinstance(value, Secret) else value
        headers[self.config.idempotency_header] = effect.idempotency_key
        if self.config.signing is not None:
            secret = secret_value(self.config.signing)
            headers[SIGNATURE_HEADER] = sign(
                secret, body, timestamp=int(time.time()), nonce=new_nonce()
            )
        for name, value in headers.items():
            refusal = header_value_refusal(value)
            if refusal is not None:
                raise EgressRefused(f"header {name}: {refusal}")
        return body, headers

    def deliver(self, effect: Effect) -> Delivery:
        try:
            body, headers = self.request(effect)
            url, extensions = pinned(self.config.url, headers)
        except MissingSecret as exc:
            # Nothing was sent; once the variable is set, a retry sends it.
            return Delivery(DeliveryResult.RETRY, error_class="MissingSecret", detail=str(exc))
        except EgressRefused as exc:
            return Delivery(DeliveryResult.NOT_SENT, error_class="EgressRefused", detail=str(exc))
        except OSError as exc:  # the name does not resolve (now): nothing was sent
            return Delivery(DeliveryResult.RETRY, error_class="NameNotResolved", detail=str(exc))
        timeout = httpx.Timeout(self.config.read_timeout, connect=self.config.connect_timeout)
        try:
            # No client-side retries: the outbox owns every retry and counts each attempt.
            response = send_request(
                self.config.method,
                url,
                timeout=timeout,
                content=body,
                headers=headers,
                extensions=extensions,
            )
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
            return Delivery(DeliveryResult.RETRY, error_class=type(exc).__name__, detail=str(exc))
        except (httpx.LocalProtocolError, httpx.UnsupportedProtocol, UnicodeEncodeError) as exc:
            # The request could not be written as it is: refused before a byte was sent, so
            # it is a definite failure, never "uncertain". The library's message is not kept:
            # it may quote a header's value, which may be a secret.
            detail = "the request could not be written as it is (a header value or the address)"
            return Delivery(DeliveryResult.NOT_SENT, error_class=type(exc).__name__, detail=detail)
        except httpx.TransportError as exc:
            # Sent (or partly sent) and no answer: it may or may not have happened downstream.
            return Delivery(
                DeliveryResult.UNCERTAIN, error_class=type(exc).__name__, detail=str(exc)
            )
        return self._judge(response)

    def _judge(self, response: httpx.Response) -> Delivery:
        status = response.status_code
        body = response.text[:BODY_KEPT]
        if 200 <= status < 300 or (status == 409 and already_performed(response)):
            said = "" if status < 300 else ": already performed"
            reference = response.headers.get("Location") or f"http {status}{said}"
            return Delivery(
                DeliveryResult.DELIVERED, reference=reference[:200], status_code=status, body=body
            )
        if status in RETRYABLE_STATUS or status >= 500:
            return Delivery(
                DeliveryResult.RETRY,
                status_code=status,
                retry_after=_retry_after(response),
                body=body,
            )
        return Delivery(DeliveryResult.REJECTED, status_code=status, body=body)
