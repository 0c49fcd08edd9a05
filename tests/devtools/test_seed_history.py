"""`seed_history` (run by `make demo`) gives every chart of the dashboard something to show."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from automation.models import QAReview, Run
from reports import selectors


@pytest.mark.django_db(transaction=True)  # the pipeline runs on real commits
def test_seeded_history_fills_every_panel_and_is_made_once() -> None:
    out = StringIO()
    call_command("seed_history", weeks=4, per_day=2, stdout=out)
    assert "runs over 4 weeks" in out.getvalue()
    runs = Run.objects.count()

    now = timezone.now()
    data = selectors.dashboard(period=selectors.Period(now - timedelta(days=90), now), now=now)

    assert sum(w.overall.runs for w in data.straight_through.weeks) == runs
    assert sum(w.overall.straight_through for w in data.straight_through.weeks) > 0
    assert [a.version for a in data.straight_through.activations] == [
        "policy-1",
        "policy-1-strict",
        "policy-1",
    ]
    assert {h.reason for h in data.handoffs if h.runs} >= {"approval", "retries exhausted"}
    assert data.approvals.overall.decided > 0 and data.approvals.pending_total == 2
    assert all(change.after.runs for change in data.rule_changes[:2])
    assert {s.stage for s in data.stages} >= {"intake", "classify", "decide", "execute"}
    # QA samples of past straight-through runs, reviewed and labelled: a measured error rate.
    assert sum(w.errors.reviewed for w in data.quality.weeks if not w.route) > 0
    assert data.quality.by_version and data.quality.labels_per_week
    assert QAReview.objects.filter(status="open").exists()  # the last days' samples wait

    again = StringIO()
    call_command("seed_history", stdout=again)
    assert "already seeded" in again.getvalue()
    assert Run.objects.count() == runs
