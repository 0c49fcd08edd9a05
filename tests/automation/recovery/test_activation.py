"""Activating a policy version from the console: only after a fresh simulation of it."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
import time_machine
import yaml
from django.contrib.auth.models import Group, User
from django.core.exceptions import PermissionDenied
from django.db import connection
from django.utils import timezone

from accounts.roles import roles_ensure
from audit.models import AuditEvent
from automation.models import Simulation
from automation.recovery.activation import (
    SIMULATION_FRESH_FOR,
    activation_simulation,
    policy_activate_after_simulation,
)
from automation.recovery.simulation import simulation_process, simulation_start
from core.errors import ServiceError
from policy.models import PolicyVersion
from policy.services import (
    DEFAULTS_DIR,
    parse_policy_text,
    policy_ensure_defaults,
    policy_version_activate,
    policy_version_create,
)

POLICY_1 = yaml.safe_load((DEFAULTS_DIR / "policy-1.yaml").read_text())


def save(name: str, **changes: Any) -> PolicyVersion:
    text = yaml.safe_dump({**POLICY_1, "version": name, **changes})
    return policy_version_create(document=parse_policy_text(text))[0]


def lead(username: str = "lee") -> User:
    roles_ensure()
    user = User.objects.create_user(username)
    user.groups.add(Group.objects.get(name="ops-leads"))
    return user


def simulated(name: str, *, finished: bool = True) -> Simulation:
    now = timezone.now()
    simulation = simulation_start(
        version=name, since=now - timedelta(days=1), until=now, user=None, in_worker=False
    )
    return simulation_process(simulation_id=simulation.pk) if finished else simulation


def active() -> str:
    return PolicyVersion.objects.get(is_active=True).name


def refused(name: str, user: User, simulation_id: int | None) -> ServiceError:
    with pytest.raises(ServiceError) as caught:
        policy_activate_after_simulation(name=name, user=user, simulation_id=simulation_id)
    assert active() == "policy-1"
    return caught.value


@pytest.fixture
def draft(policy: None) -> PolicyVersion:
    return save("policy-2", confidence={"default": 0.8, "per_category": {}})


def test_a_fresh_simulation_allows_activation_and_it_is_recorded(draft: PolicyVersion) -> None:
    person = lead()
    simulation = simulated("policy-2")
    assert activation_simulation(name="policy-2") == (simulation, None)

    policy_activate_after_simulation(name="policy-2", user=person, simulation_id=simulation.pk)

    assert active() == "policy-2"
    event = AuditEvent.objects.get(action="policy.activated", data__version="policy-2")
    assert (event.actor, event.data) == (person, {"version": "policy-2", "previous": "policy-1"})


def test_without_a_simulation_activation_is_refused(draft: PolicyVersion) -> None:
    assert activation_simulation(name="policy-2")[0] is None
    assert refused("policy-2", lead(), None).code == "not_simulated"
    assert refused("policy-2", lead("other"), 987654).code == "not_simulated"


def test_an_unfinished_simulation_is_refused(draft: PolicyVersion) -> None:
    simulation = simulated("policy-2", finished=False)
    error = refused("policy-2", lead(), simulation.pk)
    assert (error.code, error.message) == (
        "simulation_stale",
        "the simulation has not finished yet: wait for it to finish, then try again",
    )
    assert activation_simulation(name="policy-2")[0] is None


def test_a_simulation_of_another_version_is_refused(draft: PolicyVersion) -> None:
    save("policy-3")
    other = simulated("policy-3")
    error = refused("policy-2", lead(), other.pk)
    assert error.message == "that simulation judged policy-3, not policy-2"


def test_a_simulation_older_than_the_limit_is_refused(draft: PolicyVersion) -> None:
    simulation = simulated("policy-2")
    started = simulation.created_at

    with time_machine.travel(started + SIMULATION_FRESH_FOR - timedelta(minutes=1)):
        assert activation_simulation(name="policy-2") == (simulation, None)
    with time_machine.travel(started + SIMULATION_FRESH_FOR + timedelta(minutes=1)):
        error = refused("policy-2", lead(), simulation.pk)
        assert activation_simulation(name="policy-2") == (None, error.message)
    assert error.message == (
        "the simulation is more than 24 hours old: simulate this version again"
    )


def test_a_simulation_started_before_another_activation_is_refused(
    draft: PolicyVersion,
) -> None:
    save("policy-3")
    before = simulated("policy-2")
    policy_version_activate(name="policy-3")  # the runs now compare against policy-3

    with pytest.raises(ServiceError) as caught:
        policy_activate_after_simulation(name="policy-2", user=lead(), simulation_id=before.pk)

    assert caught.value.code == "simulation_stale"
    assert caught.value.message.startswith(
        "another version (policy-3) was activated after the simulation started"
    )
    assert active() == "policy-3"
    after = simulated("policy-2")
    assert activation_simulation(name="policy-2") == (after, None)


def test_someone_who_may_not_activate_is_refused_before_anything_is_read(
    draft: PolicyVersion,
) -> None:
    simulation = simulated("policy-2")
    with pytest.raises(PermissionDenied):
        policy_activate_after_simulation(
            name="policy-2", user=User.objects.create_user("nobody"), simulation_id=simulation.pk
        )
    assert active() == "policy-1"


def test_the_active_version_and_an_unknown_name_are_refused(draft: PolicyVersion) -> None:
    simulation = simulated("policy-1")
    assert refused("policy-1", lead(), simulation.pk).code == "already_active"
    assert refused("no-such", lead("other"), simulation.pk).code == "no_such_version"


@pytest.mark.django_db(transaction=True)
def test_of_two_activations_at_once_the_second_finds_its_simulation_stale() -> None:
    """Both simulations started before either activation: whichever takes the lock second
    sees the first one's activation, and is refused instead of overriding it unseen."""
    policy_ensure_defaults()
    save("policy-2")
    save("policy-3")
    person = lead()
    simulations = {name: simulated(name).pk for name in ("policy-2", "policy-3")}
    barrier = threading.Barrier(2)
    results: dict[str, BaseException | None] = {}

    def activate(name: str) -> None:
        try:
            barrier.wait(timeout=10)
            policy_activate_after_simulation(
                name=name, user=person, simulation_id=simulations[name]
            )
            results[name] = None
        except BaseException as exc:
            results[name] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=activate, args=(name,)) for name in simulations]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    winner = active()
    loser = next(name for name in simulations if name != winner)
    assert results[winner] is None
    error = results[loser]
    assert isinstance(error, ServiceError) and error.code == "simulation_stale"
