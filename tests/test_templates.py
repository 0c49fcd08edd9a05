"""The project's own templates: found in templates/ before any app's, and a 500 page that
renders when nothing else can.

Django's handler500 renders 500.html with no context at all: no request, no context
processor, no user. Whatever failed (the database, a template tag, the URLconf) must not
fail the error page too, so 500.html is plain HTML.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from django.apps import apps
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.template.loader import get_template
from django.test import Client
from django.urls import path

TOP = Path(settings.BASE_DIR) / "templates"
PROJECT_TEMPLATES = ["base.html", "403.html", "404.html", "500.html", "registration/login.html"]


def broken(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("the page failed")


urlpatterns = [path("broken", broken)]


def test_the_top_level_folder_is_the_first_place_templates_are_looked_for() -> None:
    assert settings.TEMPLATES[0]["DIRS"] == [TOP]


@pytest.mark.parametrize("name", PROJECT_TEMPLATES)
def test_the_project_templates_are_found_in_the_top_level_folder(name: str) -> None:
    assert get_template(name).origin.name == str(TOP / name)


@pytest.mark.parametrize("name", PROJECT_TEMPLATES)
def test_no_app_has_a_template_of_the_same_name(name: str) -> None:
    """One copy of each: an app's copy would be dead code, and confuse whoever edits it."""
    copies = [
        config.label
        for config in apps.get_app_configs()
        if Path(config.path, "templates", name).exists()
        and Path(config.path).is_relative_to(settings.BASE_DIR)
    ]
    assert copies == []


def test_the_admin_overrides_are_the_projects_and_found_at_the_top_level() -> None:
    overrides = sorted(p.relative_to(TOP).as_posix() for p in (TOP / "admin").rglob("*.html"))
    assert "admin/automation/run/change_list.html" in overrides
    for name in overrides:
        assert get_template(name).origin.name == str(TOP / name)
    app_copies = [
        config.label
        for config in apps.get_app_configs()
        if Path(config.path, "templates", "admin").exists()
        and Path(config.path).parent == Path(settings.BASE_DIR)  # the project's apps only
    ]
    assert app_copies == []


def test_the_500_page_is_plain_html_that_needs_no_context() -> None:
    source = (TOP / "500.html").read_text()
    assert "{%" not in source and "{{" not in source  # no tag, no variable, no extends

    html = get_template("500.html").render()

    assert "<h1>Something went wrong on our side</h1>" in html
    assert 'href="/"' in html


@pytest.mark.urls(__name__)
def test_a_view_that_raises_answers_the_500_page_without_the_database() -> None:
    """No database access is allowed here (no django_db mark): the page must not need one."""
    response = Client(raise_request_exception=False).get("/broken")

    assert response.status_code == 500
    html = response.content.decode()
    assert "Something went wrong on our side" in html
    assert "the page failed" not in html  # the exception stays in the logs
    assert [t.name for t in response.templates] == ["500.html"]
