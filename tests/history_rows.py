"""Test set-up that edits history rows (core.history.AppendOnly), which the product never does:
durations a test can check, or a clean slate between rounds. A plain queryset of the model
goes past the refusals of its default manager; the product's code has none."""

from __future__ import annotations

from typing import Any

from django.db import models


def rewrite(model: type[models.Model]) -> models.QuerySet[Any]:
    """Every row of `model`, as a queryset that may update and delete them."""
    return models.QuerySet(model)
