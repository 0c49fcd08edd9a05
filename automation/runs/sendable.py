"""The one rule every effect passes before it is written to the outbox.

An effect's parameters must satisfy the catalogue of the run's version: every required one
present, every one valid for its type (automation.runs.parameters). Money fails closed on top
of that: an effect with an `amount` parameter moves money, so an amount it lacks (required or
not) or one whose currency cannot be told is a question for a person, never a guess.

Whatever brought the run here (a classifier's reading, a correction, a confirmation, a resume,
a replay, a decision taken again, a bulk approval, a batch) the pipeline asks this before it
opens an approval and again where it writes the outbox row, so no path can skip it.
"""

from __future__ import annotations

from typing import Any

from automation.extraction import CURRENCIES, parse_amount
from automation.runs.models import Run
from automation.runs.parameters import effect_parameters, field_read
from automation.schemas import FieldProblem
from policy.catalogue import Catalogue, FieldType, ParameterSpec


def effect_problems(
    business: Catalogue, effect: str, run: Run, reading: dict[str, Any]
) -> list[FieldProblem]:
    """Everything that keeps `effect` for this reading out of the outbox; empty: it may go."""
    spec = business.effects.get(effect)
    if spec is None:
        return []
    found = effect_parameters(business, effect, run, reading)
    problems = list(found.problems)
    named = {problem.field for problem in problems}
    for name, parameter in spec.parameters.items():
        if parameter.type != FieldType.AMOUNT:
            continue
        problem = _money_problem(found.values.get(name), spec.label)
        where = _where(name, parameter)
        if problem and where not in named:
            problems.append(FieldProblem(field=where, message=problem))
            named.add(where)
    return problems


def _money_problem(value: Any, effect: str) -> str:
    """An amount the effect cannot be trusted with: none, no currency, an unknown one."""
    if value in (None, ""):
        return f"is needed for “{effect}”: it moves money, and no amount was found"
    if isinstance(value, dict):  # a typed amount: {"value": "12.50", "currency": "EUR"}
        currency = value.get("currency")
    else:
        try:
            _, currency = parse_amount(str(value))
        except ValueError as exc:
            return f"{exc} (for “{effect}”)"
    if not currency:
        return f"names no currency: a person says which one (for “{effect}”)"
    if currency not in CURRENCIES:
        return f"names {currency}, which is not a currency this policy knows (for “{effect}”)"
    return ""


def _where(name: str, parameter: ParameterSpec) -> str:
    """The field a person corrects for this parameter, as the parameter checks name it."""
    read = field_read(parameter)
    return f"fields.{read}" if read else f"params.{name}"
