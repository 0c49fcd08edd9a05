"""The reports dashboard and each panel's CSV, for ops leads and auditors."""

from __future__ import annotations

import csv

from django.contrib.auth.decorators import login_required, permission_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from console import charts
from console.exports import EXPORTS, spreadsheet_safe
from console.forms.reports import PRESETS, PeriodForm
from core.http import AuthenticatedHttpRequest
from reports import selectors

VIEW_REPORTS = "reports.view_reports"
PERIOD_KEYS = ("period", "from", "to")


def _period_query(request: HttpRequest) -> str:
    """The period part of the query string, carried over to the CSV links."""
    query = request.GET.copy()
    for key in list(query):
        if key not in PERIOD_KEYS:
            del query[key]
    return query.urlencode()


@require_GET
@login_required
@permission_required(VIEW_REPORTS, raise_exception=True)
def dashboard(request: AuthenticatedHttpRequest) -> HttpResponse:
    now = timezone.now()
    form = PeriodForm(request.GET or None)
    with selectors.report_memory():
        data = selectors.dashboard(period=form.to_period(now), now=now)
    route_names = [charts.ALL_RUNS, *map(charts.route_label, data.straight_through.routes)]
    context = {
        "form": form,
        "presets": PRESETS,
        "preset": form.preset,
        "query": _period_query(request),
        "data": data,
        "now": now,
        # Each week's QA error rate over every route, beside its straight-through rate.
        "qa_by_week": {w.start: w.errors for w in data.quality.weeks if not w.route},
        "spend_tables": [
            ("Day", "day", data.spend.days),
            ("Route", "route", data.spend.routes),
            ("Classifier version", "version", data.spend.versions),
        ],
        "charts": {
            "straight_through": charts.straight_through_chart(data.straight_through, data.quality),
            "straight_through_legend": charts.legend(
                route_names + ([charts.READ_WRONG] if data.quality.weeks else [])
            ),
            "quality": charts.quality_chart(data.quality),
            "handoffs": charts.handoffs_chart(data.handoffs),
            "handoffs_legend": charts.legend(["This period", "Previous period"]),
            "approvals": charts.approvals_chart(data.approvals),
            "approvals_legend": charts.legend(["Median", "90th percentile", "Longest"]),
            "rule_changes": charts.rule_changes_chart(data.rule_changes),
            "rule_changes_legend": charts.legend(["Before", "After"]),
            "stages": charts.stages_chart(data.stages),
            "stages_legend": charts.legend(["Median", "95th percentile"]),
            "spend": charts.spend_chart(data.spend),
        },
    }
    status = 400 if form.errors else 200
    return render(request, "reports/dashboard.html", context, status=status)


@require_GET
@login_required
@permission_required(VIEW_REPORTS, raise_exception=True)
def panel_csv(request: AuthenticatedHttpRequest, panel: str) -> HttpResponse:
    export = EXPORTS.get(panel)
    if export is None:
        raise Http404("no such report panel")
    now = timezone.now()
    form = PeriodForm(request.GET or None)
    if form.errors:
        problems = [str(e) for errors in form.errors.values() for e in errors]
        return HttpResponse("; ".join(problems), status=400, content_type="text/plain")
    period = form.to_period(now)
    with selectors.report_memory():
        table = export(period, now)
    name = f"{panel}-{period.since:%Y%m%d}-{period.until:%Y%m%d}.csv"
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    writer = csv.writer(response)
    writer.writerow(table.header)
    writer.writerows([spreadsheet_safe(cell) for cell in row] for row in table.rows)
    return response
