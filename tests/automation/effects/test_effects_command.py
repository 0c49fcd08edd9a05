from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth.models import Group, User
from django.core.exceptions import PermissionDenied
from django.core.management import CommandError, call_command

from accounts.roles import roles_ensure
from audit.models import AuditEvent
from automation.models import EffectControl


def effects(*args: str) -> str:
    out = StringIO()
    call_command("effects", *args, stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_pause_and_resume_are_recorded_with_who_did_it() -> None:
    roles_ensure()
    User.objects.create_user("lee").groups.add(Group.objects.get(name="ops-leads"))
    assert "paused" in effects("pause", "send_internal_notification", "--user", "lee")
    assert EffectControl.objects.get(name="send_internal_notification").paused
    assert "PAUSED" in effects("status")

    out = effects("resume", "send_internal_notification", "--rate", "5", "--user", "lee")

    control = EffectControl.objects.get(name="send_internal_notification")
    assert "resumed at 5/min" in out
    assert (control.paused, control.rate_per_minute) == (False, 5)
    actions = list(AuditEvent.objects.values_list("action", "actor__username"))
    assert actions == [("effect.paused", "lee"), ("effect.resumed", "lee")]


@pytest.mark.django_db
def test_an_unknown_user_or_date_is_refused() -> None:
    with pytest.raises(CommandError, match="no user"):
        effects("pause", "send_internal_notification", "--user", "ghost")
    with pytest.raises(CommandError, match="not a date"):
        effects("retry-held", "--since", "yesterday", "--reason", "x", "--user", "ghost")


@pytest.mark.django_db
def test_pausing_needs_the_permission() -> None:
    User.objects.create_user("ann")
    with pytest.raises(PermissionDenied):
        effects("pause", "send_internal_notification", "--user", "ann")
    assert not EffectControl.objects.exists()
