"""The run states as a picture: edges read from Run's transitions, every state drawn, and
the path of a real run through the pipeline highlighted."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any, cast

import pytest
from django.contrib.auth.models import User
from django_fsm import GET_STATE, RETURN_VALUE, FSMField, can_proceed

from approvals.models import ApprovalRequest, ApprovalStatus
from approvals.services import approval_decide
from automation.models import NON_TERMINAL_STATES, Run, State
from console import statechart, vocabulary
from tests.conftest import TIMEOUT, Pipeline, decision_for, make_event

NS = {"svg": "http://www.w3.org/2000/svg"}
SECURITY_EVENT = make_event(
    event_id="evt-sec-path",
    request_type="security",
    subject="Account review",
    body="Queue an account review for this customer.",
    account_tier="priority",
    requested_action="queue_account_review",
)
HAPPY = ["received", "validated", "normalized", "enriched", "classified", "executing", "completed"]


def parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)  # noqa: S314 - our own markup


def nodes(svg: str) -> dict[str, ET.Element]:
    root = parse(svg)
    return {g.attrib["data-state"]: g for g in root.iterfind(".//svg:g[@data-state]", NS)}


def classes(element: ET.Element) -> set[str]:
    return set(element.attrib["class"].split())


def label_text(node: ET.Element) -> str:
    text = node.find("svg:text[@class='label']", NS)
    assert text is not None
    return " ".join(t.text or "" for t in text.iterfind("svg:tspan", NS))


# --- the graph is the code ------------------------------------------------------------------


def test_the_edges_are_exactly_the_transitions_django_fsm_registered() -> None:
    field = cast(FSMField, Run._meta.get_field("state"))
    expected = set()
    for t in field.get_all_transitions(Run):
        targets = (
            t.target.allowed_states
            if isinstance(t.target, GET_STATE | RETURN_VALUE)
            else [t.source if t.target is None else t.target]  # None: it stays where it is
        )
        expected |= {(str(t.source), str(target), t.name) for target in targets}

    drawn = {(e.source, e.target, e.transition) for e in statechart.edges()}

    assert drawn == expected
    assert ("classified", "blocked", "block") in drawn
    assert {(s.value, "failed", "fail") for s in NON_TERMINAL_STATES} <= drawn


@pytest.mark.parametrize("state", list(State))
def test_a_run_may_take_exactly_the_moves_drawn_out_of_its_state(state: State) -> None:
    names = {e.transition for e in statechart.edges()}
    run = Run(state=state)

    allowed = {n for n in names if can_proceed(getattr(run, n), check_conditions=False)}

    assert allowed == {e.transition for e in statechart.edges() if e.source == state}


def test_fail_is_drawn_once_from_the_unfinished_states_and_replay_as_staying_put() -> None:
    assert statechart.from_any_unfinished() == {"fail"}
    drawn = statechart.drawn_edges()
    assert ("completed", "completed", "replay") in {
        (e.source, e.target, e.transition) for e in drawn
    }
    assert not [e for e in drawn if e.transition == "replay" and e.source != e.target]
    svg = statechart.svg()
    assert svg.count('data-moves="fail"') == 1
    assert "from any unfinished" in svg


def test_every_state_is_a_node_with_its_human_label_and_its_code_as_secondary_text() -> None:
    drawn = nodes(statechart.svg())

    assert set(drawn) == {s.value for s in State}
    for code, node in drawn.items():
        assert label_text(node) == vocabulary.label("state", code)
        secondary = node.find("svg:text[@class='code']", NS)
        assert secondary is not None and secondary.text == code


def test_a_state_without_a_place_in_the_layout_is_still_drawn(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    layout = {k: v for k, v in statechart.LAYOUT.items() if k != State.BLOCKED}
    monkeypatch.setattr(statechart, "LAYOUT", layout)

    svg = statechart.svg()

    assert "blocked" in nodes(svg)
    assert 'data-moves="block"' in svg
    viewbox = [float(v) for v in parse(svg).attrib["viewBox"].split()]
    rect = nodes(svg)["blocked"].find("svg:rect", NS)
    assert rect is not None
    assert float(rect.attrib["y"]) + float(rect.attrib["height"]) <= viewbox[3]


def test_the_mermaid_text_has_every_state_and_every_drawn_move() -> None:
    text = statechart.mermaid()

    assert text.startswith("stateDiagram-v2\n")
    for state in State:
        assert f'state "{vocabulary.label("state", state)}" as {state.value}' in text
    assert "    unfinished --> failed: Fail" in text
    assert re.search(r"classified --> blocked: \S", text)
    assert "received --> failed" not in text  # fail is written once, from the composite state


# --- one run's path ---------------------------------------------------------------------------


def test_a_straight_through_run_walks_the_middle_row(pipeline: Pipeline) -> None:
    event = make_event(event_id="evt-path-1")
    run = pipeline.run(pipeline.submit(event, [decision_for(event)]))

    path = statechart.run_path(run)

    assert list(path.states) == HAPPY
    assert path.current == State.COMPLETED
    assert [s.transition for s in path.steps] == [
        "validate",
        "normalize",
        "enrich",
        "classify",
        "execute",
        "complete",
    ]


def test_an_approved_run_passes_through_approval(pipeline: Pipeline, approver: User) -> None:
    run = pipeline.run(pipeline.submit(SECURITY_EVENT, [decision_for(SECURITY_EVENT)]))
    request = ApprovalRequest.objects.get(run=run, status=ApprovalStatus.PENDING)
    with pipeline.capture():
        approval_decide(request_id=request.pk, user=approver, approve=True, seen=request.binding())
    pipeline.drain()
    run.refresh_from_db()

    path = statechart.run_path(run)

    assert list(path.states) == [*HAPPY[:5], "approval_required", "approved", *HAPPY[5:]]


def test_a_held_run_shows_its_retries_and_where_it_waits(
    pipeline: Pipeline, django_assert_num_queries: Any
) -> None:
    event = make_event(event_id="evt-path-held")
    run = pipeline.run(pipeline.submit(event, [TIMEOUT, TIMEOUT]))

    with django_assert_num_queries(1):
        path = statechart.run_path(run)

    assert list(path.states) == [*HAPPY[:4], "needs_review"]
    assert path.current == State.NEEDS_REVIEW
    assert ("enriched", "enriched", "schedule_classifier_retry") in {
        (s.source, s.target, s.transition) for s in path.steps
    }
    history = list(run.audit_events.all())
    with django_assert_num_queries(0):
        assert statechart.run_path(run, history) == path


def test_the_run_diagram_highlights_the_visited_states_the_moves_and_where_it_is(
    pipeline: Pipeline,
) -> None:
    event = make_event(event_id="evt-path-svg")
    run = pipeline.run(pipeline.submit(event, [TIMEOUT, TIMEOUT]))

    svg = statechart.run_diagram(run)

    drawn = nodes(svg)
    assert {code for code, n in drawn.items() if "visited" in classes(n)} == {
        *HAPPY[:4],
        "needs_review",
    }
    assert [code for code, n in drawn.items() if "current" in classes(n)] == ["needs_review"]
    assert drawn["needs_review"].attrib["aria-current"] == "step"
    moves = parse(svg).iterfind(".//svg:g[@data-moves]", NS)
    traversed = {g.attrib["data-moves"] for g in moves if "traversed" in classes(g)}
    assert traversed == {"validate", "normalize", "enrich", "schedule_classifier_retry", "hold"}
    title = parse(svg).find("svg:title", NS)
    assert title is not None and title.text == f"The path of run #{run.pk}"
    assert "it is now Needs a person" in svg
