"""History rows: written once, never edited, never deleted.

An audit event, an approval decision, a comment, a stage record, a checkpoint: each says what
happened and stays as written, so a later reader sees what the decision was taken on. One base
for them all, so the rule reads the same everywhere:

- `save()` inserts a new row and refuses to write over an existing one;
- `delete()` on a row is refused;
- the default manager's querysets refuse `update()` and `delete()` (and `bulk_update()`).

This guards the product's own code paths; the audit table also has a PostgreSQL trigger
(audit/migrations/0002_append_only_trigger.py) that refuses raw SQL edits. A foreign key's
ON DELETE (SET_NULL when a user is removed) and a test database's flush go below the ORM's
queryset and are not refused here.
"""

from __future__ import annotations

from typing import Any, NoReturn

from django.db import models


class AppendOnlyError(ValueError):
    """An edit or a delete of a history row."""


def _refuse(model: type[models.Model], what: str) -> NoReturn:
    raise AppendOnlyError(f"{model._meta.verbose_name_plural} are append-only: {what} refused")


class AppendOnlyQuerySet(models.QuerySet):
    """Reads and inserts as usual; a bulk edit or delete is refused."""

    def update(self, **kwargs: Any) -> NoReturn:
        _refuse(self.model, "update")

    def bulk_update(self, objs: Any, fields: Any, batch_size: int | None = None) -> NoReturn:
        _refuse(self.model, "update")

    def delete(self) -> NoReturn:
        _refuse(self.model, "delete")


class AppendOnly(models.Model):
    """The base of a history row (abstract: adds no column)."""

    objects = AppendOnlyQuerySet.as_manager()

    class Meta:
        abstract = True

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            _refuse(type(self), "update")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> NoReturn:
        _refuse(type(self), "delete")
