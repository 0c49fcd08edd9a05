"""What model calls cost and how a model server stands, as people and scrapers see them:
tokens and cost on the run, the reports and /metrics; the budget and the breaker on the queues
page and /metrics. A real chat-completions server on 127.0.0.1 (tests/chatserver.py), the
pipeline drained inline on PostgreSQL (the rules: tests/automation/classifiers/
test_model_servers.py)."""

from __future__ import annotations

import csv
import io
from datetime import timedelta
from decimal import Decimal

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounts.roles import roles_ensure
from automation.classifiers.models import ModelServer
from automation.models import ClassificationAttempt, Run, State
from automation.pipeline.services import run_advance
from reports.rollups import rollups_refresh
from tests.automation.conftest import MODEL, SettingsWrapper, configure, llm_pipeline
from tests.chatserver import ChatServer, status
from tests.conftest import Pipeline, make_event

READER = ("reader",)
PRICE = "0.15/0.60"  # per million prompt and completion tokens


@pytest.fixture
def pipeline(policy: None, llm: SettingsWrapper, chat: ChatServer) -> Pipeline:
    chat.default = READER
    return llm_pipeline("model", attempts=5)


@pytest.fixture
def lead(ops_lead: User) -> Client:
    roles_ensure()
    client = Client()
    client.force_login(ops_lead)
    return client


def read(pipeline: Pipeline, event_id: str) -> Run:
    return pipeline.run(pipeline.submit(make_event(event_id=event_id), drain=False))


def drained(pipeline: Pipeline, run: Run) -> Run:
    pipeline.drain(fast_forward=False)
    run.refresh_from_db()
    return run


def metric(body: str, name: str) -> float:
    """The value of one sample line of a Prometheus exposition (`name` with its labels)."""
    for line in body.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} is not exported")


# --- tokens and cost -------------------------------------------------------------------------


def test_tokens_and_cost_reach_the_run_the_reports_and_metrics(
    pipeline: Pipeline, chat: ChatServer, settings: SettingsWrapper, lead: Client
) -> None:
    configure(settings, OPENAI_PRICES={MODEL: PRICE})
    chat.usage = (812, 57)
    first = drained(pipeline, read(pipeline, "evt-a"))
    chat.usage = (1500, 120)
    second = drained(pipeline, read(pipeline, "evt-b"))

    assert (first.state, second.state) == (State.COMPLETED, State.COMPLETED)
    assert (first.prompt_tokens, first.completion_tokens) == (812, 57)
    # 812 * 0.15 + 57 * 0.60, and 1500 * 0.15 + 120 * 0.60, per million tokens.
    assert first.model_cost == Decimal("0.000156")
    assert second.model_cost == Decimal("0.000297")
    attempts = ClassificationAttempt.objects.filter(run__in=[first, second])
    assert sum(a.cost for a in attempts) == Decimal("0.000453")

    def figures() -> tuple[str, str, dict[str, list[str]], str]:
        page = lead.get(reverse("reports:dashboard")).content.decode()
        exported = lead.get(reverse("reports:csv", args=["model-spend"])).content.decode()
        rows = {f"{r[0]}:{r[2] or r[1]}": r for r in csv.reader(io.StringIO(exported))}
        body = lead.get(reverse("metrics")).content.decode()
        return page, exported, rows, body

    page, exported, rows, body = figures()
    assert 'data-testid="table-spend-route"' in page and "0.0005" in page  # 0.000453
    assert rows["period:all"][3:] == ["2", "2", "1.0000", "2312", "177", "0.00045300"]
    version = first.classifier_version
    assert rows[f"classifier version:{version}"][8] == "0.00045300"
    today = timezone.localdate().isoformat()
    assert rows[f"day:{today}"][6:] == ["2312", "177", "0.00045300"]
    route = first.route
    assert rows[f"route:{route}"][3] == "2" and rows[f"route:{route}"][6] == "2312"
    assert metric(body, 'gatehouse_model_tokens_total{kind="prompt"}') == 2312
    assert metric(body, 'gatehouse_model_tokens_total{kind="completion"}') == 177
    assert metric(body, "gatehouse_model_cost_total") == pytest.approx(0.000453)

    # Folded into the rollups, the figures are the same.
    rollups_refresh(now=timezone.now() + timedelta(minutes=10))
    assert figures()[1] == exported
    assert metric(figures()[3], 'gatehouse_model_tokens_total{kind="prompt"}') == 2312


# --- the daily budget ------------------------------------------------------------------------


def test_a_spent_budget_makes_runs_wait_for_tomorrow_without_a_call(
    pipeline: Pipeline, chat: ChatServer, settings: SettingsWrapper, lead: Client
) -> None:
    configure(settings, OPENAI_PRICES={MODEL: PRICE}, OPENAI_DAILY_BUDGET="0.0001")
    chat.usage = (812, 57)  # 0.000156: one call spends the budget
    first = drained(pipeline, read(pipeline, "evt-a"))
    assert first.state == State.COMPLETED

    waiting = drained(pipeline, read(pipeline, "evt-b"))

    assert chat.count() == 1  # no call for the second run
    assert (waiting.state, waiting.waiting_for) == (State.ENRICHED, "budget")
    tomorrow = timezone.localdate() + timedelta(days=1)
    assert waiting.next_attempt_at is not None
    assert timezone.localtime(waiting.next_attempt_at).date() == tomorrow
    assert waiting.classify_attempts == 0  # nothing spent
    run_page = lead.get(reverse("runs:run", args=[waiting.pk])).content.decode()
    assert "daily budget of 0.0001" in run_page and "waits for tomorrow" in run_page
    queues = lead.get(reverse("queues:list")).content.decode()
    assert "Today: 0.0002 of a daily budget of 0.0001" in queues and ">spent<" in queues
    body = lead.get(reverse("metrics")).content.decode()
    server = f'server="{chat.base_url}"'
    assert metric(body, f"gatehouse_model_server_budget_spent{{{server}}}") == 1
    assert metric(body, 'gatehouse_runs_waiting_for_model_server{reason="budget"}') == 1

    # Tomorrow the budget is new: the run is read.
    run_advance(run_id=waiting.pk, now=waiting.next_attempt_at)
    waiting = drained(pipeline, waiting)
    assert (waiting.state, waiting.waiting_for, chat.count()) == (State.COMPLETED, "", 2)


# --- the circuit breaker ---------------------------------------------------------------------


@pytest.fixture
def failing(pipeline: Pipeline, chat: ChatServer, settings: SettingsWrapper) -> Run:
    """A run whose two failed calls opened the breaker (two failures in a row open it)."""
    configure(settings, OPENAI_BREAKER_FAILURES=2, OPENAI_BREAKER_COOLING_SECONDS=30)
    chat.default = status(503)
    run = drained(pipeline, read(pipeline, "evt-down"))
    assert run.next_attempt_at is not None
    run_advance(run_id=run.pk, now=run.next_attempt_at)
    run = drained(pipeline, run)
    assert chat.count() == 2
    assert ModelServer.objects.get(key=chat.base_url).open_until is not None
    return run


def test_an_open_breaker_turns_runs_away_and_one_probe_closes_it(
    pipeline: Pipeline, chat: ChatServer, failing: Run, lead: Client
) -> None:
    turned = drained(pipeline, read(pipeline, "evt-later"))

    assert chat.count() == 2  # no call while the breaker is open
    assert (turned.state, turned.waiting_for) == (State.ENRICHED, "breaker")
    assert turned.classify_attempts == 0
    server = ModelServer.objects.get(key=chat.base_url)
    assert server.open_until is not None and turned.next_attempt_at is not None
    assert turned.next_attempt_at >= server.open_until
    run_page = lead.get(reverse("runs:run", args=[turned.pk])).content.decode()
    assert "circuit breaker opened after 2 failures in a row" in run_page
    queues = lead.get(reverse("queues:list")).content.decode()
    assert "The circuit breaker is open after 2 failures in a row" in queues
    body = lead.get(reverse("metrics")).content.decode()
    label = f'server="{chat.base_url}"'
    assert metric(body, f'gatehouse_model_server_breaker{{{label},state="open"}}') == 1
    assert metric(body, 'gatehouse_runs_waiting_for_model_server{reason="breaker"}') == 1

    # Back up: the first call after the cooling is the probe; it closes the breaker and the
    # runs waiting for it go on at once.
    chat.default = READER
    probe_at = server.open_until + timedelta(seconds=1)
    run_advance(run_id=failing.pk, now=max(probe_at, failing.next_attempt_at or probe_at))
    assert ModelServer.objects.get(key=chat.base_url).open_until is None
    turned.refresh_from_db()
    assert turned.waiting_for == "breaker" and turned.next_attempt_at is not None
    assert turned.next_attempt_at <= probe_at  # woken: due when the probe answered
    pipeline.drain()
    turned.refresh_from_db()
    failing.refresh_from_db()
    assert (failing.state, turned.state) == (State.COMPLETED, State.COMPLETED)
    assert chat.count() == 4  # the probe, then the waiting run's one call
    body = lead.get(reverse("metrics")).content.decode()
    assert metric(body, f'gatehouse_model_server_breaker{{{label},state="closed"}}') == 1
