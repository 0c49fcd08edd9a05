"""Hostile values in the console's parameters and forms: a clear 4xx or form error, never a 500.

Each case is a page a person with the right role may use, and a value no person should
send: impossible dates, dates at the ends of the calendar, numbers Python's int() refuses
(a superscript digit passes str.isdigit()), numbers no column holds, NUL characters, and
policy YAML built to exhaust the parser.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import httpx
import pytest
import yaml
from django.contrib.auth.models import Group, User
from django.test import Client
from django.utils import timezone

from accounts.roles import roles_ensure
from automation.effects.http import MAX_RETRY_AFTER, _retry_after, sign, verify
from automation.models import EffectControl
from automation.recovery.simulation import simulation_process, simulation_start
from policy.models import PolicyVersion
from policy.services import DEFAULTS_DIR, parse_policy_text, policy_version_create

HUGE = "9" * 23
SUPERSCRIPT_TWO = "\u00b2"  # '²'.isdigit() is True, int('²') raises
ARABIC_INDIC_DIGITS = "".join(chr(0x0660 + digit) for digit in range(10))
ARABIC_INDIC_ONE = ARABIC_INDIC_DIGITS[1]  # int() reads it as 1

POLICY_1 = yaml.safe_load((DEFAULTS_DIR / "policy-1.yaml").read_text())


def _policy(**changes: Any) -> str:
    return yaml.safe_dump({**POLICY_1, "version": "policy-2", **changes})


def _nested(levels: int) -> str:
    return "note: ok\nextra: " + "[" * levels + "]" * levels + "\n"


@dataclass(frozen=True)
class Case:
    """One request and the words the answer must show (in the page, or after its redirect)."""

    id: str
    path: str
    shows: str
    data: dict[str, str] = field(default_factory=dict)
    post: bool = False

    def send(self, client: Client) -> Any:
        if self.post:
            return client.post(self.path, self.data, follow=True)
        return client.get(self.path, self.data, follow=True)


QUEUE = "/ops/queues/low_confidence/"
BATCH = {"action": "retry", "since": "2026-03-01T00:00", "until": "2026-03-02T00:00", "reason": "r"}
NOT_APPLIED = "Some filters were not applied"
OUT_OF_RANGE = "Enter a date between 1970-01-01 and 2999-12-31."
NUL_REFUSED = "NUL character"
ADMIN_REFUSED = "could not be applied"
ADMIN_SEARCHED = [
    "automation/run",
    "automation/intakerecord",
    "automation/effect",
    "automation/task",
    "audit/auditevent",
]
CSV_PANELS = ["straight-through", "handoffs", "approval-waits", "rule-changes", "stage-durations"]

CASES = [
    # The exception queue's filters.
    Case("queue-impossible-day", QUEUE, NOT_APPLIED, {"since": "2026-02-30T10:00"}),
    Case("queue-bad-until", QUEUE, "To: Enter a valid date/time.", {"until": "2026-13-45T00:00"}),
    Case("queue-superscript", QUEUE, "Older than (hours)", {"older_than_hours": SUPERSCRIPT_TWO}),
    Case(
        "queue-arabic-indic",
        QUEUE,
        "Older than (hours): Enter a whole number.",
        {"older_than_hours": ARABIC_INDIC_ONE},
    ),
    Case("queue-huge-hours", QUEUE, "less than or equal to", {"older_than_hours": HUGE}),
    Case("queue-negative-hours", QUEUE, "greater than or equal to 0", {"older_than_hours": "-1"}),
    Case("queue-year-1", QUEUE, OUT_OF_RANGE, {"since": "0001-01-01T00:00"}),
    Case("queue-year-9999", QUEUE, OUT_OF_RANGE, {"until": "9999-12-31T23:59"}),
    Case(
        "queue-reversed-window",
        QUEUE,
        "The end comes before the start.",
        {"since": "2026-03-02T00:00", "until": "2026-03-01T00:00"},
    ),
    Case("queue-nul-search", QUEUE, NUL_REFUSED, {"q": "\x00"}),
    Case("queue-nul-owner", QUEUE, NUL_REFUSED, {"owner": "ana\x00"}),
    Case("queue-long-search", QUEUE, "at most 200 characters", {"q": "x" * 5000}),
    Case("queue-nul-in-path", "/ops/queues/need%00s/", NUL_REFUSED),
    # The reports dashboard and its CSVs.
    Case("dashboard-9999", "/reports/", OUT_OF_RANGE, {"from": "9999-12-30", "to": "9999-12-31"}),
    Case("dashboard-year-1", "/reports/", OUT_OF_RANGE, {"from": "0001-01-01", "to": "0001-01-02"}),
    Case("dashboard-bad-day", "/reports/", "Enter a valid date.", {"from": "2026-02-30"}),
    *[
        Case(f"csv-{panel}-{which}", f"/reports/{panel}.csv", OUT_OF_RANGE, dates)
        for panel in CSV_PANELS
        for which, dates in [
            ("9999", {"from": "9999-12-30", "to": "9999-12-31"}),
            ("year-1", {"from": "0001-01-01", "to": "0001-01-02"}),
        ]
    ],
    # The admin's run list: date hierarchy and list filters.
    *[
        Case(f"admin-{name}", "/admin/automation/run/", ADMIN_REFUSED, query)
        for name, query in [
            ("year-huge", {"created_at__year": HUGE}),
            ("year-superscript", {"created_at__year": SUPERSCRIPT_TWO}),
            ("year-9999", {"created_at__year": "9999"}),
            ("december-9999", {"created_at__year": "9999", "created_at__month": "12"}),
            (
                "last-day",
                {"created_at__year": "9999", "created_at__month": "12", "created_at__day": "31"},
            ),
            ("lookup-year-huge", {"created_at__year__gte": HUGE}),
        ]
    ],
    Case(
        "admin-year-arabic-indic",
        "/admin/automation/run/",
        ADMIN_REFUSED,
        {"created_at__year": "\u0662\u0660\u0662\u0666"},  # 2026 in Arabic-Indic digits
    ),
    # Every admin list with a search box, searched for what looks like a number (and the
    # intake records, searched at all).
    *[
        Case(f"admin-search-{name}-{which}", f"/admin/{name}/", "0 results", {"q": term})
        for name in ADMIN_SEARCHED
        for which, term in [("superscript", SUPERSCRIPT_TWO), ("huge", HUGE)]
    ],
    Case("admin-search-intake-words", "/admin/automation/intakerecord/", "0 results", {"q": "abc"}),
    Case("admin-nul-state", "/admin/automation/run/", NUL_REFUSED, {"state": "\x00"}),
    Case("admin-nul-search", "/admin/automation/run/", NUL_REFUSED, {"q": "\x00"}),
    Case(
        "admin-approvals-year",
        "/admin/approvals/approvalrequest/",
        ADMIN_REFUSED,
        {
            "created_at__year": "9999",
            "created_at__month": "12",
        },
    ),
    Case(
        "admin-audit-year",
        "/admin/audit/auditevent/",
        ADMIN_REFUSED,
        {
            "created_at__year": HUGE,
        },
    ),
    # Effect controls.
    *[
        Case(
            f"resume-rate-{name}",
            "/ops/effects/create_follow_up/resume",
            "not resumed",
            {"rate": rate},
            post=True,
        )
        for name, rate in [
            ("superscript", SUPERSCRIPT_TWO),
            ("arabic-indic", ARABIC_INDIC_ONE),
            ("huge", HUGE),
            ("zero", "0"),
            ("negative", "-5"),
            ("text", "fast"),
        ]
    ],
    Case(
        "resume-nul", "/ops/effects/create_follow_up/resume", NUL_REFUSED, {"rate": "1\x00"}, True
    ),
    # Batch recovery from a queue.
    Case(
        "batch-impossible-day",
        "/ops/queues/low_confidence/batch",
        "Enter a valid date/time.",
        {
            "action": "retry",
            "since": "2026-02-30T10:00",
            "until": "2026-03-01T00:00",
            "reason": "r",
        },
        post=True,
    ),
    Case(
        "batch-year-9999",
        "/ops/queues/low_confidence/batch",
        OUT_OF_RANGE,
        {
            "action": "retry",
            "since": "2026-03-01T00:00",
            "until": "9999-12-31T23:59",
            "reason": "r",
        },
        post=True,
    ),
    # Simulating a policy version.
    *[
        Case(f"simulate-{name}", "/policy/policy-1/simulate", shows, data, post=True)
        for name, shows, data in [
            ("impossible-month", "Enter a valid date/time.", {"since": "2026-13-45T00:00"}),
            ("superscript", "Enter a valid date/time.", {"until": SUPERSCRIPT_TWO}),
            ("year-1", OUT_OF_RANGE, {"since": "0001-01-01T00:00:00"}),
            (
                "reversed",
                "The end comes before the start.",
                {"since": "2026-03-02T00:00", "until": "2026-03-01T00:00"},
            ),
        ]
    ],
    # The policy editor's YAML.
    *[
        Case(f"policy-{name}", "/policy/new", shows, {"document": text}, post=True)
        for name, shows, text in [
            ("nested-1000", "nested more than 10 levels deep", _nested(1000)),
            ("nested-11", "nested more than 10 levels deep", _nested(11)),
            (
                "flow-nested",
                "nested more than 10 levels deep",
                "a: " + "{b: " * 50 + "1" + "}" * 50,
            ),
            (
                "approvers-5000-digits",
                "a number has at most 30 characters",
                _policy().replace("approvers: 1", "approvers: " + "7" * 5000),
            ),
            (
                "approvers-quoted-digits",
                "approvals.queue_account_review.approvers",
                _policy().replace("approvers: 1", "approvers: '" + "7" * 5000 + "'"),
            ),
            ("impossible-date", "a value cannot be read", _policy() + "extra: 2026-02-30\n"),
            (
                "alias-bomb",
                "aliases (*name) are not allowed",
                "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a]\n"
                "c: &c [*b, *b, *b, *b, *b, *b, *b, *b]\nd: [*c, *c, *c, *c, *c, *c, *c, *c]\n",
            ),
            (
                "escaped-nul",
                "cannot be stored",
                _policy(note="x").replace("note: x", 'note: "a\\0b"'),
            ),
            (
                "lone-surrogate",
                "cannot be stored",
                _policy(note="x").replace("note: x", 'note: "a\\ud800b"'),
            ),
            ("too-long", "at most 100,000 characters", "note: " + "x" * 100_001),
        ]
    ],
    Case("policy-nul-in-path", "/policy/%00/", NUL_REFUSED),
    # Activating a version: the simulation confirmed is a number.
    *[
        Case(f"activate-{name}", "/policy/policy-1/activate", "Not activated", data, post=True)
        for name, data in [
            ("superscript", {"simulation": SUPERSCRIPT_TWO}),
            ("huge", {"simulation": HUGE}),
            ("arabic-indic", {"simulation": ARABIC_INDIC_ONE}),
        ]
    ],
]


@pytest.fixture
def ops_lead_client(policy: None) -> Client:
    """An ops lead with the roles' real permissions: every page above is theirs to use."""
    roles_ensure()
    user = User.objects.create_user("lead", is_staff=True)
    user.groups.add(Group.objects.get(name="ops-leads"))
    client = Client(raise_request_exception=False)
    client.force_login(user)
    return client


@pytest.mark.django_db
@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_hostile_values_get_a_clear_answer_never_a_500(ops_lead_client: Client, case: Case) -> None:
    response = case.send(ops_lead_client)
    assert response.status_code < 500, response.content[:500]
    assert response.status_code != 403  # the role may use the page: the value is the problem
    assert case.shows in response.content.decode(), response.content.decode()[:3000]


@pytest.mark.django_db
def test_a_refused_filter_leaves_the_others_applied(ops_lead_client: Client) -> None:
    page = ops_lead_client.get(QUEUE, {"older_than_hours": HUGE, "route": "finance"})
    assert page.status_code == 400
    assert page.context["filters"].route == "finance"
    assert page.context["filters"].older_than_hours is None


@pytest.mark.django_db
def test_a_refused_resume_changes_nothing(ops_lead_client: Client) -> None:
    ops_lead_client.post("/ops/effects/create_follow_up/pause")
    ops_lead_client.post("/ops/effects/create_follow_up/resume", {"rate": HUGE})
    control = EffectControl.objects.get(name="create_follow_up")
    assert control.paused and control.rate_per_minute is None
    ops_lead_client.post("/ops/effects/create_follow_up/resume", {"rate": "12"})
    control.refresh_from_db()
    assert not control.paused and control.rate_per_minute == 12


@pytest.mark.django_db
def test_names_longer_than_their_column_name_nothing(ops_lead_client: Client) -> None:
    long_name = "x" * 300
    assert ops_lead_client.post(f"/ops/effects/{long_name}/pause").status_code == 404
    batch = {"action": "retry", "since": "2026-03-01T00:00", "until": "2026-03-02T00:00"}
    response = ops_lead_client.post(f"/ops/queues/{long_name}/batch", {**batch, "reason": "r"})
    assert response.status_code == 404


# --- the same mistake in effect delivery: numbers from a receiver, read without bounds ------


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("120", 120.0),
        (SUPERSCRIPT_TWO, None),
        ("9" * 40, MAX_RETRY_AFTER),
        ("Fri, 31 Dec 9999 23:59:59 GMT", MAX_RETRY_AFTER),
        ("Thu, 01 Jan 1970 00:00:00 GMT", 0.0),
        ("soon", None),
    ],
)
def test_a_receivers_retry_after_is_read_within_bounds(header: str, expected: float | None) -> None:
    response = httpx.Response(503, headers={"Retry-After": header.encode("latin-1")})
    assert _retry_after(response) == expected


@pytest.mark.parametrize("timestamp", ["9" * 400, SUPERSCRIPT_TWO, "-" + "9" * 400, "x"])
def test_a_signature_with_an_absurd_timestamp_is_simply_invalid(timestamp: str) -> None:
    body = b"{}"
    good = sign("s" * 32, body, timestamp=1_700_000_000, nonce="n" * 32)
    header = good.replace("t=1700000000", f"t={timestamp}")
    assert not verify("s" * 32, header, body, now=1_700_000_000.0)
    assert verify("s" * 32, good, body, now=1_700_000_000.0)


@pytest.mark.django_db
def test_a_simulation_named_in_another_scripts_digits_activates_nothing(
    ops_lead_client: Client,
) -> None:
    """The simulation confirmed is read as ASCII digits: its number written in Arabic-Indic
    digits (which int() reads as that number) confirms nothing."""
    policy_version_create(document=parse_policy_text(_policy()))
    now = timezone.now()
    simulation = simulation_start(
        version="policy-2", since=now - timedelta(days=1), until=now, user=None, in_worker=False
    )
    simulation_process(simulation_id=simulation.pk)
    look_alike = str(simulation.pk).translate(str.maketrans("0123456789", ARABIC_INDIC_DIGITS))

    refused = ops_lead_client.post("/policy/policy-2/activate", {"simulation": look_alike})
    assert PolicyVersion.objects.get(is_active=True).name == "policy-1"
    assert refused.status_code == 302

    ops_lead_client.post("/policy/policy-2/activate", {"simulation": str(simulation.pk)})
    assert PolicyVersion.objects.get(is_active=True).name == "policy-2"
