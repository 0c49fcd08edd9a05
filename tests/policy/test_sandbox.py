"""The templates' budget (policy.sandbox): every way a short template can ask for a huge value,
endless work or a failure of Python itself ends as TemplateFailed naming the template, quickly."""

from __future__ import annotations

import time

import pytest

from policy.catalogue import render_template
from policy.sandbox import TemplateFailed

BODY = "It jams on page two, every time.\n" * 300
VALUES = {"run": {"subject": "Printer jammed", "body": BODY}, "params": {"serial": "SN-1"}}
WHERE = "effects.open_ticket.http.body.ticket.subject"

OVER_BUDGET = {
    "{{ 9**(9**9) }}": "a number larger than 4096 bits",
    "{{ 'x' * 9999999999 }}": "repeats a value past",
    "{{ run.subject | center(99999999999) }}": "is given a number",
    "{{ run.body.ljust(999999999) }}": "calls 'ljust' with a size",
    "{{ '%0999999999d' % 1 }}": "formats a value wider",
    "{{ '{:>999999999}'.format(1) }}": "formats a value wider",
    "{{ run.body | replace('', run.body) }}": "replaces into a text longer",
    "{{ run.body | indent(run.body) }}": "writes a text longer",
    "{{ run.body.split() | join(run.body) }}": "joins a text longer",
    "{% set a = run.body ~ run.body %}{% set a = a ~ a %}{% set a = a ~ a %}{% set a = a ~ a %}"
    "{% set a = a ~ a %}{% set a = a ~ a %}{% set a = a ~ a %}{% set a = a ~ a %}{{ a }}": (
        "joins a text longer"
    ),
    "{% set a %}{{ run.body }}{{ run.body }}{{ run.body }}{{ run.body }}{% endset %}"
    "{% set b %}" + "{{ a }}" * 30 + "{% endset %}{{ b }}": "makes a value longer",
    "{% for a in run.body %}{% for b in run.body %}{% endfor %}{% endfor %}": "loops turn more",
    "{% for a in run.body %}{{ run.body }}{% endfor %}": "writes more than 1,000,000",
    "{% for c in run.subject recursive %}{{ loop(c) }}{% endfor %}": "calls itself without end",
    "{% include 'other.txt' %}": "TypeError",
    "{{ run.subject | length // 0 }}": "ZeroDivisionError",
    "{% set seen = [] %}{{ seen.append(1) }}": "unsafe",
}


@pytest.mark.parametrize("template", list(OVER_BUDGET))
def test_a_template_over_its_budget_fails_quickly_with_its_place_named(template: str) -> None:
    started = time.monotonic()

    with pytest.raises(TemplateFailed) as failed:
        render_template(template, VALUES, where=WHERE)

    assert time.monotonic() - started < 3
    assert failed.value.where == WHERE
    assert str(failed.value).startswith(f"{WHERE}: ")
    assert OVER_BUDGET[template] in str(failed.value)


def test_a_template_within_its_budget_renders_as_before() -> None:
    template = (
        "{{ run.subject | upper }} {{ 2**10 }} {{ '%05d' % 42 }} {{ '{:,}'.format(12345) }} "
        "{% for word in run.subject.split() %}{{ word[:3] }}-{% endfor %}"
        "{% set quoted %}> {{ run.subject }}{% endset %}{{ quoted ~ '!' }} "
        "{{ run.body.splitlines() | length }} {{ params.serial | center(9) }}"
    )

    assert render_template(template, VALUES, where=WHERE) == (
        "PRINTER JAMMED 1024 00042 12,345 Pri-jam-> Printer jammed! 300    SN-1  "
    )


def test_a_name_the_values_lack_is_a_missing_value() -> None:
    with pytest.raises(TemplateFailed) as failed:
        render_template("{{ params.order }}", VALUES, where=WHERE)

    assert failed.value.missing
