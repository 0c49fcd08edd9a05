"""The measured error rate of straight-through runs, from QA samples people reviewed, with
its interval; accuracy by classifier version and labels per week, from labels."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from accounts.roles import roles_ensure
from automation.models import Label, LabelSource, QAReview, QAStatus, Run
from console.exports import EXPORTS
from reports.selectors import ErrorRate, Period, measured_quality
from tests.conftest import Pipeline, _user, decision_for, make_event
from tests.visible_text import codes_shown

pytestmark = pytest.mark.django_db


def test_the_interval_is_wilsons_and_stays_inside_0_and_1() -> None:
    low, high = ErrorRate(reviewed=50, wrong=2).interval or (0, 0)
    assert round(low, 3) == 0.011 and round(high, 3) == 0.135
    assert ErrorRate(reviewed=10, wrong=0).interval[0] == pytest.approx(0.0)  # type: ignore[index]
    assert ErrorRate(reviewed=10, wrong=10).interval[1] == pytest.approx(1.0)  # type: ignore[index]
    assert ErrorRate(0, 0).interval is None and ErrorRate(0, 0).rate is None


def sampled(pipeline: Pipeline, n: int, status: str, route: str) -> Run:
    event = make_event(event_id=f"evt-m-{n}")
    run = pipeline.run(pipeline.submit(event, [decision_for(event)]))
    QAReview.objects.create(
        run=run,
        route=route,
        group="ops-leads",
        policy_version="policy-1",
        classifier_version="recorded-classifier-1",
        reading={"category": "support", "effect": "create_follow_up"},
        status=status,
    )
    return run


def test_reviewed_samples_give_the_error_rate_per_week_and_route(
    pipeline: Pipeline, ops_lead: object
) -> None:
    for n in range(3):
        sampled(pipeline, n, QAStatus.CONFIRMED, "service_desk")
    wrong = sampled(pipeline, 3, QAStatus.CORRECTED, "finance")
    sampled(pipeline, 4, QAStatus.OPEN, "finance")  # not reviewed yet: not counted
    person = _user("lia")
    for run, right in ((wrong, False), (Run.objects.exclude(pk=wrong.pk).first(), True)):
        assert run is not None
        Label.objects.create(
            run=run,
            source=LabelSource.QA_CORRECTED,
            actor=person,
            classifier_version="recorded-classifier-1",
            reading={},
            category="billing",
            effect="send_internal_notification",
            reading_was_right=right,
        )
    now = timezone.now()
    period = Period(now - timedelta(days=7), now + timedelta(minutes=1))

    quality = measured_quality(period=period)

    overall = [w for w in quality.weeks if not w.route]
    assert sum(w.errors.reviewed for w in overall) == 4
    assert sum(w.errors.wrong for w in overall) == 1
    routes = {w.route: (w.errors.reviewed, w.errors.wrong) for w in quality.weeks if w.route}
    assert routes == {"service_desk": (3, 0), "finance": (1, 1)}
    (version,) = quality.by_version
    assert (version.labels, version.right, version.accuracy) == (2, 1, 0.5)
    assert sum(n for _, n in quality.labels_per_week) == 2

    table = EXPORTS["measured-quality"](period, now)
    assert table.header[:5] == ["Week starting", "Route", "Route code", "Reviewed", "Read wrong"]
    assert {(row[1], row[2]) for row in table.rows} == {
        ("All routes", "all"),
        ("Service desk", "service_desk"),
        ("Finance", "finance"),
    }

    roles_ensure()
    client = Client()
    client.force_login(ops_lead)  # type: ignore[arg-type]
    page = client.get("/reports/", {"period": "7d"})
    assert page.status_code == 200
    html = page.content.decode()
    assert "25.0% (" in html  # 1 of 4, with its interval
    assert 'data-testid="chart-measured-quality"' in html
    assert html.count('<svg class="chart" role="img"') == 7  # the error rate has its chart
    assert codes_shown(html, ["service_desk"]) == []
    assert "<title>Service desk: 0.0% (0.0% to 56.1%, 3 reviewed)</title>" in html
