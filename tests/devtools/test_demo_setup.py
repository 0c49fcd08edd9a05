"""demo_setup: every role has a demo user who can do its job, including finance approvals."""

from __future__ import annotations

import os
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command

from audit.models import AuditEvent
from automation.models import ClassifierModel, IntakeChannel, IntakeRecord, Run

pytestmark = pytest.mark.django_db


def test_the_demo_has_someone_for_every_approval_group_and_the_learning_loop() -> None:
    out = StringIO()
    call_command("demo_setup", stdout=out)

    groups = {
        name
        for user in User.objects.prefetch_related("groups")
        for name in user.groups.values_list("name", flat=True)
    }
    # Amount approvals and bank-detail changes are routed to finance-approvers: someone
    # in the demo must be able to decide them.
    assert {"security-approvers", "finance-approvers", "ops-leads"} <= groups
    finance = User.objects.get(username="finance")
    assert list(finance.groups.values_list("name", flat=True)) == ["finance-approvers"]
    assert finance.has_perm("approvals.decide_approvalrequest")
    assert "finance" in out.getvalue()
    assert ClassifierModel.objects.filter(is_active=True).exists()
    assert IntakeChannel.objects.get(name="email").shadow_classifiers == ["learned"]


def test_every_demo_user_has_an_address_so_mentions_and_notifications_reach_them() -> None:
    call_command("demo_setup", stdout=StringIO())

    addresses = dict(User.objects.values_list("username", "email"))
    assert addresses["opslead"] == "opslead@gatehouse.example"
    assert all(addresses.values()), addresses


def test_the_demos_mail_is_written_to_the_folder_bin_demo_names(tmp_path: Path) -> None:
    """dev_settings with GATEHOUSE_DEMO_MAIL_DIR (bin/demo: .demo/mail) writes each message
    to a file there."""
    script = (
        "import django; django.setup()\n"
        "from django.core.mail import send_mail\n"
        "send_mail('Hello', 'Body', 'gatehouse@localhost', ['opslead@gatehouse.example'])\n"
    )
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.dev_settings",
        "GATEHOUSE_DEMO_MAIL_DIR": str(tmp_path),
    }
    subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, check=True, timeout=60)  # noqa: S603

    written = list(tmp_path.iterdir())
    assert len(written) == 1
    assert "To: opslead@gatehouse.example" in written[0].read_text()
    assert "GATEHOUSE_DEMO_MAIL_DIR" in (ROOT / "bin" / "demo").read_text()


def test_a_second_start_adds_nothing() -> None:
    call_command("demo_setup", stdout=StringIO())
    runs = Run.objects.count()
    again = StringIO()
    call_command("demo_setup", stdout=again)
    assert Run.objects.count() == runs  # the invalid sample does not fail once more
    assert "already taken in" in again.getvalue()


ROOT = Path(__file__).resolve().parents[2]


def start_the_demo() -> None:
    """What bin/demo prepares on every start: one command."""
    call_command("prepare_demo", stdout=StringIO(), stderr=StringIO())


def row_counts() -> dict[str, int]:
    return {model.__name__: model.objects.count() for model in (Run, IntakeRecord, AuditEvent)}


def test_a_second_start_of_the_whole_demo_adds_no_run_record_or_audit_event(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(ROOT)  # bin/demo runs from the repository's root
    start_the_demo()
    first = row_counts()
    assert first["Run"] > 0 and first["IntakeRecord"] > 0

    start_the_demo()

    assert row_counts() == first
