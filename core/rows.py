"""A row that a unique index may refuse, inserted without losing the caller's transaction."""

from __future__ import annotations

from django.db import IntegrityError, router, transaction
from django.db.models import Model


def insert_new(row: Model, *, unique: str) -> bool:
    """Insert the row unless one with the same `unique` value exists: its unique index
    arbitrates, so two workers racing to insert the same key write it once. True, with the
    row saved (its primary key set), when it was inserted; False, having written nothing,
    when the key is taken. The insert has a savepoint of its own, so a refused one leaves
    the caller's transaction usable; any other constraint's refusal goes on."""
    model = type(row)
    try:
        with transaction.atomic(using=router.db_for_write(model)):
            row.save(force_insert=True)
    except IntegrityError:
        if not model._default_manager.filter(**{unique: getattr(row, unique)}).exists():
            raise
        return False
    return True
