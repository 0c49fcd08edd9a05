"""Pages that stay fast at a million runs: each page's query count is bounded and does not grow
with the rows behind it, lists page by keyset, and the queue counts read their own index.

Counts are measured with N rows and again with 3N: equal counts mean no query per row. The
plans are PostgreSQL's own (EXPLAIN after ANALYZE), with the planner free to choose.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.core.cache import cache
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from accounts.roles import roles_ensure
from approvals import selectors as approval_selectors
from approvals.models import ApprovalRequest
from approvals.services import approval_decide
from audit.models import AuditEvent
from automation.models import Run
from automation.recovery.selectors import (
    QueueFilters,
    identifier_match,
    queue_items,
    queue_summaries,
)
from automation.recovery.services import run_retry
from automation.runs.comments import run_comment_add
from console import context_processors
from core import admin_base
from core.keyset import Cursor, parse_cursor
from tests.conftest import TIMEOUT, Pipeline, decision_for, make_event

# Most queries any list page may make (the target at a million runs).
PAGE_QUERY_LIMIT = 12
# The run page reads each of its nine lists (stages, checkpoints, readings, approvals, effects,
# recovery, history, comments, related runs) with a query of its own, Django's
# prefetch_related, and their decisions and attempts with one more each when there are any:
# 19 for a held run with all of them, a count that does not grow with the rows.
RUN_PAGE_QUERY_LIMIT = 19


def person(username: str, *groups: str, **extra: Any) -> User:
    user = User.objects.create_user(username=username, **extra)
    user.groups.add(*[Group.objects.get(name=g) for g in groups])
    return user


@pytest.fixture
def people(pipeline: Pipeline) -> dict[str, User]:
    roles_ensure()
    return {
        "approver": person("ana", "security-approvers"),
        "lead": person("lee", "ops-leads", is_staff=True),
        "root": User.objects.create_superuser("root", "root@example.com", None),
    }


def held(pipeline: Pipeline, number: int) -> Run:
    """A run held in retry_exhausted (the test channel allows two classifier attempts)."""
    event = make_event(event_id=f"evt-held-{number}")
    return pipeline.run(pipeline.submit(event, [TIMEOUT, TIMEOUT]))


def waiting(pipeline: Pipeline, number: int) -> Run:
    """A run waiting for the security approvers' decision."""
    event = make_event(
        event_id=f"evt-sec-{number}",
        request_type="security",
        requested_action="queue_account_review",
        subject="Suspicious sign-ins",
    )
    return pipeline.run(pipeline.submit(event, [decision_for(event)]))


def completed(pipeline: Pipeline, number: int) -> Run:
    event = make_event(event_id=f"evt-done-{number}")
    return pipeline.run(pipeline.submit(event, [decision_for(event)]))


def add_runs(pipeline: Pipeline, count: int, start: int) -> None:
    for number in range(start, start + count):
        held(pipeline, number)
        waiting(pipeline, number)
        completed(pipeline, number)


def client_for(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def queries(client: Client, url: str) -> tuple[int, list[str]]:
    client.get(url)  # sessions, permission caches and the like are warm, as in use
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    assert response.status_code == 200, url
    return len(captured), [q["sql"] for q in captured.captured_queries]


def page_urls(pipeline: Pipeline) -> dict[str, tuple[str, str]]:
    """Each page under test, as (who, address)."""
    first = Run.objects.filter(event_id="evt-sec-0").get()
    return {
        "inbox": ("approver", reverse("approvals:inbox")),
        "inbox (everything)": ("lead", reverse("approvals:inbox") + "?scope=all"),
        "queues": ("lead", reverse("queues:list")),
        "one queue": ("lead", reverse("queues:queue", args=["retry_exhausted"])),
        "run page": ("lead", reverse("runs:run", args=[first.pk])),
        "admin run list": ("root", reverse("admin:automation_run_changelist")),
        "admin search": ("root", reverse("admin:automation_run_changelist") + "?q=evt-sec-0"),
        "admin audit list": ("root", reverse("admin:audit_auditevent_changelist")),
        "admin effect list": ("root", reverse("admin:automation_effect_changelist")),
    }


def counts(pipeline: Pipeline, people: dict[str, User]) -> dict[str, int]:
    clients = {name: client_for(user) for name, user in people.items()}
    found = {}
    for page, (who, url) in page_urls(pipeline).items():
        found[page], _ = queries(clients[who], url)
    return found


def test_no_page_makes_a_query_per_row(pipeline: Pipeline, people: dict[str, User]) -> None:
    add_runs(pipeline, 2, start=0)
    assert ApprovalRequest.objects.filter(status="pending").count() == 2
    with_n = counts(pipeline, people)

    add_runs(pipeline, 4, start=2)
    with_3n = counts(pipeline, people)

    assert with_n == with_3n
    run_page = with_3n.pop("run page")
    assert max(with_3n.values()) <= PAGE_QUERY_LIMIT, with_3n
    assert run_page <= RUN_PAGE_QUERY_LIMIT


def test_the_run_page_reads_its_history_in_a_query_per_list(
    pipeline: Pipeline, people: dict[str, User]
) -> None:
    run = held(pipeline, 1)
    client = client_for(people["lead"])
    url = reverse("runs:run", args=[run.pk])
    before, _ = queries(client, url)
    # More of everything the page lists: attempts, stages, recovery actions, audit rows.
    pipeline.record(run.event_id, [TIMEOUT, TIMEOUT, TIMEOUT, TIMEOUT])
    for _ in range(2):
        with pipeline.capture():
            run_retry(run_id=run.pk, user=people["lead"], reason="again")
        pipeline.drain()
    page = client.get(url).content.decode()
    after, _ = queries(client, url)

    assert after == before <= RUN_PAGE_QUERY_LIMIT
    assert page.count("retry") >= 2 and "lee" in page


def test_the_navigation_count_agrees_with_the_inbox_in_one_count(
    pipeline: Pipeline, people: dict[str, User]
) -> None:
    add_runs(pipeline, 3, start=0)
    approver = people["approver"]
    client = client_for(approver)
    client.get(reverse("approvals:inbox"))
    cache.clear()
    with CaptureQueriesContext(connection) as first:
        page = client.get(reverse("approvals:inbox")).content.decode()
    rows = approval_selectors.inbox(user=approver, scope="mine", overdue_only=False, now=_now())

    assert approval_selectors.inbox_count(approver, _now()) == len(rows) == 3
    assert 'data-testid="nav-inbox-count">3<' in page
    sql = [q["sql"] for q in first.captured_queries]
    counting = [q for q in sql if "approvals_approvalrequest" in q and "COUNT(*)" in q]
    assert len(counting) == 1
    assert "LIMIT 100" in counting[0]  # every page pays for it: it reads at most 100 rows
    # The next page reuses the count, until something it counts is saved.
    _, again = queries(client, reverse("me:notifications"))
    assert not [q for q in again if "approvals_approvalrequest" in q and "COUNT(*)" in q]
    request = ApprovalRequest.objects.filter(status="pending").order_by("pk").first()
    assert request is not None
    with pipeline.capture():
        approval_decide(request_id=request.pk, user=approver, approve=True, seen=request.binding())
    pipeline.drain()
    page = client.get(reverse("me:notifications")).content.decode()
    assert 'data-testid="nav-inbox-count">2<' in page


def test_the_navigation_counts_afresh_when_a_persons_groups_change(
    pipeline: Pipeline, people: dict[str, User]
) -> None:
    add_runs(pipeline, 2, start=0)  # waiting for security-approvers
    other = person("oli", "finance-approvers")
    client = client_for(other)
    nav = 'data-testid="nav-inbox-count">{}<'

    assert nav.format(0) in client.get(reverse("me:notifications")).content.decode()
    other.groups.add(Group.objects.get(name="security-approvers"))
    assert nav.format(2) in client.get(reverse("me:notifications")).content.decode()
    other.groups.remove(Group.objects.get(name="security-approvers"))
    assert nav.format(0) in client.get(reverse("me:notifications")).content.decode()


def test_the_navigation_says_99_plus_past_a_hundred_waiting(
    pipeline: Pipeline, people: dict[str, User], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(context_processors, "NAV_COUNT_LIMIT", 3)
    add_runs(pipeline, 3, start=0)
    page = client_for(people["approver"]).get(reverse("approvals:inbox")).content.decode()

    assert 'data-testid="nav-inbox-count">2+</span>' in page
    assert approval_selectors.inbox_count(people["approver"], _now(), limit=2) == 2


def _now() -> Any:
    return timezone.now()


# --- keyset pages ---------------------------------------------------------------------------


def test_queue_pages_follow_by_cursor_and_cover_every_run_once(
    pipeline: Pipeline, people: dict[str, User], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("automation.recovery.selectors.QUEUE_PAGE_SIZE", 2)
    runs = [held(pipeline, number) for number in range(5)]
    client = client_for(people["lead"])
    url = reverse("queues:queue", args=["retry_exhausted"])

    seen: list[str] = []
    query = ""
    for _ in range(5):
        page = client.get(url + query).content.decode()
        seen += re.findall(r"evt-held-\d+", page)
        found = re.search(r'href="(\?[^"]*after=[^"]*)" rel="next"', page)
        if found is None:
            break
        query = found.group(1).replace("&amp;", "&")

    assert seen == [run.event_id for run in runs]  # oldest first, each once
    back = re.search(r'href="(\?[^"]*before=[^"]*)" rel="prev"', page)
    assert back is not None
    earlier = client.get(url + back.group(1).replace("&amp;", "&")).content.decode()
    assert re.findall(r"evt-held-\d+", earlier) == ["evt-held-2", "evt-held-3"]


@pytest.mark.parametrize(
    "cursor", ["x", "1.2.3", "-" + "9" * 18 + ".1", "9" * 18 + ".1", "1." + "9" * 40, "\u0661.1"]
)
def test_a_bad_cursor_is_a_400_with_the_first_page_never_a_500(
    pipeline: Pipeline, people: dict[str, User], cursor: str
) -> None:
    held(pipeline, 1)
    waiting(pipeline, 1)
    queue = client_for(people["lead"]).get(
        reverse("queues:queue", args=["retry_exhausted"]), {"after": cursor}
    )
    inbox = client_for(people["approver"]).get(reverse("approvals:inbox"), {"before": cursor})

    assert queue.status_code == 400 and b"evt-held-1" in queue.content
    assert b"Page" in queue.content
    assert inbox.status_code == 400 and b"evt-sec-1" in inbox.content


def test_a_cursor_reads_back_what_it_was_written_from() -> None:
    cursor = Cursor(at=_now(), pk=42)
    assert parse_cursor(str(cursor)) == cursor


def test_the_inbox_pages_by_cursor(
    pipeline: Pipeline, people: dict[str, User], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(approval_selectors, "INBOX_LIMIT", 2)
    for number in range(3):
        waiting(pipeline, number)
    client = client_for(people["approver"])
    first = client.get(reverse("approvals:inbox")).content.decode()
    found = re.search(r'href="(\?[^"]*after=[^"]*)" rel="next"', first)
    assert found is not None
    second = client.get(reverse("approvals:inbox") + found.group(1).replace("&amp;", "&"))

    assert re.findall(r"evt-sec-\d", first) == ["evt-sec-0", "evt-sec-1"]
    assert re.findall(r"evt-sec-\d", second.content.decode()) == ["evt-sec-2"]


# --- search ---------------------------------------------------------------------------------


def test_admin_search_finds_a_run_by_each_identifier_exactly(
    pipeline: Pipeline, people: dict[str, User]
) -> None:
    run = completed(pipeline, 1)
    other = completed(pipeline, 2)
    client = client_for(people["root"])
    url = reverse("admin:automation_run_changelist")

    for term in [run.event_id, run.fingerprint, str(run.pk)]:
        page = client.get(url, {"q": term}).content.decode()
        assert f"/admin/automation/run/{run.pk}/change/" in page, term
        assert f"/admin/automation/run/{other.pk}/change/" not in page, term
    partial = client.get(url, {"q": run.event_id[:-1]}).content.decode()
    assert f"/admin/automation/run/{run.pk}/change/" not in partial
    assert "Exact match on a run number, event id" in client.get(url).content.decode()


ARABIC_INDIC = str.maketrans("0123456789", "".join(chr(0x0660 + d) for d in range(10)))


def test_a_number_in_another_script_names_no_run(
    pipeline: Pipeline, people: dict[str, User]
) -> None:
    """int() reads Arabic-Indic digits as the number they look like: a search for them is not a
    search for that run's number (nor that intake's)."""
    run = completed(pipeline, 1)
    client = client_for(people["root"])
    look_alike = str(run.pk).translate(ARABIC_INDIC)

    runs = client.get(reverse("admin:automation_run_changelist"), {"q": look_alike})
    intakes = client.get(reverse("admin:automation_intakerecord_changelist"), {"q": look_alike})

    assert f"/admin/automation/run/{run.pk}/change/" not in runs.content.decode()
    assert f"/intakerecord/{run.intake_id}/change/" not in intakes.content.decode()


def test_admin_intake_search_finds_a_record_by_number_digest_or_its_run(
    pipeline: Pipeline, people: dict[str, User]
) -> None:
    run, other = completed(pipeline, 1), completed(pipeline, 2)
    record = run.intake
    client = client_for(people["root"])
    url = reverse("admin:automation_intakerecord_changelist")
    link = f"/admin/automation/intakerecord/{record.pk}/change/"
    others = f"/admin/automation/intakerecord/{other.intake_id}/change/"

    for term in [str(record.pk), record.raw_sha256, record.raw_sha256.upper(), run.event_id]:
        page = client.get(url, {"q": term})
        assert page.status_code == 200, term
        assert link in page.content.decode(), term
        assert others not in page.content.decode(), term
    assert link not in client.get(url, {"q": record.raw_sha256[:-1]}).content.decode()
    assert "Exact match on an intake number" in client.get(url).content.decode()


def test_queue_search_finds_a_held_run_by_fingerprint(
    pipeline: Pipeline, people: dict[str, User]
) -> None:
    run, other = held(pipeline, 1), held(pipeline, 2)
    page = client_for(people["lead"]).get(
        reverse("queues:queue", args=["retry_exhausted"]), {"q": run.fingerprint}
    )
    assert run.event_id in page.content.decode()
    assert other.event_id not in page.content.decode()


# --- no count of the whole table ------------------------------------------------------------


def test_the_admin_run_list_never_counts_every_run(
    pipeline: Pipeline, people: dict[str, User]
) -> None:
    add_runs(pipeline, 1, start=0)
    _, sql = queries(client_for(people["root"]), reverse("admin:automation_run_changelist"))
    whole = re.compile(r'SELECT COUNT\(\*\) AS "__count" FROM "automation_run"\s*$')
    assert not [q for q in sql if whole.match(q)]
    assert not [q for q in sql if "DISTINCT" in q and "automation_run" in q]


def test_a_large_unfiltered_list_is_counted_from_the_planners_estimate(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    template = completed(pipeline, 1)
    clone_runs(template, 40)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE automation_run")
    monkeypatch.setattr(admin_base, "COUNT_BOUND", 10)
    everything = admin_base.EstimatedCountPaginator(Run.objects.order_by("-pk"), 5)
    filtered = admin_base.EstimatedCountPaginator(
        Run.objects.filter(state="completed").order_by("-pk"), 5
    )

    with CaptureQueriesContext(connection) as captured:
        estimate = everything.count
    assert estimate == Run.objects.count() == 41
    assert all("COUNT" not in q["sql"] for q in captured.captured_queries)
    assert filtered.count == 11  # counted up to the bound, no further
    assert filtered.num_pages == 3


# --- plans ----------------------------------------------------------------------------------


def clone_runs(template: Run, count: int, **columns: str) -> None:
    """`count` copies of a run, made in one INSERT ... SELECT (a bulk of history, fast)."""
    fields = [f for f in Run._meta.concrete_fields if not f.primary_key]
    values = {f.column: f'"{f.column}"' for f in fields}
    values["event_id"] = "'clone-' || g"
    values["claims_identity"] = "false"
    values.update(columns)
    names = ", ".join(f'"{column}"' for column in values)
    sql = (
        f"INSERT INTO automation_run ({names}) SELECT {', '.join(values.values())} "  # noqa: S608
        f"FROM automation_run, generate_series(1, %s) g WHERE id = %s"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [count, template.pk])


def plan(sql: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE automation_run")
        cursor.execute("EXPLAIN (FORMAT JSON) " + sql)
        return json.dumps(cursor.fetchone()[0])


def test_queue_counts_and_pages_read_the_held_runs_index(pipeline: Pipeline) -> None:
    template = completed(pipeline, 1)
    clone_runs(template, 3000)
    held_run = held(pipeline, 1)
    clone_runs(
        held_run, 30, event_id="'held-clone-' || g", queued_at="now() - g * interval '1 minute'"
    )

    with CaptureQueriesContext(connection) as captured:
        summaries = queue_summaries(owners={})
        queue_items(queue="retry_exhausted", filters=QueueFilters(), now=_now())
    summary_sql, items_sql = (q["sql"] for q in captured.captured_queries)

    assert [(s.name, s.count) for s in summaries] == [("retry_exhausted", 31)]
    assert "run_held_queue_idx" in plan(summary_sql)
    assert "Seq Scan" not in plan(summary_sql)
    assert "run_held_queue_idx" in plan(items_sql)


def test_search_by_identifier_is_an_index_lookup(pipeline: Pipeline) -> None:
    template = completed(pipeline, 1)
    clone_runs(template, 3000, fingerprint="md5(g::text)")
    with CaptureQueriesContext(connection) as captured:
        list(Run.objects.filter(identifier_match("abc")).values("pk"))
    found = plan(captured.captured_queries[0]["sql"])

    assert "Seq Scan" not in found
    for index in ("run_event_id_idx", "run_fingerprint_idx", "run_customer_ref_idx"):
        assert index in found


def test_admin_audit_search_finds_a_persons_actions_or_a_runs_rows(
    pipeline: Pipeline, people: dict[str, User]
) -> None:
    run, other = held(pipeline, 1), held(pipeline, 2)
    with pipeline.capture():
        run_retry(run_id=run.pk, user=people["lead"], reason="again")
    pipeline.drain()
    client = client_for(people["root"])
    url = reverse("admin:audit_auditevent_changelist")

    by_run = client.get(url, {"q": run.event_id}).content.decode()
    by_person = client.get(url, {"q": "lee"}).content.decode()
    by_other = client.get(url, {"q": other.event_id}).content.decode()

    assert f"run #{run.pk} " in by_run and f"run #{other.pk} " not in by_run
    assert f"run #{other.pk} " in by_other
    assert "lee" in by_person and f"run #{other.pk} " not in by_person


def test_the_inbox_reads_an_approvers_hand_actions_not_their_decisions(
    pipeline: Pipeline, people: dict[str, User]
) -> None:
    """A busy approver's audit rows are mostly their own decisions: separation of duties reads
    only the rest, from audit_hand_action_idx, not every row the approver ever wrote."""
    approver = people["approver"]
    mine = waiting(pipeline, 1)
    others = waiting(pipeline, 2)
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO audit_auditevent (run_id, actor_id, actor_label, action, from_state,"
            " to_state, data, created_at) SELECT %s, %s, 'ana', 'approval.approved', '', '',"
            " '{}', now() FROM generate_series(1, 5000)",
            [others.pk, approver.pk],
        )
        cursor.execute(
            "INSERT INTO audit_auditevent (run_id, actor_id, actor_label, action, from_state,"
            " to_state, data, created_at) VALUES (%s, %s, 'ana', 'run.classify', '', '',"
            " '{}', now())",
            [mine.pk, approver.pk],
        )
        cursor.execute("ANALYZE audit_auditevent")
    now = timezone.now()
    requests = approval_selectors.inbox_requests(
        user=approver, scope="mine", overdue_only=False, now=now
    )

    with CaptureQueriesContext(connection) as captured:
        found = list(requests.values_list("run_id", flat=True))

    assert found == [others.pk]
    assert "audit_hand_action_idx" in plan(captured.captured_queries[0]["sql"])


def test_a_runs_comment_thread_costs_the_same_queries_for_ten_comments_as_for_one(
    pipeline: Pipeline, people: dict[str, User]
) -> None:
    """On the run page the thread is one query with its authors (and one more for people it
    mentions who wrote none of it); on the evidence page it is one query with the authors,
    and one for the people mentioned."""
    run = waiting(pipeline, 1)
    request = ApprovalRequest.objects.get(run=run)
    lead, approver = people["lead"], people["approver"]
    pages = {
        "run page": (client_for(lead), reverse("runs:run", args=[run.pk])),
        "evidence": (client_for(approver), reverse("approvals:evidence", args=[request.pk])),
    }

    def write(count: int) -> None:
        for number in range(count):
            author = (lead, approver)[number % 2]
            body = f"Note {number} for @{author.get_username()} and @ops-leads"
            run_comment_add(run_id=run.pk, author=author, body=body, now=timezone.now())

    write(1)
    with_one = {name: queries(client, url)[0] for name, (client, url) in pages.items()}
    write(9)
    with_ten = {name: queries(client, url)[0] for name, (client, url) in pages.items()}

    assert with_ten == with_one
    assert with_ten["run page"] <= RUN_PAGE_QUERY_LIMIT
    assert client_for(lead).get(pages["run page"][1]).content.decode().count("Note ") >= 10


# The evidence page's queries for each of its readers, as counted when its reading became one
# selector (console.evidence.evidence_page): a lead also reads whom the request may be given.
EVIDENCE_QUERIES = {"approver": 16, "lead": 19, "root": 15}


def test_the_evidence_page_reads_no_more_than_its_count_for_each_reader(
    pipeline: Pipeline, people: dict[str, User]
) -> None:
    request = ApprovalRequest.objects.get(run=waiting(pipeline, 1))
    url = reverse("approvals:evidence", args=[request.pk])
    found = {name: queries(client_for(people[name]), url)[0] for name in EVIDENCE_QUERIES}
    assert all(found[name] <= most for name, most in EVIDENCE_QUERIES.items()), found


def test_the_audit_lists_action_choices_skip_through_its_index(pipeline: Pipeline) -> None:
    """The admin audit list's action filter offers the actions on record, read by skipping
    through audit_action_idx (one probe per action), not by SELECT DISTINCT over every row."""
    for number in range(3):
        held(pipeline, number)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE audit_auditevent")
    expected = list(
        AuditEvent.objects.order_by("action").values_list("action", flat=True).distinct()
    )
    with CaptureQueriesContext(connection) as captured:
        actions = admin_base.distinct_by_index(AuditEvent.objects.all(), "action")

    assert actions == expected and len(actions) > 2
    assert len(captured) == 1
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")  # the small table's plan as a big one's
        cursor.execute("EXPLAIN (FORMAT JSON) " + captured.captured_queries[0]["sql"])
        found = json.dumps(cursor.fetchone()[0])
    assert "audit_action_idx" in found and "Seq Scan" not in found
