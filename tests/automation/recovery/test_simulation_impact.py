"""A simulation's impact is what the draft changes against the active version, over the same
runs, both judged again on the runs' stored readings; how a run was first decided (under the
version active then) is a separate, labelled column, never what is counted."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from django.contrib.auth.models import Group, User
from django.test import Client
from django.urls import reverse

from accounts.roles import roles_ensure
from automation.models import Run, Simulation, State
from automation.recovery.activation import activation_simulation
from automation.recovery.simulation import simulation_process, simulation_start
from policy.services import (
    DEFAULTS_DIR,
    parse_policy_text,
    policy_version_activate,
    policy_version_create,
)
from tests.conftest import Pipeline, decision_for, make_event

POLICY_1 = yaml.safe_load((DEFAULTS_DIR / "policy-1.yaml").read_text())
SIGNAL = {"account_compromise": {"action": "hold", "phrases": {"en": ["did not request"]}}}
# policy-2 adds a risk signal; policy-3 is policy-2 with one threshold raised.
POLICY_2 = {**POLICY_1, "version": "policy-2", "signals": SIGNAL}
POLICY_3 = {**POLICY_2, "version": "policy-3", "confidence": {"default": 0.8, "per_category": {}}}


def save(document: dict[str, Any]) -> None:
    policy_version_create(document=parse_policy_text(yaml.safe_dump(document)))


def decided(pipeline: Pipeline, event_id: str, *, body: str, confidence: float) -> Run:
    event = make_event(event_id=event_id, body=body)
    reading = decision_for(event)
    reading["value"]["confidence"] = confidence
    return pipeline.run(pipeline.submit(event, [reading]))


@pytest.fixture
def runs(pipeline: Pipeline) -> list[Run]:
    """Three runs decided under policy-1, then policy-2 active: two of them its signal holds
    (which policy-1 let through), one only policy-3's threshold would move."""
    found = [
        decided(pipeline, "evt-a", body="A code came that I did not request.", confidence=0.95),
        decided(pipeline, "evt-b", body="Reset done? I did not request it.", confidence=0.95),
        decided(pipeline, "evt-c", body="Please create a follow-up.", confidence=0.6),
    ]
    assert [(r.state, r.policy_version) for r in found] == [(State.COMPLETED, "policy-1")] * 3
    save(POLICY_2)
    policy_version_activate(name="policy-2")
    save(POLICY_3)
    return found


def simulate(runs: list[Run], version: str) -> Simulation:
    started = simulation_start(
        version=version,
        since=runs[0].created_at,
        until=runs[-1].created_at,
        user=None,
        in_worker=False,
    )
    return simulation_process(simulation_id=started.pk)


def test_a_one_threshold_draft_counts_only_the_runs_that_threshold_moves(runs: list[Run]) -> None:
    simulation = simulate(runs, "policy-3")

    assert (simulation.total, simulation.baseline_version) == (3, "policy-2")
    [change] = simulation.changes
    assert (change["run"], change["old"], change["new"]) == (
        runs[2].pk,
        "execute",
        "low_confidence",
    )
    assert (change["first"], change["first_version"]) == ("execute", "policy-1")
    assert [(r["rule_id"], r["change"]) for r in change["rules"]] == [
        ("confidence.support", "now stops it")
    ]


def test_the_active_version_simulated_changes_nothing(runs: list[Run]) -> None:
    """Against how the runs were first decided, the signal's two holds would show."""
    assert simulate(runs, "policy-2").changes == []


def test_a_run_first_decided_otherwise_shows_it_in_its_own_column(runs: list[Run]) -> None:
    """A draft that drops the signal moves the two held runs back, each of them first decided
    the draft's way: the first decision is shown, the change is still against the active."""
    save({**POLICY_1, "version": "policy-4"})
    changes = simulate(runs, "policy-4").changes

    assert sorted((c["run"], c["first"], c["old"], c["new"]) for c in changes) == [
        (runs[0].pk, "execute", "risk_signal", "execute"),
        (runs[1].pk, "execute", "risk_signal", "execute"),
    ]


def test_a_simulation_against_another_version_than_the_active_one_cannot_activate(
    runs: list[Run],
) -> None:
    simulation = simulate(runs, "policy-3")
    Simulation.objects.filter(pk=simulation.pk).update(baseline_version="policy-1")

    fresh, problem = activation_simulation(name="policy-3")

    assert fresh is None
    assert problem is not None and "policy-1" in problem and "policy-2" in problem


def test_the_page_says_what_is_compared_with_what(runs: list[Run]) -> None:
    simulation = simulate(runs, "policy-3")
    roles_ensure()
    lead = User.objects.create_user("lee")
    lead.groups.add(Group.objects.get(name="ops-leads"))
    client = Client()
    client.force_login(lead)

    page = client.get(reverse("policy:simulation", args=[simulation.pk])).content.decode()

    summary = page.split('data-testid="simulation-summary">', 1)[1].split("</p>", 1)[0]
    assert "<strong>1</strong> decision would change" in summary
    assert "active version policy-2" in summary
    assert "First decided" in page
    assert "1 run that the active version policy-2 sends straight through would now" in page
