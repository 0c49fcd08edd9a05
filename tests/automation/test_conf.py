"""Every key of the GATEHOUSE settings block has one typed accessor, and its value that type:
automation's (`automation.conf`) or the worker wing's (`worker.conf`)."""

from __future__ import annotations

import typing
from collections.abc import Callable

from django.conf import settings

from automation import conf
from worker import conf as worker_conf

ACCESSORS = (conf.setting, worker_conf.setting)


def declared() -> list[tuple[str, type, Callable[..., object]]]:
    """(key, type, accessor) for each key that an overload of an accessor names."""
    pairs = []
    for accessor in ACCESSORS:
        pairs += [(key, kind, accessor) for key, kind in _declared_by(accessor)]
    return pairs


def _declared_by(accessor: Callable[..., object]) -> list[tuple[str, type]]:
    pairs = []
    for overload in typing.get_overloads(accessor):
        hints = typing.get_type_hints(overload)
        kind = typing.get_origin(hints["return"]) or hints["return"]
        pairs += [(key, kind) for key in typing.get_args(hints["name"])]
    return pairs


def test_each_setting_is_declared_once() -> None:
    keys = [key for key, _, _ in declared()]
    assert len(keys) == len(set(keys))
    assert set(keys) == set(settings.GATEHOUSE)


def test_each_setting_has_the_type_its_accessor_declares() -> None:
    for key, kind, accessor in declared():
        assert isinstance(accessor(key), kind), key
