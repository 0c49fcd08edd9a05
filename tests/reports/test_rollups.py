"""The report rollups give the numbers the raw rows give, stay exact while changes wait for the
job, and keep /reports/ and /metrics at a fixed number of queries as the history grows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from io import StringIO
from typing import Any

import pytest
import time_machine
from django.contrib.auth.models import User
from django.core.cache import cache
from django.core.management import CommandError, call_command
from django.db import connection
from django.db.models import F
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from accounts.roles import roles_ensure
from audit.services import audit_record
from automation.models import IntakeChannel, RecoveryAction, RecoveryKind, Run, StageRecord, State
from reports import histograms, rollups, selectors
from reports.models import (
    DeliveryTotal,
    RollupMark,
    RunDay,
    RunHour,
    StageDay,
    StageHour,
    StageWeek,
    WaitDay,
    WaitHour,
    WaitWeek,
)
from tests.history_rows import rewrite
from tests.reports.test_metrics import many_runs

Figures = dict[str, Any]


def figures(now: datetime) -> Figures:
    """Every number the rollups feed: the straight-through weeks, rule-change rates, metrics."""
    period = selectors.Period(now - timedelta(days=90), now)
    panel = selectors.straight_through(period=period)
    return {
        "weeks": [(w.start, w.overall, sorted(w.routes.items())) for w in panel.weeks],
        "rules": [
            (c.version, c.before, c.after) for c in selectors.impacts(panel.activations, now=now)
        ],
        "policy": [(c.version, c.before, c.after) for c in selectors.policy_impacts(now=now)],
        "totals": rollups.totals(rollups.current_mark()),
        "handoffs": selectors.handoffs(period=period),
        "stages": selectors.stage_durations(period=period),
        "waits": selectors.approval_waits(period=period, now=now, limit=0),
        "deliveries": sorted(rollups.delivery_rows(rollups.current_mark())),
        "spend": selectors.model_spend(period=period),
    }


def raw_figures(now: datetime) -> Figures:
    """The same numbers counted from the runs alone (no mark: every hour is read raw)."""
    saved = list(RollupMark.objects.all())
    RollupMark.objects.all().delete()
    try:
        return figures(now)
    finally:
        RollupMark.objects.bulk_create(saved)


def rollup_rows() -> list[tuple[Any, ...]]:
    runs = RunHour.objects.values_list(
        "hour", "route", "state", "outcome", "touched", "asked_approval", "runs"
    )
    found: list[tuple[Any, ...]] = sorted(runs)
    days = RunDay.objects.values_list(
        "day", "route", "state", "outcome", "touched", "asked_approval", "runs", "cost"
    )
    found += sorted(("RunDay", *row) for row in days)
    for table in (StageHour, StageDay, StageWeek, WaitHour, WaitDay, WaitWeek):
        fields = [f.name for f in table._meta.concrete_fields if not f.primary_key]
        found += sorted((table.__name__, *row) for row in table.objects.values_list(*fields))
    return found


@pytest.mark.django_db(transaction=True)  # the pipeline runs on real commits
def test_rollups_give_the_raw_numbers_on_months_of_history_and_after_late_changes() -> None:
    call_command("seed_history", weeks=16, per_day=2, stdout=StringIO())
    # Durations that the histograms' buckets round (1,234 ms counts as 1,230) and that recur,
    # so hour and day rows add up many attempts each.
    rewrite(StageRecord).update(duration_ms=F("id") % 5 * 1234 + F("id") % 3)
    # What the runs' model calls cost, different from run to run.
    Run.objects.update(
        prompt_tokens=F("id") % 7 * 100,
        completion_tokens=F("id") % 5 * 10,
        model_cost=F("id") % 7 * Decimal("0.00012345"),
    )
    now = timezone.now()
    before = raw_figures(now)
    assert sum(w[1].runs for w in before["weeks"]) > 0 and before["rules"]
    assert before["spend"].total.cost > 0 and len(before["spend"].days) == 31

    call_command("rebuild_rollups", stdout=StringIO())
    assert RunHour.objects.exists() and RunDay.objects.exists() and DeliveryTotal.objects.exists()
    assert StageDay.objects.exists() and WaitDay.objects.exists()
    assert StageWeek.objects.exists() and WaitWeek.objects.exists()
    # Nothing waits for the job: every hour is answered by the rollup.
    mark = rollups.current_mark()
    assert mark is not None and rollups.changed_hours(mark) == set()
    assert histograms.changed_hours(mark) == {fact: set() for fact in histograms.FACTS}
    assert figures(now) == before

    # A person retries the effect of a run that went straight through weeks ago: the run no
    # longer counts as straight-through. Before the job runs, its hour is read raw.
    straight = Run.objects.filter(rollups.untouched(), state=State.COMPLETED)
    run = straight.filter(created_at__lt=now - timedelta(weeks=2)).order_by("-pk")[0]
    lead = User.objects.create_user(username="late-lead")
    audit_record(action="run.retry_effect", actor=lead, run_id=run.pk)
    RecoveryAction.objects.create(
        run=run, action=RecoveryKind.RETRY, actor=lead, reason="late", result=State.EXECUTING
    )
    # Read again by a model (a replay of its reading, say): it cost more.
    Run.objects.filter(pk=run.pk).update(model_cost=F("model_cost") + Decimal("0.5"))
    # And a stage record lands in an hour weeks old: a hand-off that started back then.
    started = run.created_at + timedelta(minutes=1)
    StageRecord.objects.create(
        run=run, stage="decide", attempt=9, started_at=started, finished_at=now,
        duration_ms=123_456, outcome="low_confidence",
    )  # fmt: skip
    late = figures(now)
    assert late == raw_figures(now)
    assert late["weeks"] != before["weeks"]
    assert late["handoffs"] != before["handoffs"] and late["stages"] != before["stages"]
    assert late["spend"].total.cost == before["spend"].total.cost + Decimal("0.5")

    assert rollups.rollups_refresh() >= 1
    assert figures(now) == late
    rows = rollup_rows()
    # Idempotent: a second run (nothing new) and a rebuild give the same rows.
    rollups.rollups_refresh()
    assert rollup_rows() == rows
    call_command("rebuild_rollups", since=f"{now - timedelta(weeks=6):%Y-%m-%d}", stdout=StringIO())
    assert rollup_rows() == rows
    call_command("rebuild_rollups", stdout=StringIO())
    assert rollup_rows() == rows and figures(now) == late


@pytest.mark.django_db
def test_rebuild_since_needs_a_date_and_a_first_full_rebuild() -> None:
    with pytest.raises(CommandError, match="no rollups yet"):
        call_command("rebuild_rollups", since="2026-01-01", stdout=StringIO())
    with pytest.raises(CommandError, match="takes a date"):
        call_command("rebuild_rollups", since="yesterday", stdout=StringIO())


NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def spread(channel: IntakeChannel, count: int) -> None:
    """`count` more runs, one an hour going back from NOW, so the history spans months."""
    many_runs(channel, count)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE automation_run SET created_at = %s - (SELECT count(*) FROM automation_run "
            "r WHERE r.id > automation_run.id) * interval '1 hour'",
            [NOW],
        )


def queries(client: Client, url: str, **headers: str) -> list[str]:
    cache.clear()  # every page counts the navigation's inbox afresh
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url, headers=headers).status_code == 200
    return [q["sql"] for q in captured.captured_queries]


@pytest.mark.django_db
def test_reports_and_metrics_cost_the_same_queries_for_n_and_3n_runs(
    channel: IntakeChannel, ops_lead: User, settings: Any
) -> None:
    settings.GATEHOUSE = {**settings.GATEHOUSE, "METRICS_TOKEN": "t"}
    roles_ensure()
    client = Client()
    client.force_login(ops_lead)
    counted = []
    for more in (400, 800):
        spread(channel, more)
        with time_machine.travel(NOW, tick=False):
            rollups.rollups_rebuild()
            page = queries(client, reverse("reports:dashboard") + "?period=90d")
            scrape = queries(client, reverse("metrics"), Authorization="Bearer t")
        counted.append((len(page), len(scrape)))
        # No scrape reads the whole run or attempt history: every query on them is filtered.
        for sql in scrape:
            for table in ('FROM "automation_run"', 'FROM "automation_effectattempt"'):
                if table in sql:
                    assert "WHERE" in sql.split(table, 1)[1], sql
    assert Run.objects.count() == 1200
    assert counted[0] == counted[1]
    # The marks, the changed hours, the totals, the queues, the approvals, the effects, the
    # model servers, the mailboxes.
    assert counted[0][1] <= 8
