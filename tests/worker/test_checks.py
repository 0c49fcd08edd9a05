"""The startup check that refuses an unsafe worker configuration (worker/checks.py)."""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings

from worker.checks import check_q_cluster

SAFE = {"timeout": 60, "retry": 120, "max_attempts": 3, "ack_failures": True, "orm": "default"}


def error_ids(**conf: Any) -> list[str]:
    with override_settings(Q_CLUSTER={**SAFE, **conf}):
        return [error.id for error in check_q_cluster()]


def test_project_worker_settings_pass_the_check() -> None:
    assert check_q_cluster() == []
    assert settings.Q_CLUSTER["retry"] > settings.Q_CLUSTER["timeout"]


def test_safe_worker_settings_pass_the_check() -> None:
    assert error_ids() == []


@pytest.mark.parametrize(
    ("conf", "expected"),
    [
        pytest.param({"retry": 60}, ["gatehouse.E001"], id="retry-equals-timeout"),
        pytest.param({"retry": 30}, ["gatehouse.E001"], id="retry-below-timeout"),
        pytest.param({"timeout": None}, ["gatehouse.E001"], id="no-timeout"),
        pytest.param({"max_attempts": 0}, ["gatehouse.E002"], id="unlimited-attempts"),
        pytest.param({"ack_failures": False}, ["gatehouse.E003"], id="failures-not-acked"),
    ],
)
def test_unsafe_worker_settings_are_refused(conf: dict[str, Any], expected: list[str]) -> None:
    assert error_ids(**conf) == expected


def test_missing_keys_are_refused() -> None:
    with override_settings(Q_CLUSTER={"orm": "default"}):
        ids = [error.id for error in check_q_cluster()]

    assert ids == ["gatehouse.E001", "gatehouse.E002", "gatehouse.E003"]


def test_negative_max_attempts_is_refused_as_unlimited() -> None:
    assert error_ids(max_attempts=-1) == ["gatehouse.E002"]
