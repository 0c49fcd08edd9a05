"""The demo's downstream receiver: verifies signatures, deduplicates by key, fails on purpose.

It stands in for a partner's API so the demo shows retries and held effects. A configurable
share of requests is answered 503; which ones is decided by the key and the attempt number,
so a run of the demo behaves the same way every time.

It behaves as docs/integrators.md asks of a receiver: a key performed before is answered with
the first answer (marked `Idempotent-Replayed: true`), whatever the attempt, so a delivery it
performed never fails; a signature seen before (the same attempt, nonce and all, sent again)
is refused only while its key was never performed.
"""

from __future__ import annotations

import hashlib
import json
import time

from django.conf import settings
from django.db import IntegrityError, transaction
from django.http import Http404, HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from automation.effects.http import REPLAYED_HEADER, SIGNATURE_HEADER, verify
from devtools.receiver.models import Delivery, Receipt

PERFORMED = 201


def _fails(key: str, attempt: int) -> bool:
    share = settings.DEMO_RECEIVER_FAILURE_RATE
    digest = hashlib.sha256(f"{key}:{attempt}".encode()).digest()
    return digest[0] / 256 < share


def _answer(receipt: Receipt, *, replayed: bool) -> JsonResponse:
    """The answer of the delivery that performed the receipt; a repeat gets it again."""
    response = JsonResponse({"receipt": receipt.pk}, status=PERFORMED)
    response["Location"] = f"receipt:{receipt.pk}"
    if replayed:
        response[REPLAYED_HEADER] = "true"
    return response


@csrf_exempt  # machine endpoint, authenticated by its HMAC signature
@require_POST
def receive(request: HttpRequest, effect: str) -> JsonResponse:
    secret = settings.DEMO_RECEIVER_SECRET
    if not secret:
        raise Http404("the demo receiver is off")
    signature = request.headers.get(SIGNATURE_HEADER, "")
    key = request.headers.get("Idempotency-Key", "")
    if not verify(secret, signature, request.body, now=time.time()):
        return JsonResponse({"error": "bad or expired signature"}, status=401)
    if not key:
        return JsonResponse({"error": "Idempotency-Key is required"}, status=400)
    try:
        with transaction.atomic():
            return _deliver(key, signature, effect, request.body)
    except IntegrityError:  # this very signature came before: the same attempt replayed
        receipt = Receipt.objects.filter(idempotency_key=key).first()
        if receipt is not None:
            return _answer(receipt, replayed=True)
        return JsonResponse({"error": "replayed request"}, status=409)


def _deliver(key: str, signature: str, effect: str, body: bytes) -> JsonResponse:
    # The key's row is locked, so two attempts of one key at once take turns.
    receipt = Receipt.objects.select_for_update().filter(idempotency_key=key).first()
    if receipt is not None:
        Delivery.objects.create(idempotency_key=key, signature=signature, status=PERFORMED)
        return _answer(receipt, replayed=True)
    attempt = Delivery.objects.filter(idempotency_key=key).count() + 1
    if _fails(key, attempt):
        Delivery.objects.create(idempotency_key=key, signature=signature, status=503)
        return JsonResponse({"error": "temporarily unavailable"}, status=503)
    Delivery.objects.create(idempotency_key=key, signature=signature, status=PERFORMED)
    receipt, created = Receipt.objects.get_or_create(
        idempotency_key=key, defaults={"effect": effect, "body": json.loads(body)}
    )
    return _answer(receipt, replayed=not created)
