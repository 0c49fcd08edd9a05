"""Structured logs: JSON lines, and every line about a run names its run and its event."""

from __future__ import annotations

import json
import logging
import runpy
import sys
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction

from automation.models import Run
from automation.runs.journal import record_transition
from core.logging import JsonFormatter, PlainFormatter
from tests.conftest import TIMEOUT, Pipeline, decision_for, make_event

SETTINGS_FILE = Path(__file__).resolve().parents[2] / "config" / "settings.py"
SECRET_BODY = "Please reset the account; my password is hunter2-do-not-log."


def lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    """The captured gatehouse.runs records, formatted and parsed back as the collector would."""
    formatter = JsonFormatter()
    text = [formatter.format(r) for r in caplog.records if r.name == "gatehouse.runs"]
    assert all("\n" not in line for line in text)
    return [json.loads(line) for line in text]


@pytest.fixture
def runs_log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="gatehouse.runs")
    return caplog


def test_a_run_through_the_pipeline_logs_json_lines_naming_the_run_and_event(
    pipeline: Pipeline, runs_log: pytest.LogCaptureFixture
) -> None:
    event = make_event(event_id="evt-log", body=SECRET_BODY)
    run = pipeline.run(pipeline.submit(event, [decision_for(event)]))

    logged = lines(runs_log)
    assert logged, "the pipeline logged nothing about the run"
    assert all(line["run_id"] == run.pk and line["event_id"] == "evt-log" for line in logged)
    assert all(line["logger"] == "gatehouse.runs" and line["time"] for line in logged)
    transitions = [
        (line["transition"], line["from_state"], line["to_state"], line["outcome"])
        for line in logged
        if "transition" in line
    ]
    assert transitions == [
        ("validate", "received", "validated", ""),
        ("normalize", "validated", "normalized", ""),
        ("enrich", "normalized", "enriched", ""),
        ("classify", "enriched", "classified", ""),
        ("execute", "classified", "executing", ""),
        ("complete", "executing", "completed", "completed"),
    ]
    assert [line["code"] for line in logged if "code" in line] == ["accepted"]
    (attempt,) = [line for line in logged if "result" in line]
    assert attempt["effect"] == "create_follow_up" and attempt["result"] == "delivered"
    assert "hunter2" not in json.dumps(logged)


def test_held_and_invalid_runs_log_their_outcome(
    pipeline: Pipeline, runs_log: pytest.LogCaptureFixture
) -> None:
    held = pipeline.run(pipeline.submit(make_event(event_id="evt-held"), [TIMEOUT, TIMEOUT]))
    invalid = pipeline.run(pipeline.submit({"event_id": "evt-invalid"}))

    logged = lines(runs_log)
    last = {line["run_id"]: line for line in logged}
    assert (last[held.pk]["to_state"], last[held.pk]["outcome"]) == (
        "needs_review",
        "retry_exhausted",
    )
    codes = [(line["run_id"], line["event_id"], line["code"]) for line in logged if "code" in line]
    assert (invalid.pk, "evt-invalid", "invalid_event") in codes


def test_a_repeated_event_logs_the_existing_run(
    pipeline: Pipeline, runs_log: pytest.LogCaptureFixture
) -> None:
    event = make_event(event_id="evt-twice")
    first = pipeline.run(pipeline.submit(event, [decision_for(event)]))
    runs_log.clear()

    pipeline.submit(event)

    (line,) = lines(runs_log)
    assert (line["run_id"], line["event_id"], line["code"]) == (
        first.pk,
        "evt-twice",
        "idempotent_replay",
    )


def test_a_rolled_back_transition_is_not_logged(
    pipeline: Pipeline, runs_log: pytest.LogCaptureFixture, django_capture_on_commit_callbacks: Any
) -> None:
    run = pipeline.run(pipeline.submit(make_event(event_id="evt-rb"), drain=False))
    runs_log.clear()

    with (
        django_capture_on_commit_callbacks(execute=True),
        pytest.raises(RuntimeError),
        transaction.atomic(),
    ):
        fresh = Run.objects.get(pk=run.pk)
        record_transition(fresh, fresh.validate, event_id="evt-rb")
        raise RuntimeError("the step failed after the transition")

    assert lines(runs_log) == []


def _record(**extra: Any) -> logging.LogRecord:
    return logging.makeLogRecord(
        {"name": "gatehouse.runs", "levelno": 20, "levelname": "INFO", "msg": "m", **extra}
    )


def test_the_json_formatter_keeps_fields_and_stringifies_what_json_cannot_say() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        record = _record(run_id=3, event_id="e", when=object, exc_info=sys.exc_info())

    line = json.loads(JsonFormatter().format(record))

    assert (line["run_id"], line["event_id"], line["level"], line["message"]) == (
        3,
        "e",
        "INFO",
        "m",
    )
    assert line["when"] == str(object)
    assert "ValueError: boom" in line["exception"]


def test_the_plain_formatter_appends_fields_as_key_value_pairs() -> None:
    text = PlainFormatter("%(levelname)s %(message)s").format(_record(run_id=3, event_id="e"))

    assert text == 'INFO m run_id=3 event_id="e"'


def logging_settings(monkeypatch: pytest.MonkeyPatch, log_format: str | None) -> dict[str, Any]:
    """LOGGING as config/settings.py builds it from this environment."""
    if log_format is None:
        monkeypatch.delenv("GATEHOUSE_LOG_FORMAT", raising=False)
    else:
        monkeypatch.setenv("GATEHOUSE_LOG_FORMAT", log_format)
    return runpy.run_path(str(SETTINGS_FILE))["LOGGING"]


def test_logs_are_json_unless_plain_is_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    default = logging_settings(monkeypatch, None)
    plain = logging_settings(monkeypatch, "plain")

    assert default["handlers"]["console"]["formatter"] == "json"
    assert default["formatters"]["json"]["()"] == "core.logging.JsonFormatter"
    assert plain["handlers"]["console"]["formatter"] == "plain"
    with pytest.raises(ImproperlyConfigured):
        logging_settings(monkeypatch, "xml")
