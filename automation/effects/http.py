"""Effects delivered over HTTP: signed, keyed by the request, never by the attempt.

Each POST carries the effect's canonical JSON payload, an `Idempotency-Key` header equal to
the effect's key, and `X-Gatehouse-Signature: t=<unix time>,v1=<hex>` where the hex is
HMAC-SHA256(secret, "<t>." + body): a receiver verifies it, refuses old timestamps, and
deduplicates by key. Configured per effect in GATEHOUSE["HTTP_EFFECTS"] (environment
variable GATEHOUSE_HTTP_EFFECTS, JSON); effects not named there stay local.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from email.utils import parsedate_to_datetime
from typing import Annotated

import httpx
from pydantic import BaseModel, ConfigDict, Field, HttpUrl

from automation.conf import setting
from automation.effects.base import Delivery
from automation.effects.models import DeliveryResult, Effect
from policy.schemas import canonical_json

SIGNATURE_HEADER = "X-Gatehouse-Signature"
RETRYABLE_STATUS = frozenset({408, 429})
BODY_KEPT = 2000
# A Retry-After longer than any delivery deadline (at most 7 days) means the same as one just
# past it; the cap keeps an absurd value (a 40-digit number) out of date arithmetic.
MAX_RETRY_AFTER = 8 * 24 * 3600.0


class HttpEffectConfig(BaseModel):
    """One effect's endpoint and delivery budget."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: HttpUrl
    secret: Annotated[str, Field(min_length=16)]
    connect_timeout: Annotated[float, Field(gt=0, le=60)] = 3.0
    read_timeout: Annotated[float, Field(gt=0, le=300)] = 10.0
    max_attempts: Annotated[int, Field(ge=1, le=50)] = 6
    deadline_seconds: Annotated[float, Field(gt=0, le=7 * 24 * 3600)] = 3600.0
    # Only a receiver that deduplicates by Idempotency-Key may get a request again after an
    # attempt whose outcome is unknown; otherwise a person reconciles it.
    honours_idempotency_keys: bool = True


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

    def __init__(self, config: HttpEffectConfig) -> None:
        self.config = config
        self.honours_idempotency_keys = config.honours_idempotency_keys
        self.max_attempts = config.max_attempts
        self.deadline_seconds = config.deadline_seconds

    def deliver(self, effect: Effect) -> Delivery:
        body = canonical_json(effect.payload).encode()
        headers = {
            "Content-Type": "application/json",
            "Idempotency-Key": effect.idempotency_key,
            SIGNATURE_HEADER: sign(self.config.secret, int(time.time()), body),
        }
        timeout = httpx.Timeout(self.config.read_timeout, connect=self.config.connect_timeout)
        try:
            # No client-side retries: the outbox owns every retry and counts each attempt.
            with httpx.Client(timeout=timeout, follow_redirects=False) as client:
                response = client.post(str(self.config.url), content=body, headers=headers)
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


def http_adapter_for(name: str) -> HttpAdapter | None:
    config = (setting("HTTP_EFFECTS") or {}).get(name)
    if config is None:
        return None
    return HttpAdapter(HttpEffectConfig.model_validate(config))
