"""What a replay, retry or re-decision would do to each run, before anyone starts it.

The same judgement as the policy simulation (`simulation.compare` and `decision_of`): each
run's stored reading is judged by the active policy, and the effect it would lead to is
looked up by its key in the outbox. So a person sees, per run, whether the effect would be
sent, is already delivered under that key (and would not be sent again), would now be
refused, would wait for an approver, or would go to which exception queue. Nothing is
changed and no classifier is called: where the next step is a new reading (a replay of a run
never read, a retry of the classifier) the preview says so instead of guessing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from django.contrib.auth.models import User

from automation.effects.models import Effect, EffectStatus
from automation.recovery.actions import run_actions
from automation.recovery.simulation import compare
from automation.runs.models import EFFECT_HOLDS, Run, State
from automation.runs.payloads import decision_of, effect_key
from policy.evaluation import Decision, Verdict
from policy.models import PolicyVersion
from policy.schemas import PolicyDocument
from policy.services import policy_get


class Result:
    """What the action would come to for one run (PreviewRow.result)."""

    SENT = "sent"  # the effect would be delivered
    DEDUPLICATED = "deduplicated"  # already delivered under the same key: not sent again
    APPROVAL = "approval"  # would wait for an approver
    REFUSED = "refused"  # policy would refuse it: nothing is done
    QUEUED = "queued"  # would go to an exception queue for a person
    READ_AGAIN = "read_again"  # the classifier reads it again: the reading decides
    NOT_POSSIBLE = "not_possible"  # the action cannot be done to this run now


# The rows hold codes and names only; the console says them in words (console/previews.py).


@dataclass(frozen=True)
class PreviewRow:
    run: int
    event_id: str
    subject: str
    result: str
    effect: str = ""
    queue: str = ""
    approvers: str = ""
    state: str = ""  # the run's state, when the action is not possible in it
    held_for: str = ""  # and the outcome it is held or failed for
    offered: list[str] = field(default_factory=list)  # and what can be done to it instead
    status: str = ""  # the effect's status under the same key, when it would be sent again
    reason: str = ""  # the first refusing rule's text, when policy would refuse it
    retry: bool = False  # the row is about sending a held effect again
    rules: list[dict[str, Any]] = field(default_factory=list)  # the rules that now differ

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _blank(run: Run) -> PreviewRow:
    """The run's row before anything is said about it."""
    subject = str((run.normalized or {}).get("subject") or "")[:120]
    return PreviewRow(run=run.pk, event_id=run.event_id, subject=subject, result="")


def _judged(
    run: Run, active: PolicyDocument, documents: dict[str, PolicyDocument]
) -> tuple[Decision, list[dict[str, Any]]]:
    """The run's reading judged by the active policy, and the rules that now differ from the
    policy it was decided under (the simulation's own comparison)."""
    decision = decision_of(run, active)
    own = documents.get(run.policy_version)
    change = compare(run, own, active) if own is not None else None
    return decision, (change or {}).get("rules", [])


def _from_decision(
    run: Run, decision: Decision, rules: list[dict[str, Any]], existing: dict[str, str]
) -> PreviewRow:
    base = replace(_blank(run), rules=rules)
    effect = decision.effect or ""
    if decision.verdict in (Verdict.EXECUTE, Verdict.APPROVE):
        key = effect_key(scope=run.identity_scope, fingerprint=run.fingerprint, effect=effect)
        if existing.get(key) == EffectStatus.DELIVERED:
            return replace(
                base,
                result=Result.DEDUPLICATED,
                effect=effect,
            )
        if decision.verdict == Verdict.APPROVE and decision.approval is not None:
            group = decision.approval.group
            return replace(
                base,
                result=Result.APPROVAL,
                effect=effect,
                approvers=group,
            )
        return replace(base, result=Result.SENT, effect=effect, status=existing.get(key, ""))
    if decision.verdict in (Verdict.LOW_CONFIDENCE, Verdict.RISK_SIGNAL):
        queue = decision.verdict.value
        return replace(base, result=Result.QUEUED, effect=effect, queue=queue)
    refusing = decision.refusing_rules
    return replace(base, result=Result.REFUSED, reason=refusing[0].text if refusing else "")


def _row(
    run: Run,
    action: str,
    active: PolicyDocument,
    documents: dict[str, PolicyDocument],
    effects: dict[int, Effect],
    existing: dict[str, str],
) -> PreviewRow:
    base = _blank(run)
    held_effect = run.state == State.NEEDS_REVIEW and run.outcome in EFFECT_HOLDS
    if action == "retry_effect" or (action == "retry" and held_effect):
        effect = effects.get(run.pk)
        name = effect.name if effect is not None else run.effect_name
        if effect is not None and effect.status == EffectStatus.DELIVERED:
            return replace(base, result=Result.DEDUPLICATED, effect=name, retry=True)
        return replace(base, result=Result.SENT, effect=name, retry=True)
    if action == "retry" or not run.classification:
        return replace(base, result=Result.READ_AGAIN)
    decision, rules = _judged(run, active, documents)
    return _from_decision(run, decision, rules, existing)


def _not_possible(run: Run, offered: list[str]) -> PreviewRow:
    """The row of a run the action does not apply to: why (its state and what it is held
    for; a retry is for a held delivery or a classifier that ran out, not for a reading a
    person must correct) and what it offers instead."""
    return replace(
        _blank(run),
        result=Result.NOT_POSSIBLE,
        state=run.state,
        held_for=run.outcome,
        offered=offered,
    )


def _documents(runs: list[Run]) -> dict[str, PolicyDocument]:
    names = {run.policy_version for run in runs if run.policy_version}
    return {v.name: v.parsed for v in PolicyVersion.objects.filter(name__in=names)}


def preview_runs(*, run_ids: Iterable[int], action: str, user: User) -> list[PreviewRow]:
    """A row per run, in the order given: a fixed number of queries for any number of runs."""
    ids = list(run_ids)
    by_id = {run.pk: run for run in Run.objects.filter(pk__in=ids).select_related("channel")}
    runs = [by_id[pk] for pk in ids if pk in by_id]
    active = policy_get(name=None).parsed
    documents = _documents(runs)
    effects = {e.run_id: e for e in Effect.objects.filter(run_id__in=[r.pk for r in runs])}
    keys = {
        effect_key(scope=run.identity_scope, fingerprint=run.fingerprint, effect=effect)
        for run in runs
        if run.fingerprint
        for effect in active.allowed_effects
    }
    # Every outbox row the runs' decisions could reach, delivered or not, by key.
    existing = dict(
        Effect.objects.filter(idempotency_key__in=keys).values_list("idempotency_key", "status")
    )
    # A batch's retry is whichever retry the run's hold allows (the classifier or the effect).
    wanted = {"retry", "retry_effect"} if action == "retry" else {action}
    rows = []
    for run in runs:
        offered = [a.name for a in run_actions(run, user)]
        if not wanted & set(offered):
            rows.append(_not_possible(run, offered))
            continue
        rows.append(_row(run, action, active, documents, effects, existing))
    return rows
