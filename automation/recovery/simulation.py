"""Re-evaluate past runs under another policy version: what activating it would change.

Pure evaluation over each run's stored interpretation and enrichment: no classifier call, no
effect, no change to any run. Each run is judged twice on the same reading: by the version
active when the simulation started (the baseline) and by the simulated one. Only where those
two differ is a change counted, so a draft's impact is its own difference from the active
version, never what an older version once decided. How the run was first decided (its own
version evaluated again: evaluation is deterministic) is kept beside it, as a separate fact.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db import transaction

from automation.recovery.jobs import job_settled
from automation.recovery.models import Simulation
from automation.runs.models import Run
from automation.runs.payloads import decision_of
from policy.evaluation import Decision
from policy.models import PolicyVersion
from policy.schemas import PolicyDocument
from worker.dispatch import enqueue_after_commit

SIMULATION_TASK = "automation.tasks.process_simulation"
# Whoever may author policy versions may judge past runs by one; reading alone is not enough.
SIMULATE = "policy.add_policyversion"
CHUNK = 200


def simulation_runs(*, since: datetime, until: datetime) -> list[int]:
    """Runs in the window that have an interpretation to judge again."""
    return list(
        Run.objects.filter(created_at__gte=since, created_at__lte=until)
        .exclude(classification__isnull=True)
        .exclude(policy_version="")
        .order_by("created_at", "pk")
        .values_list("pk", flat=True)
    )


@transaction.atomic(durable=True)
def simulation_start(
    *, version: str, since: datetime, until: datetime, user: User | None, in_worker: bool = True
) -> Simulation:
    """Judge past runs by a version, in a worker. A person needs the right to author policy
    (user=None: the operator's own command line)."""
    if user is not None and not user.has_perm(SIMULATE):
        raise PermissionDenied("you may not simulate policy versions")
    PolicyVersion.objects.get(name=version)  # must exist (drafts included)
    active = PolicyVersion.objects.filter(is_active=True).values_list("name", flat=True).first()
    simulation = Simulation.objects.create(
        policy_version=version,
        baseline_version=active or "",
        since=since,
        until=until,
        created_by=user,
        run_ids=simulation_runs(since=since, until=until),
    )
    if in_worker:
        enqueue_after_commit(SIMULATION_TASK, simulation.pk)
    return simulation


def _verdict(decision: Decision) -> str:
    return decision.verdict.value


def compare(
    run: Run, old: PolicyDocument, new: PolicyDocument, *, first: PolicyDocument | None = None
) -> dict[str, Any] | None:
    """The change for one run from `old` (the baseline) to `new`, or None when both decide it
    the same way; `first` is the version that first decided the run (`old` when not given),
    shown beside it."""
    first = first or old
    # The same reading and words (signals too) judged by both versions.
    before, after = decision_of(run, old), decision_of(run, new)
    if _verdict(before) == _verdict(after) and before.effect == after.effect:
        return None
    differing = _differing_rules(before, after)
    return {
        "run": run.pk,
        "event_id": run.event_id,
        "old": _verdict(before),
        "new": _verdict(after),
        "first": _verdict(decision_of(run, first)) if first is not old else _verdict(before),
        "first_version": first.version,
        "rules": differing,
    }


# What a rule's change did to the run, said in plain words on the simulation page.
NOW_STOPS = "now stops it"
NOW_LETS_THROUGH = "now lets it through"
REMOVED = "no longer in the policy"


def _differing_rules(before: Decision, after: Decision) -> list[dict[str, Any]]:
    """The rules that made the difference, each with what it now does: a rule whose result
    changed, a new rule that fails, or a failing rule the new version no longer has. A new
    rule that passes changed nothing, and is not listed."""
    old = {r.rule_id: r for r in before.rules}
    new = {r.rule_id for r in after.rules}
    differing = []
    for rule in after.rules:
        was = old.get(rule.rule_id)
        if (was is None and not rule.passed) or (was is not None and was.passed != rule.passed):
            change = NOW_LETS_THROUGH if rule.passed else NOW_STOPS
            differing.append({**rule.as_dict(), "change": change})
    for rule in before.rules:
        if rule.rule_id not in new and not rule.passed:
            differing.append({**rule.as_dict(), "change": REMOVED})
    return differing


def _parsed(documents: dict[str, PolicyDocument], name: str) -> PolicyDocument:
    """The version named, parsed once per chunk."""
    if name not in documents:
        documents[name] = PolicyVersion.objects.get(name=name).parsed
    return documents[name]


def simulation_step(*, simulation_id: int) -> bool:
    """Judge the next chunk of runs; False when done. The position commits with each chunk."""
    with transaction.atomic(durable=True):
        simulation = Simulation.objects.select_for_update().get(pk=simulation_id)
        if job_settled(simulation):
            return False
        ids = simulation.run_ids[simulation.done : simulation.done + CHUNK]
        documents: dict[str, PolicyDocument] = {}
        new = _parsed(documents, simulation.policy_version)
        changes = []
        for run in Run.objects.filter(pk__in=ids).order_by("created_at", "pk"):
            first = _parsed(documents, run.policy_version)
            baseline = _parsed(documents, simulation.baseline_version or run.policy_version)
            change = compare(run, baseline, new, first=first)
            if change is not None:
                changes.append(change)
        simulation.done += len(ids)
        simulation.changes = [*simulation.changes, *changes]
        simulation.advance()
        simulation.save(update_fields=["done", "changes", "status"])
        return True


def simulation_process(*, simulation_id: int) -> Simulation:
    while simulation_step(simulation_id=simulation_id):
        pass
    return Simulation.objects.get(pk=simulation_id)
