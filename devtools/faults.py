"""Fault injection for the crash tests: a worker that dies (SIGKILL) at a chosen moment.

Both switches are off unless the environment turns them on (config.dev_settings); the
product only sends the signals they listen to (automation.signals).
"""

from __future__ import annotations

import os
import signal
from typing import Any

from django.conf import settings


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def kill_once_before_classifier_call(**_: Any) -> None:
    """Die once, if the marker file named by FAULT_KILL_ONCE exists (it is removed first, so
    the restarted worker goes on): the run's steps so far are committed, its lease held."""
    marker = settings.FAULT_KILL_ONCE
    if marker and os.path.exists(marker):
        os.remove(marker)
        _die()


def kill_after_downstream_answer(**_: Any) -> None:
    """Die after the receiver answered a delivery and before anything here recorded it."""
    if settings.FAULT_KILL_AFTER_DOWNSTREAM:
        _die()
