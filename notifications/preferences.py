"""A person's choice of how to hear of each kind of event: at once, in a daily digest, or
never. No row means at once."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db import transaction

from notifications.models import Kind, Mode, Preference


def preferences_of(user: User) -> list[tuple[str, str, str]]:
    """(kind, what it is, the chosen mode) for every kind, in the order they are listed."""
    chosen = dict(Preference.objects.filter(user=user).values_list("kind", "mode"))
    return [(kind.value, str(kind.label), chosen.get(kind.value, Mode.IMMEDIATE)) for kind in Kind]


@transaction.atomic(durable=True)
def preferences_set(*, user: User, modes: dict[str, Mode]) -> None:
    for kind, mode in modes.items():
        Preference.objects.update_or_create(user=user, kind=Kind(kind), defaults={"mode": mode})
