"""Settings for the demo and the tests: production's, plus the development tools.

`config.settings` is what a deployment runs; it never installs `devtools` (a test holds
that). pytest, `make demo` (bin/demo) and the reference case set (`run_fixture`) use this
module: it adds the fixture runner, the demo data, the demo receiver under /demo/ and the
fault-injection switches of the crash tests.
"""

from __future__ import annotations

import os

# The tests and the demo run without a secret key of their own: the public demo key (which
# production refuses). Set before production's settings read it; the servers the tests start
# with the production settings inherit it.
os.environ.setdefault("GATEHOUSE_SECRET_KEY", "insecure-demo-key-change-me")

from config.settings import *  # noqa: F403
from config.settings import INSTALLED_APPS, env_bool, env_float, env_list

INSTALLED_APPS = [*INSTALLED_APPS, "devtools", "devtools.receiver"]

# The demo receiver under /demo/: its shared secret (empty: switched off) and the share of
# requests it fails on purpose.
DEMO_RECEIVER_SECRET = os.environ.get("GATEHOUSE_DEMO_RECEIVER_SECRET", "")
DEMO_RECEIVER_FAILURE_RATE = env_float("GATEHOUSE_DEMO_FAILURE_RATE", 0.0)
# Fault injection for the crash tests (devtools.faults): die right after the downstream
# answered an effect delivery.
FAULT_KILL_AFTER_DOWNSTREAM = env_bool("GATEHOUSE_FAULT_KILL_AFTER_DOWNSTREAM", False)
# A marker file; while it exists, the first worker to reach a classifier call removes it and
# dies there (SIGKILL).
FAULT_KILL_ONCE = os.environ.get("GATEHOUSE_FAULT_KILL_ONCE", "")
# The demo's effects go to its receiver on this machine, and the tests' to receivers on
# 127.0.0.1: loopback is allowed here, never by production's default.
GATEHOUSE_EFFECT_PRIVATE_HOSTS = env_list("GATEHOUSE_EFFECT_PRIVATE_HOSTS", "127.0.0.0/8,::1")
# The variable the demo's notifications are signed with (bin/demo sets it to the receiver's
# secret: the receiver's own setting, a GATEHOUSE_ variable, is the server's and never sent).
GATEHOUSE_EFFECT_SECRETS = frozenset(
    env_list("GATEHOUSE_EFFECT_SECRETS", "DEMO_RECEIVER_SIGNING_KEY")
)

# The demo's mail (notifications, replies) is written to files in this folder, one file per
# message, instead of being sent (bin/demo sets it to .demo/mail); unset, mail goes as the
# production settings say (the tests use Django's in-memory outbox).
DEMO_MAIL_DIR = os.environ.get("GATEHOUSE_DEMO_MAIL_DIR", "")
if DEMO_MAIL_DIR:
    EMAIL_BACKEND = "django.core.mail.backends.filebased.EmailBackend"
    EMAIL_FILE_PATH = DEMO_MAIL_DIR
