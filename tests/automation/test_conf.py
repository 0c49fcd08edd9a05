"""Every key of the GATEHOUSE settings block has one typed accessor, and its value that type."""

from __future__ import annotations

import typing

from django.conf import settings

from automation import conf


def declared() -> list[tuple[str, type]]:
    """(key, type) for each key that an overload of conf.setting names."""
    pairs = []
    for overload in typing.get_overloads(conf.setting):
        hints = typing.get_type_hints(overload)
        kind = typing.get_origin(hints["return"]) or hints["return"]
        pairs += [(key, kind) for key in typing.get_args(hints["name"])]
    return pairs


def test_each_setting_is_declared_once() -> None:
    keys = [key for key, _ in declared()]
    assert len(keys) == len(set(keys))
    assert set(keys) == set(settings.GATEHOUSE)


def test_each_setting_has_the_type_its_accessor_declares() -> None:
    for key, kind in declared():
        assert isinstance(conf.setting(key), kind), key  # type: ignore[call-overload]
