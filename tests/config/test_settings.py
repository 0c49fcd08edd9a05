"""The production settings never install the development tools, and nothing they load
reaches for them: no devtools app, no /demo/ receiver, no fixture command, no time_machine.
Checked in a fresh process, since this one runs with the tests' dev settings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from config import dev_settings
from config import settings as production_settings

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json, sys
import django
django.setup()
from django.apps import apps
from django.conf import settings
from django.core.management import get_commands
from django.urls import Resolver404, resolve
import config.urls  # every page and API view the product serves
try:
    resolve("/demo/receiver/send_internal_notification")
    demo = True
except Resolver404:
    demo = False
print(json.dumps({
    "installed": list(settings.INSTALLED_APPS),
    "labels": [app.label for app in apps.get_app_configs()],
    "commands": sorted(get_commands()),
    "demo": demo,
    "time_machine": "time_machine" in sys.modules,
}))
"""


def _production() -> dict[str, Any]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings"}
    done = subprocess.run(  # noqa: S603 - our own interpreter
        [sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_production_settings_install_no_development_tools() -> None:
    production = _production()
    assert not [app for app in production["installed"] if app.split(".")[0] == "devtools"]
    assert "receiver" not in production["labels"]
    assert production["demo"] is False
    assert not {"run_fixture", "seed_history", "demo_setup"} & set(production["commands"])
    assert production["time_machine"] is False


def test_the_dev_settings_add_the_development_tools_to_production() -> None:
    added = [
        app for app in dev_settings.INSTALLED_APPS if app not in production_settings.INSTALLED_APPS
    ]
    assert added == ["devtools", "devtools.receiver"]


SHOW_KEY = (
    "import django; django.setup(); from django.conf import settings; print(settings.SECRET_KEY)"
)


def _start(**env: str) -> subprocess.CompletedProcess[str]:
    """Load the production settings in a fresh process with this environment (no key of the
    tests', no debug mode unless given)."""
    unset = ("GATEHOUSE_SECRET_KEY", "GATEHOUSE_DEBUG")
    clean = {k: v for k, v in os.environ.items() if k not in unset}
    env = {**clean, "DJANGO_SETTINGS_MODULE": "config.settings", **env}
    command = [sys.executable, "-c", SHOW_KEY]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)  # noqa: S603


def test_production_refuses_to_start_without_a_secret_key() -> None:
    refused = _start()
    assert refused.returncode != 0
    assert "GATEHOUSE_SECRET_KEY is not set" in refused.stderr
    assert refused.stdout == ""

    assert _start(GATEHOUSE_SECRET_KEY=" ").returncode != 0  # blank is no key
    started = _start(GATEHOUSE_SECRET_KEY="k" * 50)
    assert (started.returncode, started.stdout.strip()) == (0, "k" * 50)


def test_only_a_laptop_in_debug_mode_runs_with_the_public_demo_key() -> None:
    started = _start(GATEHOUSE_DEBUG="1")
    assert (started.returncode, started.stdout.strip()) == (0, production_settings.DEMO_SECRET_KEY)
