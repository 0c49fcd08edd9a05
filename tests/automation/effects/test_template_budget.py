"""A catalogue template that the save checks accept but that cannot be rendered (too large, too
slow, failing in Python itself) holds its run with the template named, in the correction
queue, and nothing is sent: it never leaves the run where it was, in no queue."""

from __future__ import annotations

import html
import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from automation.models import Effect, Run, State
from core.codes import Outcome
from tests.catalogues import activate_effects, email_reply_effect, http_effect
from tests.conftest import Pipeline, decision_for, make_event

# Each accepted when stored, each over a budget (or failing) when rendered.
BAD_TEMPLATES = {
    # Worked out while compiling before: over 90 seconds of CPU.
    "power": ("{{ 9**(9**9) }}", "a number larger than 4096 bits"),
    # A MemoryError before (or ten gigabytes).
    "repeat": ("{{ 'x' * 9999999999 }}", "repeats a value past 1,000,000"),
    "loops": (
        "{% for a in run.body %}{% for b in run.body %}{% for c in run.body %}"
        "{{ c }}{% endfor %}{% endfor %}{% endfor %}",
        "loops turn more than 100,000 times",
    ),
    "output": (
        "{% for a in run.body %}{% for b in run.body[:100] %}"
        "{{ run.body }}{% endfor %}{% endfor %}",
        "writes more than 1,000,000 characters",
    ),
    "width": ("{{ run.subject | center(99999999999) }}", "larger than 1,000,000"),
    "python": ("{{ run.subject | length // 0 }}", "ZeroDivisionError"),
}


def follow_up_with(**http: Any) -> None:
    activate_effects({"create_follow_up": http_effect("http://127.0.0.1:9/", **http)})


def held(pipeline: Pipeline) -> Run:
    event = make_event(body="It jams on page two, every time. " * 10)
    return pipeline.run(pipeline.submit(event, [decision_for(event)]))


@pytest.mark.parametrize("case", list(BAD_TEMPLATES))
def test_a_body_template_over_its_budget_holds_the_run_with_the_template_named(
    pipeline: Pipeline, case: str
) -> None:
    template, why = BAD_TEMPLATES[case]
    follow_up_with(body={"ticket": {"subject": template}})

    run = held(pipeline)

    assert (run.state, run.outcome, run.queue) == (
        State.NEEDS_REVIEW,
        Outcome.EXTRACTION_INVALID,
        Outcome.EXTRACTION_INVALID,
    )
    assert run.failure_field == "effects.create_follow_up"
    (problem,) = json.loads(run.failure_detail)
    assert "effects.create_follow_up.http.body.ticket.subject" in problem["message"]
    assert why in problem["message"]
    assert not Effect.objects.exists()


def test_a_reply_template_over_its_budget_holds_the_run_with_the_language_and_part_named(
    pipeline: Pipeline,
) -> None:
    body = "{% for a in run.body %}{% for b in run.body %}{% endfor %}{% endfor %}"
    templates = {"en": {"subject": "Re: {{ run.subject }}", "body": body}}
    activate_effects({"create_follow_up": email_reply_effect(templates)})

    run = held(pipeline)

    assert (run.state, run.queue) == (State.NEEDS_REVIEW, Outcome.EXTRACTION_INVALID)
    (problem,) = json.loads(run.failure_detail)
    assert "effects.create_follow_up.email_reply.templates.en.body: " in problem["message"]
    assert "loops turn more than 100,000 times" in problem["message"]
    assert not Effect.objects.exists()


def test_a_parameter_template_that_fails_holds_the_run_with_the_parameter_named(
    pipeline: Pipeline,
) -> None:
    effect = http_effect(
        "http://127.0.0.1:9/", body={"ticket": {"reference": "{{ params.order }}"}}
    )
    effect["parameters"] = {"order": {"value": "{{ 'x' * 9999999999 }}", "type": "text"}}
    activate_effects({"create_follow_up": effect})

    run = held(pipeline)

    assert (run.state, run.queue) == (State.NEEDS_REVIEW, Outcome.EXTRACTION_INVALID)
    problems = json.loads(run.failure_detail)
    assert problems[0]["field"] == "params.order"
    assert "effects.create_follow_up.parameters.order.value" in problems[0]["message"]
    assert not Effect.objects.exists()


def test_the_run_page_says_which_template_held_the_run(pipeline: Pipeline, ops_lead: User) -> None:
    follow_up_with(body={"ticket": {"subject": "{{ 9**(9**9) }}"}})
    run = held(pipeline)
    client = Client()
    client.force_login(ops_lead)

    page = client.get(reverse("runs:run", args=[run.pk]))

    assert page.status_code == 200
    text = html.unescape(page.content.decode())
    assert "effects.create_follow_up.http.body.ticket.subject" in text
    assert "a number larger than 4096 bits" in text
