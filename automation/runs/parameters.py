"""An effect's parameters: made from a run's reading by the catalogue's templates, and checked
before anything is written to the outbox.

Each parameter of an effect (policy.catalogue.ParameterSpec) is a template over the reading's
fields, the run and its customer, rendered in the catalogue's sandbox, then held to its type:
an amount with its currency, a date, a reference (to its pattern), an e-mail address, text.
The values are typed: an amount is {"value": "2340.00", "currency": "GBP"} (the decimal as a
string, so JSON keeps it exact, and the ISO 4217 code), a date its ISO form "2026-12-03",
read in the run's language; the rest are strings.
A required parameter that renders empty, or a value of the wrong shape, is a problem named
by the field a person corrects (`fields.<name>`, the one field its template reads), so the
run waits in the correction queue exactly as an extraction problem does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, cast

from jinja2 import TemplateError

from automation.extraction import CURRENCIES, in_minor_units, parse_amount, parse_date
from automation.runs.models import Run
from automation.schemas import FieldProblem
from policy.catalogue import (
    LOCALE,
    Catalogue,
    FieldType,
    Money,
    ParameterSpec,
    render_template,
    template_names,
)
from policy.sandbox import TemplateFailed

EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")
MAX_TEXT = 2000


@dataclass(frozen=True)
class Parameters:
    """The values an effect is given (typed, JSON-ready) and every problem with them."""

    values: dict[str, Any]
    problems: list[FieldProblem]


def template_context(run: Run, reading: dict[str, Any], business: Catalogue) -> dict[str, Any]:
    """What a parameter's template may read: the reading's field values, the run, and the
    customer enrichment found."""
    fields = {
        name: value.get("value") if isinstance(value, dict) else value
        for name, value in (reading.get("fields") or {}).items()
    }
    return {
        "fields": fields,
        "run": run_context(run, reading),
        "customer": customer_context(run, business),
    }


def run_context(run: Run, reading: dict[str, Any]) -> dict[str, Any]:
    """What a template knows of the run (policy.catalogue.RUN_KEYS)."""
    event = run.normalized or {}
    return {
        "id": run.pk,
        "event_id": run.event_id,
        "subject": event.get("subject", ""),
        "body": event.get("body", ""),
        "category": reading.get("category", ""),
        "route": reading.get("recommended_route", ""),
        "effect": reading.get("requested_effect", ""),
        "sender": event.get("sender", ""),
        "language": (run.enrichment or {}).get("language", ""),
    }


def customer_context(run: Run, business: Catalogue) -> dict[str, Any]:
    """What a template knows of the customer: the match's reference and name, and each
    customer attribute of the catalogue (empty when unknown)."""
    enrichment = run.enrichment or {}
    customer = enrichment.get("customer") or {}
    event = run.normalized or {}
    known = {
        "reference": customer.get("reference", ""),
        "name": customer.get("name", ""),
        "email_domains": customer.get("email_domains", []),
    }
    for name in business.customer_attributes:
        known[name] = event.get(f"account_{name}") or enrichment.get(f"account_{name}") or ""
    return known


def effect_parameters(
    business: Catalogue, effect: str, run: Run, reading: dict[str, Any]
) -> Parameters:
    """The parameters of `effect` for this run's reading, and every problem with them."""
    spec = business.effects.get(effect)
    if spec is None or (not spec.parameters and spec.adapter == "record"):
        return Parameters({}, [])
    context = template_context(run, reading, business)
    language = str(context["run"]["language"]) or None
    values: dict[str, Any] = {}
    problems: list[FieldProblem] = []
    declared = business.request_types.get(str(reading.get("category", "")))
    for name, parameter in spec.parameters.items():
        where = f"effects.{effect}.parameters.{name}.value"
        value = _rendered(parameter, {**context, "params": template_params(values)}, where)
        read = field_read(parameter)
        # A reference read from a field is held to the field's own pattern too.
        own = declared.fields.get(read) if declared is not None and read else None
        pattern = parameter.pattern or (own.pattern if own is not None else None)
        problem = _problem(parameter, value, spec.label, pattern)
        typed: Any = None
        if not problem and value:
            typed, problem = _typed(parameter.type, value, spec.label, language)
        if problem:
            where = f"fields.{read}" if read else f"params.{name}"
            problems.append(FieldProblem(field=where, message=problem))
        elif value:
            values[name] = typed
    return Parameters(values, problems + _request_problems(business, effect, run, reading, values))


def _typed(kind: FieldType, value: str, effect: str, language: str | None) -> tuple[Any, str]:
    """(the value as the effect gets it, a problem): an amount as its decimal and ISO code, a
    date in ISO form, anything else as the text rendered."""
    try:
        if kind == FieldType.AMOUNT:
            number, currency = parse_amount(value, language=language)
            if currency is None or currency not in CURRENCIES:
                return None, f"names no ISO 4217 currency (for “{effect}”)"
            return {"value": str(in_minor_units(number, currency)), "currency": currency}, ""
        if kind == FieldType.DATE:
            return parse_date(value, language=language).isoformat(), ""
    except ValueError as exc:
        return None, f"{exc} (for “{effect}”)"
    return value, ""


def template_params(values: dict[str, Any]) -> dict[str, Any]:
    """Typed values as a template reads them: an amount is `params.amount.value` and
    `params.amount.currency`, and prints as "2340.00 GBP"; a date prints in ISO form."""
    return {
        name: Money(cast(dict[str, str], value)) if isinstance(value, dict) else value
        for name, value in values.items()
    }


def _request_problems(
    business: Catalogue, effect: str, run: Run, reading: dict[str, Any], values: dict[str, Any]
) -> list[FieldProblem]:
    """A request the effect's templates cannot be rendered for (a value they cannot use, or
    a template over its budget), the template named."""
    try:
        effect_request(business, effect, run, reading, values)
    except TemplateError as exc:
        return [unwritten(effect, exc)]
    return []


def unwritten(effect: str, exc: TemplateError) -> FieldProblem:
    """The problem of an effect whose request a template could not write (TemplateFailed
    names the template)."""
    return FieldProblem(field=f"effects.{effect}", message=f"could not be written: {exc}")


def effect_request(
    business: Catalogue,
    effect: str,
    run: Run,
    reading: dict[str, Any],
    params: dict[str, Any],
) -> dict[str, Any] | None:
    """What an `http` or `email_reply` effect sends, rendered from the run when the effect is
    written, so every attempt sends the same and the run shows what went out. Secrets are not
    in it: a header that names one is filled in when the request is made. Raises
    TemplateFailed, naming the template that failed (`effects.<effect>.http.body...`).

    Templates get the typed values (`params`): a date is ISO unless a filter writes it
    otherwise (`| date` in the reply's language), an amount `params.amount.value` and
    `params.amount.currency`, or `| money`."""
    spec = business.effects.get(effect)
    if spec is None or (spec.http is None and spec.email_reply is None):
        return None
    typed = template_params(params)
    context = {
        "params": {name: typed.get(name, "") for name in spec.parameters},
        "run": run_context(run, reading),
        "customer": customer_context(run, business),
    }
    where = f"effects.{effect}"
    if spec.http is not None:
        request: dict[str, Any] = {"method": spec.http.method, "url": spec.http.url}
        if spec.http.body is not None:
            request["body"] = _structure(spec.http.body, context, f"{where}.http.body")
        return request
    config = spec.email_reply
    if config is None:
        return None
    language = context["run"]["language"]
    if language not in config.templates:
        language = config.default_language
    message = config.templates[language]
    # The filters write dates and money in the reply's language unless told another.
    reply = {**context, LOCALE: language}
    event = run.normalized or {}
    thread = [str(item) for item in event.get("thread") or []]
    # The message answered: its Message-ID, which a mail's event id is unless it had none.
    mail = bool(event.get("sender"))
    answered = run.event_id if mail and not run.event_id.startswith("sha256:") else ""
    where = f"{where}.email_reply.templates.{language}"
    return {
        "to": str(event.get("sender") or ""),
        # The effect's own addresses, else the channel's; none: the server's at sending.
        "from": config.from_address or run.channel.reply_from,
        "reply_to": config.reply_to or run.channel.reply_to,
        "language": language,
        "subject": _text(message.subject, reply, f"{where}.subject").replace("\n", " ").strip(),
        "body": _text(message.body, reply, f"{where}.body"),
        "in_reply_to": answered,
        "references": [*thread, *([answered] if answered else [])],
    }


def _text(template: str, context: dict[str, Any], where: str) -> str:
    return render_template(template, context, where=where)


def _structure(value: Any, context: dict[str, Any], where: str) -> Any:
    """A body structure with each string rendered: values never change its shape."""
    if isinstance(value, str):
        return _text(value, context, where)
    if isinstance(value, dict):
        return {key: _structure(item, context, f"{where}.{key}") for key, item in value.items()}
    if isinstance(value, list):
        return [_structure(item, context, f"{where}.{i}") for i, item in enumerate(value)]
    return value


def _rendered(parameter: ParameterSpec, context: dict[str, Any], where: str) -> str:
    try:
        return render_template(parameter.value, context, where=where).strip()
    except TemplateFailed as exc:
        return "" if exc.missing else f"\x00{exc}"  # missing: a field the reading lacks


def _problem(parameter: ParameterSpec, value: str, effect: str, pattern: str | None) -> str:
    if value.startswith("\x00"):
        return f"could not be made for “{effect}”: {value[1:]}"
    if not value:
        return f"is needed for “{effect}” and was not found" if parameter.required else ""
    kind = parameter.type
    if kind == FieldType.REFERENCE and pattern and not re.fullmatch(pattern, value):
        return f"“{value}” does not look like a reference of this kind (for “{effect}”)"
    if kind == FieldType.EMAIL and not EMAIL.fullmatch(value):
        return f"“{value}” is not an e-mail address (for “{effect}”)"
    if len(value) > MAX_TEXT:
        return f"is longer than {MAX_TEXT} characters (for “{effect}”)"
    return ""


def field_read(parameter: ParameterSpec) -> str | None:
    """The field a person corrects for this parameter: the one its template reads, if it
    reads exactly one (named as extraction names it, `fields.<name>`)."""
    read = {key for root, key in template_names(parameter.value) if root == "fields" and key}
    return read.pop() if len(read) == 1 else None
