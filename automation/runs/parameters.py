"""An effect's parameters: made from a run's reading by the catalogue's templates, and checked
before anything is written to the outbox.

Each parameter of an effect (policy.catalogue.ParameterSpec) is a template over the reading's
fields, the run and its customer, rendered in the catalogue's sandbox, then held to its type:
an amount with its currency, a date, a reference (to its pattern), an e-mail address, text.
A required parameter that renders empty, or a value of the wrong shape, is a problem named
by the field a person corrects (`fields.<name>`, the one field its template reads), so the
run waits in the correction queue exactly as an extraction problem does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from jinja2 import TemplateError, UndefinedError

from automation.extraction import parse_amount, parse_date
from automation.runs.models import Run
from automation.schemas import FieldProblem
from policy.catalogue import TEMPLATES, Catalogue, FieldType, ParameterSpec, template_names

EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")
MAX_TEXT = 2000


@dataclass(frozen=True)
class Parameters:
    values: dict[str, str]
    problems: list[FieldProblem]


def template_context(run: Run, reading: dict[str, Any]) -> dict[str, Any]:
    """What a parameter's template may read: the reading's field values, the run, and the
    customer enrichment found."""
    event = run.normalized or {}
    customer = (run.enrichment or {}).get("customer") or {}
    fields = {
        name: value.get("value") if isinstance(value, dict) else value
        for name, value in (reading.get("fields") or {}).items()
    }
    return {
        "fields": fields,
        "run": {
            "id": run.pk,
            "event_id": run.event_id,
            "subject": event.get("subject", ""),
            "body": event.get("body", ""),
            "category": reading.get("category", ""),
            "route": reading.get("recommended_route", ""),
            "effect": reading.get("requested_effect", ""),
            "sender": event.get("sender", ""),
            "language": (run.enrichment or {}).get("language", ""),
        },
        "customer": {
            "reference": customer.get("reference", ""),
            "name": customer.get("name", ""),
            "tier": event.get("account_tier") or (run.enrichment or {}).get("account_tier", ""),
        },
    }


def effect_parameters(
    business: Catalogue, effect: str, run: Run, reading: dict[str, Any]
) -> Parameters:
    """The parameters of `effect` for this run's reading, and every problem with them."""
    spec = business.effects.get(effect)
    if spec is None or not spec.parameters:
        return Parameters({}, [])
    context = template_context(run, reading)
    values: dict[str, str] = {}
    problems: list[FieldProblem] = []
    params: dict[str, str] = {}
    declared = business.request_types.get(str(reading.get("category", "")))
    for name, parameter in spec.parameters.items():
        value = _rendered(parameter, {**context, "params": params})
        read = _field_read(parameter)
        # A reference read from a field is held to the field's own pattern too.
        own = declared.fields.get(read) if declared is not None and read else None
        pattern = parameter.pattern or (own.pattern if own is not None else None)
        problem = _problem(parameter, value, spec.label, pattern)
        if problem:
            where = f"fields.{read}" if read else f"params.{name}"
            problems.append(FieldProblem(field=where, message=problem))
        elif value:
            values[name] = params[name] = value
    return Parameters(values, problems)


def _rendered(parameter: ParameterSpec, context: dict[str, Any]) -> str:
    try:
        return TEMPLATES.from_string(parameter.value).render(**context).strip()
    except UndefinedError:
        return ""  # a field the reading does not have: missing
    except TemplateError as exc:
        return f"\x00{exc}"


def _problem(parameter: ParameterSpec, value: str, effect: str, pattern: str | None) -> str:
    if value.startswith("\x00"):
        return f"could not be made for “{effect}”: {value[1:]}"
    if not value:
        return f"is needed for “{effect}” and was not found" if parameter.required else ""
    kind = parameter.type
    try:
        if kind == FieldType.AMOUNT:
            parse_amount(value)
        elif kind == FieldType.DATE:
            parse_date(value)
    except ValueError as exc:
        return f"{exc} (for “{effect}”)"
    if kind == FieldType.REFERENCE and pattern and not re.fullmatch(pattern, value):
        return f"“{value}” does not look like a reference of this kind (for “{effect}”)"
    if kind == FieldType.EMAIL and not EMAIL.fullmatch(value):
        return f"“{value}” is not an e-mail address (for “{effect}”)"
    if len(value) > MAX_TEXT:
        return f"is longer than {MAX_TEXT} characters (for “{effect}”)"
    return ""


def _field_read(parameter: ParameterSpec) -> str | None:
    """The field a person corrects for this parameter: the one its template reads, if it
    reads exactly one (named as extraction names it, `fields.<name>`)."""
    read = {key for root, key in template_names(parameter.value) if root == "fields" and key}
    return read.pop() if len(read) == 1 else None
