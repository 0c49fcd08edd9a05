"""A downstream service for the demo: what it received and what it performed, by key."""

from __future__ import annotations

from django.db import models


class Receipt(models.Model):
    """One effect performed downstream. The key is unique: a repeat performs nothing."""

    idempotency_key = models.CharField(max_length=64, unique=True)
    effect = models.CharField(max_length=50)
    body = models.JSONField()
    performed_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.effect} {self.idempotency_key[:12]}"


class Delivery(models.Model):
    """Every signed request that arrived, answered or failed on purpose."""

    idempotency_key = models.CharField(max_length=64, db_index=True)
    # A signature is accepted once: it covers a nonce new at every attempt, so the same one
    # again is that very attempt replayed (answered as the first time if its key was performed).
    signature = models.CharField(max_length=200, unique=True)
    status = models.PositiveSmallIntegerField()
    received_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name_plural = "deliveries"

    def __str__(self) -> str:
        return f"{self.status} for {self.idempotency_key[:12]}"
