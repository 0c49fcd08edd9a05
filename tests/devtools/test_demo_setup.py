"""demo_setup: every role has a demo user who can do its job, including finance approvals."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command

from automation.models import ClassifierModel, IntakeChannel, Run

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
    assert "finance" in out.getvalue()
    assert ClassifierModel.objects.filter(is_active=True).exists()
    assert IntakeChannel.objects.get(name="email").shadow_classifiers == ["learned"]


def test_a_second_start_adds_nothing() -> None:
    call_command("demo_setup", stdout=StringIO())
    runs = Run.objects.count()
    again = StringIO()
    call_command("demo_setup", stdout=again)
    assert Run.objects.count() == runs  # the invalid sample does not fail once more
    assert "already taken in" in again.getvalue()
