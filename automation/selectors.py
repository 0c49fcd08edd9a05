"""Reads behind the API and pages: bounded queries, no N+1."""

from __future__ import annotations

from typing import Any

from automation.models import IntakeChannel, Run


def run_for_channel(*, run_id: int, channel: IntakeChannel) -> Run | None:
    return Run.objects.filter(pk=run_id, channel=channel).first()


def run_summary(run: Run) -> dict[str, Any]:
    return {
        "id": run.pk,
        "event_id": run.event_id,
        "state": run.state,
        "outcome": run.outcome or None,
        "url": f"/api/v1/runs/{run.pk}",
    }


def run_detail(run: Run) -> dict[str, Any]:
    stages = run.stages.order_by("started_at", "pk").values(
        "stage", "attempt", "started_at", "duration_ms", "outcome", "error_class"
    )
    return {
        **run_summary(run),
        "failure": {"field": run.failure_field, "detail": run.failure_detail}
        if run.failure_field or run.failure_detail
        else None,
        "fingerprint": run.fingerprint,
        "versions": {
            "workflow": run.workflow_version,
            "classifier": run.classifier_version,
            "prompt": run.prompt_version,
            "policy": run.policy_version or None,
        },
        "classification": run.classification,
        "route": run.route or None,
        "effect": run.effect_name or None,
        "rules": run.rules,
        "created_at": run.created_at.isoformat(),
        "finished_at": run.finished_at.isoformat() if run.finished_at else None,
        "stages": [{**stage, "started_at": stage["started_at"].isoformat()} for stage in stages],
        "checkpoints": run.checkpoints.count(),
    }
