"""A recovery preview in words: what a replay, retry or re-decision would do to each run.

The preview (automation.recovery.preview) says it in codes and names: the result, the effect,
the queue, the approvers, the run's state. This is where a person's sentence is made from
them, for the run's preview page and a batch's page alike. A batch previewed before its rows
held those fields keeps the sentence it was stored with.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from automation.models import EffectStatus
from automation.recovery.preview import Result
from console.vocabulary import EFFECT_GAVE_UP, PREVIEW_RESULTS, Kind, label


def preview_sentence(row: Mapping[str, Any]) -> str:
    """One sentence on what the action would come to for this run."""
    if "sentence" in row:  # stored before the rows held codes only
        return str(row["sentence"])
    said = _SAID.get(row.get("result", ""))
    return said(row) if said is not None else ""


def preview_summary(rows: Iterable[Mapping[str, Any]]) -> list[tuple[str, int]]:
    """How many runs come to each result, in the vocabulary's order, as (label, count)."""
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["result"]] = counts.get(row["result"], 0) + 1
    return [(term.label, counts[code]) for code, term in PREVIEW_RESULTS.items() if code in counts]


def _effect(row: Mapping[str, Any]) -> str:
    return f"“{label(Kind.EFFECT, row.get('effect', ''))}”"


def _sent(row: Mapping[str, Any]) -> str:
    if row.get("retry"):
        return (
            f"{_effect(row)} would be sent again under the same key; "
            "its system does not do it twice."
        )
    if row.get("status"):
        # An effect under the key of a finished run is tried again by nobody: it gave up.
        waiting = row["status"] == EffectStatus.RETRY_WAIT
        last = EFFECT_GAVE_UP.label if waiting else label(Kind.EFFECT_STATUS, row["status"])
        return f"{_effect(row)} would be sent again under the same key (last time: {last})."
    return f"{_effect(row)} would be sent."


def _deduplicated(row: Mapping[str, Any]) -> str:
    if row.get("retry"):
        return f"{_effect(row)} is already delivered: not sent again."
    return f"{_effect(row)} was already delivered under the same key: it is not sent again."


def _refused(row: Mapping[str, Any]) -> str:
    why = f": {row['reason']}" if row.get("reason") else ""
    return f"Policy would refuse it; nothing is done{why}."


_SAID = {
    Result.SENT: _sent,
    Result.DEDUPLICATED: _deduplicated,
    Result.APPROVAL: lambda row: (
        f"{_effect(row)} would wait for approval by {row.get('approvers')}."
    ),
    Result.QUEUED: lambda row: (
        f"It would go to the queue “{label(Kind.QUEUE, row.get('queue'))}” for a person."
    ),
    Result.REFUSED: _refused,
    Result.READ_AGAIN: lambda row: (
        "The classifier reads the request again; what happens next depends on that reading, "
        "and policy decides it as usual."
    ),
    Result.NOT_POSSIBLE: lambda row: _not_possible(row),
}


def _not_possible(row: Mapping[str, Any]) -> str:
    state = f"“{label(Kind.STATE, row.get('state'))}”"
    if row.get("held_for"):
        state += f" for “{label(Kind.OUTCOME, row['held_for'])}”"
    offered = [label(Kind.RECOVERY, name) for name in row.get("offered") or []]
    instead = f"; its page offers: {', '.join(offered)}" if offered else ""
    return f"Not possible: the run is {state}{instead}. It is left as it is."


def doable(rows: Iterable[Mapping[str, Any]]) -> int:
    """How many of a preview's runs the action can be done to: the ones a batch works."""
    return sum(1 for row in rows if row.get("result") != Result.NOT_POSSIBLE)
