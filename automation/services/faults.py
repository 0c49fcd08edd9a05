"""Fault injection for the crash tests: switches the workers read, off in production."""

from __future__ import annotations

import os
import signal

from automation.conf import setting


def fault_kill_once() -> None:
    """Fault injection for the crash tests: SIGKILL this process once, if the marker file
    named by FAULT_KILL_ONCE exists (it is removed first, so a restarted worker goes on)."""
    marker = setting("FAULT_KILL_ONCE")
    if marker and os.path.exists(marker):
        os.remove(marker)
        os.kill(os.getpid(), signal.SIGKILL)
