"""The demo's downstream receiver: verifies signatures, deduplicates by key, fails on purpose.

It stands in for a partner's API so the demo shows retries and held effects. A configurable
share of requests is answered 503; which ones is decided by the key and the attempt number,
so a run of the demo behaves the same way every time.
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

from automation.effects.http import SIGNATURE_HEADER, verify
from devtools.receiver.models import Delivery, Receipt


def _fails(key: str, attempt: int) -> bool:
    share = settings.DEMO_RECEIVER_FAILURE_RATE
    digest = hashlib.sha256(f"{key}:{attempt}".encode()).digest()
    return digest[0] / 256 < share


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
    attempt = Delivery.objects.filter(idempotency_key=key).count() + 1
    status = 503 if _fails(key, attempt) else 200
    try:
        with transaction.atomic():
            Delivery.objects.create(idempotency_key=key, signature=signature, status=status)
            if status == 503:
                return JsonResponse({"error": "temporarily unavailable"}, status=503)
            receipt, created = Receipt.objects.get_or_create(
                idempotency_key=key, defaults={"effect": effect, "body": json.loads(request.body)}
            )
    except IntegrityError:
        return JsonResponse({"error": "replayed request"}, status=409)
    response = JsonResponse(
        {"receipt": receipt.pk, "duplicate": not created}, status=201 if created else 200
    )
    response["Location"] = f"receipt:{receipt.pk}"
    return response
