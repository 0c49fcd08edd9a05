"""Activating a policy version from the console: only after a fresh simulation of it.

A person sees what a version would change before it decides runs. The console offers
activation only with a finished simulation of this very version that is fresh: started no
earlier than the active version's activation (so it judged the runs against what decides
them now) and at most SIMULATION_FRESH_FOR ago. The check is made again under the lock every
activation takes when the person confirms, so a hand-made request, or another version
activated in the meantime, cannot slip past it.

Commands and demo code activate directly (policy.services.policy_version_activate).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from automation.recovery.models import BatchStatus, Simulation
from core.codes import Refusal
from core.errors import ServiceError
from policy.models import PolicyVersion
from policy.services import policy_version_activate_in_transaction

# How long a simulation stays good enough to activate on: the runs of a day are enough to
# change what a version would do to them.
SIMULATION_FRESH_FOR = timedelta(hours=24)
ACTIVATE = "policy.activate_policyversion"

NOT_SIMULATED = "activation needs a finished simulation of this version: simulate it first"


def simulation_problem(
    simulation: Simulation, *, name: str, active: PolicyVersion | None, now: datetime
) -> str | None:
    """Why `simulation` does not allow activating `name` now, in plain words; None if it does."""
    if simulation.policy_version != name:
        return f"that simulation judged {simulation.policy_version}, not {name}"
    if simulation.status != BatchStatus.FINISHED:
        return "the simulation has not finished yet: wait for it to finish, then try again"
    if simulation.created_at < now - SIMULATION_FRESH_FOR:
        hours = int(SIMULATION_FRESH_FOR.total_seconds() // 3600)
        return f"the simulation is more than {hours} hours old: simulate this version again"
    activated = active.activated_at if active is not None else None
    if active is not None and activated is not None and simulation.created_at < activated:
        return (
            f"another version ({active.name}) was activated after the simulation started: "
            "simulate again to see the changes against the version that decides runs now"
        )
    if active is not None and simulation.baseline_version != active.name:
        compared = simulation.baseline_version or "how the runs were first decided"
        return (
            f"that simulation compared with {compared}, not with the active version "
            f"{active.name}: simulate again"
        )
    return None


def activation_simulation(*, name: str) -> tuple[Simulation | None, str | None]:
    """The simulation `name` may be activated on now, or None and why not (plain words).

    The newest finished simulation is the freshest: if it is stale, so is every older one."""
    simulation = (
        Simulation.objects.filter(policy_version=name, status=BatchStatus.FINISHED)
        .order_by("-created_at", "-pk")
        .first()
    )
    if simulation is None:
        return None, NOT_SIMULATED
    active = PolicyVersion.objects.filter(is_active=True).first()
    problem = simulation_problem(simulation, name=name, active=active, now=timezone.now())
    return (None, problem) if problem else (simulation, None)


@transaction.atomic(durable=True)
def policy_activate_after_simulation(
    *, name: str, user: User, simulation_id: int | None
) -> PolicyVersion:
    """Make `name` the active version, when `simulation_id` is a fresh finished simulation of
    it (simulation_problem); otherwise refuse with a ServiceError and change nothing."""
    if not user.has_perm(ACTIVATE):
        raise PermissionDenied("you may not activate policy versions")
    # The lock every activation takes, in the same order (policy.services): an activation by
    # someone else that commits while this one waits is seen below, and its newer
    # activated_at makes this simulation stale instead of being silently overridden.
    versions = list(PolicyVersion.objects.select_for_update().order_by("pk"))
    target = next((v for v in versions if v.name == name), None)
    if target is None:
        raise ServiceError(Refusal.NO_SUCH_VERSION, f"there is no policy version named {name}")
    if target.is_active:
        raise ServiceError(Refusal.ALREADY_ACTIVE, f"{name} is already the active policy")
    # A simulation only moves forward (queued, running, finished): no lock needed on it.
    simulation = Simulation.objects.filter(pk=simulation_id).first() if simulation_id else None
    if simulation is None:
        raise ServiceError(Refusal.NOT_SIMULATED, NOT_SIMULATED)
    active = next((v for v in versions if v.is_active), None)
    problem = simulation_problem(simulation, name=name, active=active, now=timezone.now())
    if problem is not None:
        raise ServiceError(Refusal.SIMULATION_STALE, problem)
    return policy_version_activate_in_transaction(name=name, user=user)
