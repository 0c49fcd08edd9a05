"""Policy versions in the console: amount limits, activation, simulation, the editor."""

from __future__ import annotations

from decimal import Decimal
from io import StringIO
from typing import Any

import pytest
import yaml
from django.contrib.auth.models import Group, User
from django.core.exceptions import PermissionDenied
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounts.roles import roles_ensure
from audit.models import AuditEvent
from automation.models import Effect, Run, Simulation, State
from automation.recovery.simulation import simulation_process, simulation_start
from policy.evaluation import EventFacts, Interpretation, Verdict, evaluate
from policy.models import PolicyVersion
from policy.services import (
    DEFAULTS_DIR,
    PolicyError,
    parse_policy_text,
    policy_version_activate,
    policy_version_create,
)
from tests.conftest import Pipeline, decision_for, make_event

POLICY_1 = yaml.safe_load((DEFAULTS_DIR / "policy-1.yaml").read_text())


def document(**changes: Any) -> str:
    return yaml.safe_dump({**POLICY_1, **changes})


def save(**changes: Any) -> PolicyVersion:
    return policy_version_create(document=parse_policy_text(document(**changes)))[0]


def lead() -> User:
    roles_ensure()
    user = User.objects.create_user("lee")
    user.groups.add(Group.objects.get(name="ops-leads"))
    return user


# --- amount limits -------------------------------------------------------------------

LIMITS = {
    "amount_limits": {"standard": {"approval_above": "1000", "block_above": "5000"}},
    "amount_approval": {"group": "finance-approvers", "approvers": 2},
}


@pytest.mark.parametrize(
    ("amount", "verdict", "failed_rule"),
    [
        ("999.99", Verdict.EXECUTE, None),
        ("1000.01", Verdict.APPROVE, "amount.standard.approval"),
        ("5000.01", Verdict.BLOCK, "amount.standard.block amount.standard.approval"),
    ],
)
def test_amount_limits_per_tier_ask_for_approval_or_block(
    amount: str, verdict: Verdict, failed_rule: str | None
) -> None:
    policy = parse_policy_text(document(version="limits", **LIMITS))
    facts = EventFacts("billing", "send_internal_notification", "standard")
    reading = Interpretation(
        "billing", "finance", "send_internal_notification", amount=Decimal(amount)
    )

    decision = evaluate(policy, facts, reading)

    assert decision.verdict == verdict
    assert [r.rule_id for r in decision.rules if not r.passed] == (
        failed_rule.split() if failed_rule else []
    )
    if verdict == Verdict.APPROVE:
        assert decision.approval is not None and decision.approval.approvers == 2


def test_an_amount_limit_without_an_approver_is_refused_naming_it() -> None:
    with pytest.raises(PolicyError, match="amount_approval"):
        parse_policy_text(document(version="x", amount_limits=LIMITS["amount_limits"]))
    with pytest.raises(PolicyError, match="block_above"):
        parse_policy_text(
            document(
                version="y",
                amount_limits={"standard": {"approval_above": 10, "block_above": 5}},
                amount_approval=LIMITS["amount_approval"],
            )
        )


# --- activation and versions on runs --------------------------------------------------


@pytest.mark.django_db
def test_activation_needs_the_permission_and_is_recorded(policy: None) -> None:
    save(version="policy-2")
    with pytest.raises(PermissionDenied):
        policy_version_activate(name="policy-2", user=User.objects.create_user("nobody"))
    person = lead()
    policy_version_activate(name="policy-2", user=person)
    event = AuditEvent.objects.get(action="policy.activated", data__version="policy-2")
    assert (event.actor, event.data) == (person, {"version": "policy-2", "previous": "policy-1"})


@pytest.mark.django_db
def test_activation_page_refuses_a_person_without_the_permission_whatever_the_name(
    policy: None,
) -> None:
    """Which version names exist is not told to someone who may not activate any."""
    save(version="policy-2")
    client = Client()
    client.force_login(User.objects.create_user("nobody"))

    for name in ("policy-2", "no-such-version"):
        url = reverse("policy:activate", args=[name])
        assert client.post(url).status_code == 403
        assert client.get(url).status_code == 403  # the confirmation page too
    assert PolicyVersion.objects.get(is_active=True).name == "policy-1"


def test_every_run_records_the_version_that_decided_it(pipeline: Pipeline) -> None:
    first = make_event(event_id="evt-1")
    before = pipeline.run(pipeline.submit(first, [decision_for(first)]))
    save(version="policy-2")
    policy_version_activate(name="policy-2")
    second = make_event(event_id="evt-2")
    after = pipeline.run(pipeline.submit(second, [decision_for(second)]))

    assert Run.objects.get(pk=before.pk).policy_version == "policy-1"
    assert Run.objects.get(pk=after.pk).policy_version == "policy-2"
    assert all(
        e.authorization["policy_version"] == e.run.policy_version
        for e in Effect.objects.select_related("run")
    )


# --- simulation ----------------------------------------------------------------------


def test_a_threshold_change_moves_a_run_to_low_confidence_in_simulation_only(
    pipeline: Pipeline,
) -> None:
    event = make_event(event_id="evt-sim")
    reading = decision_for(event)
    reading["value"]["confidence"] = 0.6
    run = pipeline.run(pipeline.submit(event, [reading]))
    assert run.state == State.COMPLETED
    save(version="policy-2", confidence={"default": 0.8, "per_category": {}})
    runs_before = list(Run.objects.values())
    effects_before = list(Effect.objects.values())

    simulation = simulation_start(
        version="policy-2",
        since=run.created_at,
        until=run.created_at,
        user=None,
        in_worker=False,
    )
    simulation = simulation_process(simulation_id=simulation.pk)

    assert (simulation.total, simulation.status) == (1, "finished")
    [change] = simulation.changes
    assert (change["run"], change["old"], change["new"]) == (run.pk, "execute", "low_confidence")
    assert [(r["rule_id"], r["change"]) for r in change["rules"]] == [
        ("confidence.support", "now stops it")
    ]
    assert list(Run.objects.values()) == runs_before
    assert list(Effect.objects.values()) == effects_before


def test_a_new_rule_that_passes_is_not_what_made_the_difference(pipeline: Pipeline) -> None:
    event = make_event(event_id="evt-sim-2")
    reading = decision_for(event)
    reading["value"]["confidence"] = 0.6
    run = pipeline.run(pipeline.submit(event, [reading]))
    # A threshold the run meets, and one for its category it does not: only the second
    # changed the decision.
    save(version="policy-3", confidence={"default": 0.5, "per_category": {"support": 0.9}})
    simulation = simulation_process(
        simulation_id=simulation_start(
            version="policy-3",
            since=run.created_at,
            until=run.created_at,
            user=None,
            in_worker=False,
        ).pk
    )
    [change] = simulation.changes
    assert [r["change"] for r in change["rules"]] == ["now stops it"]
    assert all(not r["passed"] for r in change["rules"])


def test_reevaluate_command_reports_the_changes(pipeline: Pipeline) -> None:
    event = make_event(event_id="evt-cmd")
    reading = decision_for(event)
    reading["value"]["confidence"] = 0.6
    run = pipeline.run(pipeline.submit(event, [reading]))
    save(version="policy-2", confidence={"default": 0.8, "per_category": {}})
    out = StringIO()
    call_command(
        "reevaluate", "--policy", "policy-2", "--since", run.created_at.isoformat(), stdout=out
    )
    assert "1 decision(s) would change" in out.getvalue()
    assert "execute -> low_confidence: 1" in out.getvalue()


# --- the console ---------------------------------------------------------------------


def test_editor_refuses_an_invalid_document_naming_the_field(policy: None) -> None:
    client = Client()
    client.force_login(lead())
    bad = document(version="policy-2", confidence={"default": 1.5, "per_category": {}})
    page = client.post(reverse("policy:new"), {"document": bad})
    assert page.status_code == 400
    assert "confidence.default" in page.content.decode()
    assert not PolicyVersion.objects.filter(name="policy-2").exists()
    broken = client.post(reverse("policy:new"), {"document": "routes: [\n"})
    assert "not valid YAML" in broken.content.decode()


def test_editor_saves_a_draft_shows_the_diff_simulates_and_activates(
    pipeline: Pipeline,
) -> None:
    event = make_event(event_id="evt-ui")
    reading = decision_for(event)
    reading["value"]["confidence"] = 0.6
    pipeline.submit(event, [reading])
    client = Client()
    client.force_login(lead())

    form = client.get(reverse("policy:new")).content.decode()
    assert "version: policy-2" in form
    text = document(version="policy-2", confidence={"default": 0.8, "per_category": {}})
    saved = client.post(reverse("policy:new"), {"document": text}, follow=True)
    page = saved.content.decode()
    assert "Saved policy-2 as a draft." in page
    assert "+  default: 0.8" in page and "-  default: 0.0" in page
    assert not PolicyVersion.objects.get(name="policy-2").is_active

    with pipeline.capture():
        started = client.post(reverse("policy:simulate", args=["policy-2"]), {})
    pipeline.drain()
    result = client.get(started["Location"]).content.decode()
    moved = (
        "1 run that the active version policy-1 sends straight through would now go to a person "
        "as an unsure reading."
    )
    assert moved in result

    url = reverse("policy:activate", args=["policy-2"])
    confirmation = client.get(url).content.decode()
    assert moved in confirmation
    simulation = Simulation.objects.get()
    client.post(url, {"simulation": simulation.pk})
    assert PolicyVersion.objects.get(is_active=True).name == "policy-2"
    assert Simulation.objects.count() == 1
    listing = client.get(reverse("policy:list")).content.decode()
    assert 'data-testid="impact"' in listing and "policy-2" in listing


def test_an_extracted_amount_over_the_tier_limit_blocks_the_run(pipeline: Pipeline) -> None:
    save(version="policy-2", **LIMITS)
    policy_version_activate(name="policy-2")
    event = make_event(
        event_id="evt-amount", request_type="billing", requested_action="send_internal_notification"
    )
    reading = decision_for(event)
    reading["value"]["fields"] = {"amount": {"value": "6,000.00 EUR", "confidence": 0.9}}
    run = pipeline.run(pipeline.submit(event, [reading]))
    assert run.state == State.BLOCKED
    assert any(r["rule_id"] == "amount.standard.block" and not r["passed"] for r in run.rules)


def test_only_those_who_author_policy_may_simulate_it(policy: None) -> None:
    roles_ensure()
    save(version="policy-2")
    url = reverse("policy:simulate", args=["policy-2"])
    auditor = User.objects.create_user("audrey")
    auditor.groups.add(Group.objects.get(name="auditors"))
    client = Client()
    client.force_login(auditor)

    assert client.post(url, {}).status_code == 403
    assert (
        'action="' + url + '"'
        not in client.get(reverse("policy:detail", args=["policy-2"])).content.decode()
    )  # no form offered either
    with pytest.raises(PermissionDenied):
        simulation_start(
            version="policy-2", since=timezone.now(), until=timezone.now(), user=auditor
        )
    assert not Simulation.objects.exists()

    client.force_login(lead())
    assert client.post(url, {}).status_code == 302
    assert Simulation.objects.count() == 1


# --- risk signals ------------------------------------------------------------------------

SIGNAL = {"account_compromise": {"action": "hold", "phrases": {"en": ["did not request"]}}}


def test_editor_refuses_a_signal_that_cannot_work_naming_it(policy: None) -> None:
    client = Client()
    client.force_login(lead())
    bad = document(
        version="policy-2",
        signals={"account_compromise": {"action": "hold", "patterns": ["(a+)+"]}},
    )
    page = client.post(reverse("policy:new"), {"document": bad})
    assert page.status_code == 400
    assert "signals.account_compromise.patterns" in page.content.decode()
    assert not PolicyVersion.objects.filter(name="policy-2").exists()


def test_a_new_signal_shows_in_the_diff_and_moves_a_run_in_simulation_only(
    pipeline: Pipeline,
) -> None:
    event = make_event(event_id="evt-signal", body="A code came that I did not request.")
    run = pipeline.run(pipeline.submit(event, [decision_for(event)]))
    assert run.state == State.COMPLETED
    client = Client()
    client.force_login(lead())
    text = document(version="policy-2", signals=SIGNAL)

    page = client.post(reverse("policy:new"), {"document": text}, follow=True)
    assert "+signals:" in page.content.decode()
    simulation = simulation_start(
        version="policy-2", since=run.created_at, until=run.created_at, user=None, in_worker=False
    )
    simulation = simulation_process(simulation_id=simulation.pk)

    [change] = simulation.changes
    assert (change["old"], change["new"]) == ("execute", "risk_signal")
    assert [r["rule_id"] for r in change["rules"]] == ["signal.account_compromise"]
    run.refresh_from_db()
    assert run.state == State.COMPLETED
