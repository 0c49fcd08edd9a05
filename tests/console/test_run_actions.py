"""The run page offers what the state machine allows now, and nothing else is reachable.

Each action is a django-fsm transition with `custom["action"]`; the page lists exactly the
available ones the person's role permits, and a hand-made POST of any other is refused
before a service sees it: no RecoveryAction, no audit row, the run unchanged.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from audit.models import AuditEvent
from automation.models import Outcome, RecoveryAction, Run, State
from automation.recovery.actions import run_actions
from devtools.services import checkpoint_import
from policy.services import DEFAULT_VERSION, REFERENCE_VERSION, policy_version_activate
from tests.automation.recovery.test_recovery import (
    completed,
    exhausted,
    good_reading,
    invalid,
    person,
)
from tests.automation.test_admin import awaiting_approval, held_for_its_effect
from tests.conftest import TIMEOUT, Pipeline, decision_for, make_event

DEMO_SAMPLES = Path(__file__).resolve().parents[2] / "devtools" / "demo_samples.json"


def offered(run: Run, user: User) -> list[str]:
    return [a.name for a in run_actions(Run.objects.get(pk=run.pk), user)]


def low_confidence(pipeline: Pipeline) -> Run:
    """Read at 0.2 under default-1 (which asks 0.6): held; policy-1 is active again after."""
    policy_version_activate(name=DEFAULT_VERSION)
    event = make_event(event_id="evt-unsure")
    reading = decision_for(event)
    reading["value"]["confidence"] = 0.2
    run = pipeline.run(pipeline.submit(event, [reading]))
    policy_version_activate(name=REFERENCE_VERSION)
    assert (run.state, run.outcome) == (State.NEEDS_REVIEW, Outcome.LOW_CONFIDENCE)
    return run


def blocked(pipeline: Pipeline) -> Run:
    event = make_event(event_id="evt-blocked")
    run = pipeline.run(
        pipeline.submit(event, [decision_for(event, requested_effect="send_internal_notification")])
    )
    return run


@pytest.fixture
def lead(db: None) -> User:
    return person("lee", "ops-leads")


def test_each_state_offers_exactly_what_its_transitions_allow(
    pipeline: Pipeline, lead: User, settings: object
) -> None:
    unsure = low_confidence(pipeline)
    cases = {
        "classifier ran out": (exhausted(pipeline), ["correct", "retry", "resolve", "abandon"]),
        "unusable reading": (invalid(pipeline), ["correct", "resolve", "abandon"]),
        "unsure reading": (unsure, ["correct", "resolve", "abandon"]),
        "waiting for approval": (awaiting_approval(pipeline), ["reconsider"]),
        "done": (completed(pipeline), ["replay"]),
        "stopped by policy": (blocked(pipeline), ["replay"]),
    }
    for name, (run, expected) in cases.items():
        assert offered(run, lead) == expected, name


def test_a_held_effect_is_retried_not_resumed_or_reread(
    pipeline: Pipeline, lead: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = held_for_its_effect(pipeline, monkeypatch)

    assert offered(run, lead) == ["retry_effect", "resolve", "abandon"]


def test_a_held_effect_whose_attempts_are_used_up_says_so_never_will_try_again(
    pipeline: Pipeline, lead: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = held_for_its_effect(pipeline, monkeypatch)
    client = Client()
    client.force_login(lead)

    page = client.get(reverse("runs:run", args=[run.pk])).content.decode()

    line = page.split('data-testid="effect"', 1)[1].split("</p>", 1)[0]
    assert "Will try again" not in line
    assert "Gave up</strong> after 1 attempt" in line


def test_what_a_role_may_not_do_is_not_offered(pipeline: Pipeline) -> None:
    run = exhausted(pipeline)
    auditor = person("aud", "auditors")
    staff = person("sam", "recovery-staff")

    assert offered(run, auditor) == []
    assert "correct" not in offered(run, staff)  # staff recover; ops leads correct
    assert "retry" in offered(run, staff)


def test_a_run_held_for_an_unusable_reading_is_not_offered_resume_and_a_forged_post_is_refused(
    pipeline: Pipeline, lead: User
) -> None:
    """Bug 1: Resume was offered on a classification_invalid run and answered state_conflict."""
    run = invalid(pipeline)
    client = Client()
    client.force_login(lead)

    page = client.get(reverse("runs:run", args=[run.pk])).content.decode()
    assert 'data-action="resume"' not in page
    assert 'data-action="retry"' not in page
    assert 'data-action="correct"' in page
    audit_before = AuditEvent.objects.filter(run=run).count()

    for action in ("resume", "retry", "replay", "reconsider", "retry_effect"):
        response = client.post(reverse("runs:recover", args=[run.pk, action]), {"reason": "forged"})
        assert response.status_code == 303, action
        shown = [str(m) for m in response.wsgi_request._messages]  # type: ignore[attr-defined]
        assert any("is not possible for this run now" in m for m in shown), action
        assert any("Unusable reading" in m for m in shown), action

    after = Run.objects.get(pk=run.pk)
    assert (after.state, after.outcome, after.version) == (run.state, run.outcome, run.version)
    assert not RecoveryAction.objects.filter(run=run).exists()
    assert AuditEvent.objects.filter(run=run).count() == audit_before


def test_a_forged_queue_action_that_is_not_offered_is_refused(
    pipeline: Pipeline, lead: User
) -> None:
    run = completed(pipeline)  # in no queue
    client = Client()
    client.force_login(lead)

    response = client.post(reverse("runs:queue_action", args=[run.pk, "claim"]))

    assert response.status_code == 303
    assert Run.objects.get(pk=run.pk).owner is None
    assert not RecoveryAction.objects.exists()


def test_retry_of_a_run_whose_classifier_ran_out_can_succeed(
    pipeline: Pipeline, lead: User
) -> None:
    """Bug 1: Retry on demo-013 could never succeed: its recorded classifier had nothing left.

    The test channel allows two attempts; a third recorded outcome is what the retry reads."""
    event = make_event(event_id="evt-later")
    run = pipeline.run(pipeline.submit(event, [TIMEOUT, TIMEOUT, decision_for(event)]))
    assert run.outcome == Outcome.RETRY_EXHAUSTED
    client = Client()
    client.force_login(lead)

    with pipeline.capture():
        response = client.post(
            reverse("runs:recover", args=[run.pk, "retry"]), {"reason": "classifier back"}
        )
    pipeline.drain()

    shown = [str(m) for m in response.wsgi_request._messages]  # type: ignore[attr-defined]
    assert shown == ["Retry the classifier: done. The run is now “Looked up”."]
    assert Run.objects.get(pk=run.pk).state == State.COMPLETED


def test_every_demo_sample_held_for_its_classifier_has_a_reading_for_its_retry() -> None:
    """The demo's classifier timeouts end in a reading: the demo's Retry button works."""
    cases = json.loads(DEMO_SAMPLES.read_text(encoding="utf-8"))["cases"]
    timed_out = [c for c in cases if any(o["type"] == "timeout" for o in c.get("classifier", []))]
    assert timed_out
    for case in timed_out:
        assert case["classifier"][-1]["type"] == "decision", case["id"]


def test_flash_messages_are_words_not_codes(pipeline: Pipeline, lead: User) -> None:
    """Flash messages were internal codes: "Retry: enriched", "Abandon: failed"."""
    run = exhausted(pipeline)
    client = Client()
    client.force_login(lead)

    response = client.post(
        reverse("runs:recover", args=[run.pk, "abandon"]),
        {"reason": "customer withdrew", "evidence": "phone call on Monday"},
    )

    shown = [str(m) for m in response.wsgi_request._messages]  # type: ignore[attr-defined]
    assert shown == ["Abandon: done. The run is now “Failed”."]
    assert "failed" not in shown[0].split("“")[0]


def test_abandon_without_evidence_is_refused_in_words(pipeline: Pipeline, lead: User) -> None:
    run = exhausted(pipeline)
    client = Client()
    client.force_login(lead)

    response = client.post(
        reverse("runs:recover", args=[run.pk, "abandon"]), {"reason": "customer withdrew"}
    )

    shown = [str(m) for m in response.wsgi_request._messages]  # type: ignore[attr-defined]
    assert shown == ["Abandon: describe what was done, or why it is dropped."]
    assert Run.objects.get(pk=run.pk).state == State.NEEDS_REVIEW


def test_the_correction_message_names_only_what_changed(pipeline: Pipeline, lead: User) -> None:
    """It listed all ten fields as corrected when one changed."""
    unsure = low_confidence(pipeline)
    client = Client()
    client.force_login(lead)
    reading = unsure.classification
    form = {
        "category": reading["category"],
        "recommended_route": reading["recommended_route"],
        "requested_effect": reading["requested_effect"],
        "reason_code": "support_request_checked",
        "reason": "read it",
    }

    response = client.post(reverse("runs:correct", args=[unsure.pk]), form)

    shown = [str(m) for m in response.wsgi_request._messages]  # type: ignore[attr-defined]
    changed = RecoveryAction.objects.get(run=unsure, action="correct").data["changed"]
    assert set(changed) == {"confidence", "reason_code"}  # the person's reading counts 1.0
    assert shown == ["Corrected reason code; policy decides again."]


def test_correcting_an_unusable_reading_records_only_what_the_person_changed(
    pipeline: Pipeline, lead: User
) -> None:
    """With no accepted reading, every field counted as changed ("all ten fields")."""
    run = invalid(pipeline)  # the classifier proposed delete_record
    client = Client()
    client.force_login(lead)
    form = {
        "category": "support",
        "recommended_route": "service_desk",
        "requested_effect": "create_follow_up",
        "reason_code": "support_request",
        "reason": "the effect was misread",
    }

    response = client.post(reverse("runs:correct", args=[run.pk]), form)

    shown = [str(m) for m in response.wsgi_request._messages]  # type: ignore[attr-defined]
    assert shown == ["Corrected requested effect; policy decides again."]


def test_the_correction_form_shows_every_fields_problem_at_once(
    pipeline: Pipeline, lead: User
) -> None:
    """With Reason empty, only "This field is required" was shown: the amount and the date
    typed beside it got no message."""
    event = make_event(event_id="evt-two-wrong")
    reading = decision_for(event)
    reading["value"]["fields"] = {
        "amount": {"value": "1.250.00 EUR", "confidence": 0.8},
        "due_date": {"value": "soon", "confidence": 0.8},
    }
    run = pipeline.run(pipeline.submit(event, [reading]))
    assert run.outcome == Outcome.EXTRACTION_INVALID
    client = Client()
    client.force_login(lead)
    form = {
        "category": "support",
        "recommended_route": "service_desk",
        "requested_effect": "create_follow_up",
        "reason_code": "not valid!",
        "field_amount": "12.34.56",
        "field_due_date": "next Tuesday-ish",
        "reason": "",
    }

    response = client.post(reverse("runs:correct", args=[run.pk]), form)

    assert response.status_code == 400
    errors = response.context["form"].errors
    assert set(errors) == {"reason", "reason_code", "field_amount", "field_due_date"}
    page = response.content.decode()
    for name in errors:
        assert f'data-testid="error-{name}"' in page, name
    assert "&#x27;12.34.56&#x27; has two decimal separators" in page
    assert "&#x27;next Tuesday-ish&#x27; is not a date" in page
    assert Run.objects.get(pk=run.pk).outcome == Outcome.EXTRACTION_INVALID
    assert not RecoveryAction.objects.filter(run=run).exists()
    empty = client.post(reverse("runs:correct", args=[run.pk]), {})
    assert empty.status_code == 400
    assert "reason" in empty.context["form"].errors


def test_an_approver_reads_the_run_of_a_request_routed_to_them(pipeline: Pipeline) -> None:
    """They got 403 on the run page of a request routed to them."""
    run = awaiting_approval(pipeline)
    other = exhausted(pipeline)
    client = Client()
    client.force_login(person("ana", "security-approvers"))

    page = client.get(reverse("runs:run", args=[run.pk]))

    assert page.status_code == 200
    assert "Review the approval" in page.content.decode()
    assert client.get(reverse("runs:run", args=[other.pk])).status_code == 403


def test_resume_is_offered_once_a_usable_reading_is_stored_for_the_run(
    pipeline: Pipeline, lead: User
) -> None:
    """An operator imports a reading for a run whose own was unusable: now it can resume."""
    run = invalid(pipeline)
    assert "resume" not in offered(run, lead)

    checkpoint_import(run_id=run.pk, classification=good_reading(), actor_label="ops")

    assert offered(run, lead) == ["correct", "resume", "resolve", "abandon"]
