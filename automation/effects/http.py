"""Effects delivered over HTTP: keyed by the request, never by the attempt, signed if asked.

An `http` effect of the catalogue (policy.catalogue.HttpConfig) says the method, the address,
the headers (a credential by the name of its environment variable) and the body: a structure
whose strings were rendered from the run when the effect was written (the payload's
`request.body`), sent as JSON. An effect with no body sends Gatehouse's own canonical payload.
Each request carries the effect's key in the idempotency header; with `signing`, also
`X-Gatehouse-Signature: t=<unix time>,v1=<hex>` where the hex is HMAC-SHA256(secret,
"<t>." + body): a receiver verifies it, refuses old timestamps, and deduplicates by key.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import time
from email.utils import parsedate_to_datetime

import httpx

from automation.effects.base import Delivery
from automation.effects.models import DeliveryResult, Effect
from policy.catalogue import HttpConfig, Secret
from policy.schemas import canonical_json

SIGNATURE_HEADER = "X-Gatehouse-Signature"
RETRYABLE_STATUS = frozenset({408, 429})
BODY_KEPT = 2000
# A Retry-After longer than any delivery deadline (at most 7 days) means the same as one just
# past it; the cap keeps an absurd value (a 40-digit number) out of date arithmetic.
MAX_RETRY_AFTER = 8 * 24 * 3600.0


class MissingSecret(Exception):
    """The environment variable a header or the signing names is not set."""


def secret_value(secret: Secret) -> str:
    value = os.environ.get(secret.secret, "")
    if not value:
        raise MissingSecret(f"the environment variable {secret.secret} is not set")
    return value


def sign(secret: str, timestamp: int, body: bytes) -> str:
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={digest.hexdigest()}"


def verify(secret: str, header: str, body: bytes, *, now: float, tolerance: float = 300) -> bool:
    """Receiver side: a valid signature over this body, made within the tolerance."""
    parts = dict(item.split("=", 1) for item in header.split(",") if "=" in item)
    try:
        timestamp = int(parts["t"])
        stale = abs(now - timestamp) > tolerance
    except (KeyError, ValueError, OverflowError):  # OverflowError: more digits than a float
        return False
    if stale:
        return False
    return hmac.compare_digest(sign(secret, timestamp, body), f"t={timestamp},v1={parts.get('v1')}")


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
        """The body and headers one attempt sends. Raises MissingSecret."""
        rendered = (effect.payload.get("request") or {}).get("body")
        body = canonical_json(effect.payload if rendered is None else rendered).encode()
        headers = {"Content-Type": "application/json"}
        for name, value in self.config.headers.items():
            headers[name] = secret_value(value) if isinstance(value, Secret) else value
        headers[self.config.idempotency_header] = effect.idempotency_key
        if self.config.signing is not None:
            secret = secret_value(self.config.signing)
            headers[SIGNATURE_HEADER] = sign(secret, int(time.time()), body)
        return body, headers

    def deliver(self, effect: Effect) -> Delivery:
        try:
            body, headers = self.request(effect)
        except MissingSecret as exc:
            # Nothing was sent; once the variable is set, a retry sends it.
            return Delivery(DeliveryResult.RETRY, error_class="MissingSecret", detail=str(exc))
        timeout = httpx.Timeout(self.config.read_timeout, connect=self.config.connect_timeout)
        try:
            # No client-side retries: the outbox owns every retry and counts each attempt.
            with httpx.Client(timeout=timeout, follow_redirects=False) as client:
                response = client.request(
                    self.config.method, self.config.url, content=body, headers=headers
                )
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
            return Delivery(DeliveryResult.RETRY, error_class=type(exc).__name__, detail=str(exc))
        except httpx.TransportError as exc:
            # Sent (or partly sent) and no answer: it may or may not have happened downstream.
            return Delivery(
                DeliveryResult.UNCERTAIN, error_class=type(exc).__name__, detail=str(exc)
            )
        return self._judge(response)

    def _judge(self, response: httpx.Response) -> Delivery:
        status = response.status_code
        body = response.text[:BODY_KEPT]
        if 200 <= status < 300:
            reference = response.headers.get("Location") or f"http {status}"
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
