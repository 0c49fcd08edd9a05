"""About the run states: any signed-in person reads the diagram and the table of states."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.template.loader import render_to_string
from django.test import Client
from django.urls import reverse

from automation.models import State
from console import statechart, vocabulary
from tests.conftest import Pipeline, decision_for, make_event

URL = "/about/states/"


def test_the_address_is_the_about_page() -> None:
    assert reverse("about:run_states") == URL


@pytest.mark.django_db
def test_a_signed_in_person_without_any_role_reads_every_state(client: Client) -> None:
    client.force_login(User.objects.create_user("nobody"))

    response = client.get(URL)

    assert response.status_code == 200
    html = response.content.decode()
    assert '<svg class="state-diagram" role="img"' in html
    for state in State:
        assert f'data-testid="state-{state.value}"' in html
        assert vocabulary.label("state", state) in html
        assert vocabulary.explain("state", state).replace("'", "&#x27;") in html
    # What can happen next, in words: the decorator's label, or the method's name as words.
    assert "Retry the classifier → Looked up" in html
    assert "Require approval → Waiting for approval" in html
    assert 'aria-current="page">Run states</a>' in html


@pytest.mark.django_db
def test_someone_not_signed_in_is_sent_to_log_in(client: Client) -> None:
    response = client.get(URL)

    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


@pytest.mark.django_db
def test_the_page_only_answers_get(client: Client, outsider: User) -> None:
    client.force_login(outsider)

    assert client.post(URL).status_code == 405


def test_the_include_draws_a_runs_path_for_the_run_page(pipeline: Pipeline) -> None:
    event = make_event(event_id="evt-include")
    run = pipeline.run(pipeline.submit(event, [decision_for(event)]))

    html = render_to_string(
        "includes/state_diagram.html",
        {"diagram": statechart.run_diagram(run), "caption": "The moves of this run."},
    )

    assert html.count("<svg ") == 1
    assert f"The path of run #{run.pk}" in html
    assert 'class="state terminal visited current" data-state="completed"' in html
    assert "The moves of this run." in html
