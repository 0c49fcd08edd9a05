"""Pausing and resuming an effect: an action that would change nothing is refused in words,
and writes nothing (no audit row, no control row), from the page, the admin and the command."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth.models import Group, User
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from accounts.roles import roles_ensure
from audit.models import AuditAction, AuditEvent
from automation.effects.services import effect_pause, effect_resume
from automation.models import EffectControl
from core.errors import ServiceError

EFFECT = "send_internal_notification"
CONTROLS = (AuditAction.EFFECT_PAUSED, AuditAction.EFFECT_RESUMED)


@pytest.fixture
def lead(db: None) -> User:
    roles_ensure()
    user = User.objects.create_user("lee", is_staff=True)
    user.groups.add(Group.objects.get(name="ops-leads"))
    return user


def trail() -> list[str]:
    return list(
        AuditEvent.objects.filter(action__in=CONTROLS)
        .order_by("pk")
        .values_list("action", flat=True)
    )


def test_pausing_a_paused_effect_is_refused_and_writes_nothing(lead: User) -> None:
    effect_pause(name=EFFECT, user=lead)
    before = EffectControl.objects.values().get()

    with pytest.raises(ServiceError) as refused:
        effect_pause(name=EFFECT, user=lead)

    assert refused.value.code == "already_paused"
    assert "already paused" in refused.value.message
    assert trail() == [AuditAction.EFFECT_PAUSED]
    assert EffectControl.objects.values().get() == before


def test_resuming_an_effect_that_is_not_paused_is_refused_and_writes_nothing(lead: User) -> None:
    with pytest.raises(ServiceError) as never_paused:
        effect_resume(name=EFFECT, user=lead, rate_per_minute=None)
    assert never_paused.value.code == "not_paused"
    assert not EffectControl.objects.exists()

    effect_pause(name=EFFECT, user=lead)
    effect_resume(name=EFFECT, user=lead, rate_per_minute=10)
    with pytest.raises(ServiceError, match="not paused") as running:
        effect_resume(name=EFFECT, user=lead, rate_per_minute=None)

    assert running.value.code == "not_paused"
    assert "10 per minute" in running.value.message
    assert trail() == [AuditAction.EFFECT_PAUSED, AuditAction.EFFECT_RESUMED]
    assert EffectControl.objects.get().rate_per_minute == 10


def test_the_page_says_why_it_was_refused(lead: User) -> None:
    client = Client()
    client.force_login(lead)
    pause = reverse("queues:effect_control", args=[EFFECT, "pause"])
    resume = reverse("queues:effect_control", args=[EFFECT, "resume"])

    client.post(pause)
    again = client.post(pause, follow=True)
    running = client.post(resume, {"rate": ""}, follow=True)
    client.post(resume, {"rate": ""})
    resumed_again = client.post(resume, {"rate": ""}, follow=True)

    assert again.status_code == 200
    assert "is already paused" in again.content.decode()
    assert running.status_code == 200 and "resumed" in running.content.decode()
    assert "is not paused" in resumed_again.content.decode()
    assert trail() == [AuditAction.EFFECT_PAUSED, AuditAction.EFFECT_RESUMED]


def test_the_admin_actions_say_which_effects_were_left_as_they_were(lead: User) -> None:
    lead.is_superuser = True
    lead.save()
    client = Client()
    client.force_login(lead)
    effect_pause(name=EFFECT, user=lead)
    effect_pause(name="create_follow_up", user=lead)
    effect_resume(name="create_follow_up", user=lead, rate_per_minute=None)
    url = reverse("admin:automation_effectcontrol_changelist")
    ids = [str(pk) for pk in EffectControl.objects.values_list("pk", flat=True)]

    page = client.post(url, {"action": "pause", "_selected_action": ids}, follow=True)

    text = page.content.decode()
    assert page.status_code == 200
    assert "paused 1 effect(s)" in text.lower()
    assert "is already paused" in text
    paused, resumed = AuditAction.EFFECT_PAUSED, AuditAction.EFFECT_RESUMED
    assert trail() == [paused, paused, resumed, paused]  # the last: create_follow_up only


def test_the_command_refuses_in_words(lead: User) -> None:
    call_command("effects", "pause", EFFECT, "--user", lead.username, stdout=StringIO())

    with pytest.raises(CommandError, match="already paused"):
        call_command("effects", "pause", EFFECT, "--user", lead.username, stdout=StringIO())
    call_command("effects", "resume", EFFECT, "--user", lead.username, stdout=StringIO())
    with pytest.raises(CommandError, match="not paused"):
        call_command("effects", "resume", EFFECT, "--user", lead.username, stdout=StringIO())
    assert trail() == [AuditAction.EFFECT_PAUSED, AuditAction.EFFECT_RESUMED]
