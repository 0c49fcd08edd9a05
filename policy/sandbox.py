"""The sandbox a catalogue's templates run in, with a budget: what one template may cost.

Jinja2's sandbox keeps a template away from Python's internals; it does not keep it from
costing a machine. A template of a few characters can ask for an integer of 370 million
digits (`{{ 9**(9**9) }}`, which Jinja2 would even try to work out while compiling), a text of
ten gigabytes (`{{ 'x' * 9999999999 }}`), or loops in loops over a message's body. So every
template is rendered here, under four bounds:

- every operator that can multiply a value's size (`*`, `**`, `+`, `%`, `~`) and every filter
  or method that can (a width, `replace`, `join`) is checked before it runs: no value grows
  past MAX_VALUE characters (or MAX_INT_BITS bits for a whole number), and nothing is worked
  out while the template is compiled;
- the loops of one render take at most MAX_STEPS turns in all;
- the rendered text is at most MAX_OUTPUT characters, counted while it is written;
- a render takes at most MAX_SECONDS.

A template over a bound, or one that fails in any other way (a recursion, an error of Python
itself), raises TemplateFailed naming the template's place (`effects.open_ticket.http.body`),
so the run it was rendered for is held with that name and nothing is sent.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from jinja2 import TemplateError, UndefinedError, nodes
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import pass_context
from jinja2.visitor import NodeTransformer

MAX_VALUE = 1_000_000  # characters in one text (or items in one list) a template makes
MAX_OUTPUT = 1_000_000  # characters one template writes
MAX_INT_BITS = 4096  # a whole number a template makes (about 1,200 digits)
MAX_STEPS = 100_000  # turns of all the loops of one render
MAX_SECONDS = 5.0  # one render, compiling included

# The operators whose result can be much larger than their operands: they are worked out by
# `call_binop` (checked first), never folded while compiling.
CHECKED_OPERATORS = frozenset({"*", "**", "+", "%", "//"})
# Filters and methods whose named numbers are sizes of what they write.
SIZED = frozenset({"center", "ljust", "rjust", "zfill", "expandtabs", "indent", "wordwrap"})
NUMBERED_FILTERS = SIZED | {"batch", "slice", "truncate", "format"}
# A width or precision written in a format string (`%0999999d`, `{:>999999}`).
FORMAT_NUMBER = re.compile(r"\d+")
# The filter a template's loops go through, and the one its `~` joins go through (the names
# have a space, so no template can write them).
LOOP_FILTER = "gatehouse loop"
CONCAT_FILTER = "gatehouse concat"
VALUE_FILTER = "gatehouse value"  # what a `{% set x %}...{% endset %}` block captured


class TemplateFailed(TemplateError):
    """A template that could not be rendered, with its place: over a bound, or failing in
    any other way. `missing` when it read something the values do not have."""

    def __init__(self, where: str, reason: str, *, missing: bool = False) -> None:
        super().__init__(f"{where}: {reason}" if where else reason)
        self.where = where
        self.reason = reason
        self.missing = missing


class OverBudget(TemplateError):
    """A template that asked for more than its budget allows."""


@dataclass
class Budget:
    """What one render has spent: its loops' turns, against its deadline."""

    deadline: float = field(default_factory=lambda: time.monotonic() + MAX_SECONDS)
    steps: int = 0

    def step(self) -> None:
        self.steps += 1
        if self.steps > MAX_STEPS:
            raise OverBudget(f"the template's loops turn more than {MAX_STEPS:,} times")
        self.in_time()

    def in_time(self) -> None:
        if time.monotonic() > self.deadline:
            raise OverBudget(f"the template takes more than {MAX_SECONDS:g} seconds")


_BUDGET: ContextVar[Budget | None] = ContextVar("gatehouse_template_budget", default=None)


def _spending() -> Budget:
    budget = _BUDGET.get()
    if budget is None:  # a template rendered another way than `render`: refused, not free
        raise OverBudget("the template is rendered without a budget")
    return budget


def _size(value: Any) -> int:
    """How large a value is as its budget counts it: a text's characters, a list's items."""
    return len(value) if isinstance(value, str | list | tuple | dict) else 0


def _within(value: Any, what: str = "the template") -> Any:
    if _size(value) > MAX_VALUE:
        raise OverBudget(f"{what} makes a value longer than {MAX_VALUE:,}")
    return value


def _whole_number(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _bits(value: int) -> int:
    return max(abs(value).bit_length(), 1)


def _check_power(base: Any, exponent: Any) -> None:
    whole = _whole_number(base) and _whole_number(exponent) and abs(base) > 1
    if whole and exponent > 0 and _bits(base) * exponent > MAX_INT_BITS:
        raise OverBudget(f"the template makes a number larger than {MAX_INT_BITS} bits")


def _check_product(left: Any, right: Any) -> None:
    if _whole_number(left) and _whole_number(right):
        if _bits(left) + _bits(right) > MAX_INT_BITS:
            raise OverBudget(f"the template makes a number larger than {MAX_INT_BITS} bits")
        return
    for sequence, times in ((left, right), (right, left)):
        if _whole_number(times) and _size(sequence) * max(times, 0) > MAX_VALUE:
            raise OverBudget(f"the template repeats a value past {MAX_VALUE:,}")


def _check_format(text: Any, arguments: Any) -> None:
    """`'%0999999d' % 1`, `'%*d' % (999999, 1)`, `'{0}{0}{0}'.format(body)`: a width is a size,
    and each place a value is written counts it again."""
    if not isinstance(text, str):
        return
    if any(int(number) > MAX_VALUE for number in FORMAT_NUMBER.findall(text)):
        raise OverBudget(f"the template formats a value wider than {MAX_VALUE:,}")
    given = list(arguments) if isinstance(arguments, tuple | list) else [arguments]
    if isinstance(arguments, Mapping):
        given = list(arguments.values())
    _check_numbers(given, "the template formats")
    places = text.count("%") + text.count("{")
    if len(text) + places * max([_size(value) for value in given] or [0]) > MAX_VALUE:
        raise OverBudget(f"the template formats a text longer than {MAX_VALUE:,}")


def _check_numbers(values: Iterable[Any], what: str) -> None:
    for value in values:
        if _whole_number(value) and abs(value) > MAX_VALUE:
            raise OverBudget(f"{what} with a size larger than {MAX_VALUE:,}")


def _check_replace(text: Any, old: Any, new: Any) -> None:
    if isinstance(text, str) and isinstance(old, str) and isinstance(new, str):
        count = len(text) + 1 if old == "" else text.count(old)
        if len(text) + count * max(len(new) - len(old), 0) > MAX_VALUE:
            raise OverBudget(f"the template replaces into a text longer than {MAX_VALUE:,}")


def _check_join(separator: Any, items: list[Any]) -> None:
    sizes = sum(len(item) if isinstance(item, str) else 20 for item in items)
    if sizes + _size(separator) * max(len(items) - 1, 0) > MAX_VALUE:
        raise OverBudget(f"the template joins a text longer than {MAX_VALUE:,}")


def _guarded_filter(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    """A filter that checks its arguments against the budget first, and its result after."""
    # A filter given the environment, an evaluation context or the template's context
    # (Jinja2's pass_* decorators) has it first, then the value.
    first = 1 if getattr(function, "jinja_pass_arg", None) is not None else 0

    @functools.wraps(function)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        _spending().in_time()
        value, arguments = (args[first] if len(args) > first else None), args[first + 1 :]
        if name in NUMBERED_FILTERS:
            _check_numbers([*arguments, *kwargs.values()], f"the filter {name!r} is given a number")
        if name == "replace" and len(arguments) >= 2:
            _check_replace(str(value), arguments[0], arguments[1])
        if name == "format":
            _check_format(value, kwargs or arguments)
        if name == "join":
            items = list(value or [])
            _check_join(arguments[0] if arguments else kwargs.get("d", ""), items)
            args = (*args[:first], items, *arguments)
        if name == "sum":
            items = list(value or [])
            if sum(map(_size, items)) > MAX_VALUE:
                raise OverBudget(f"the filter 'sum' adds values past {MAX_VALUE:,}")
            args = (*args[:first], items, *arguments)
        if name in ("indent", "wordwrap"):
            # A text given as the indent or the line break is written once a line.
            texts = [a for a in (*arguments, *kwargs.values()) if isinstance(a, str)]
            if _size(value) * max(map(len, texts), default=1) > MAX_VALUE:
                raise OverBudget(f"the filter {name!r} writes a text longer than {MAX_VALUE:,}")
        return _within(function(*args, **kwargs), f"the filter {name!r}")

    return guarded


class BudgetedSandbox(ImmutableSandboxedEnvironment):
    """Jinja2's sandbox (lists and dicts as given, never changed by a template) with every
    operator, filter and method that can make a value large checked against the budget."""

    intercepted_binops = CHECKED_OPERATORS

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.filters = {name: _guarded_filter(name, f) for name, f in self.filters.items()}
        self.filters[LOOP_FILTER] = _counted
        self.filters[CONCAT_FILTER] = _joined
        self.filters[VALUE_FILTER] = _within

    def add_filters(self, filters: Mapping[str, Callable[..., Any]]) -> None:
        """Filters of our own, held to the same checks as Jinja2's."""
        self.filters.update({name: _guarded_filter(name, f) for name, f in filters.items()})

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        _spending().in_time()
        if operator == "**":
            _check_power(left, right)
        elif operator == "*":
            _check_product(left, right)
        elif operator == "%":
            _check_format(left, right)
        elif operator == "+" and _size(left) + _size(right) > MAX_VALUE:
            raise OverBudget(f"the template adds values past {MAX_VALUE:,}")
        return _within(super().call_binop(context, operator, left, right))

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        """`'{:>999999}'.format(x)`: the format string and its values checked first."""
        wrapped = super().wrap_str_format(value)
        if wrapped is None:
            return None
        text = value.__self__
        formatting = wrapped

        def checked(*args: Any, **kwargs: Any) -> str:
            _check_format(text, [*args, *kwargs.values()])
            return formatting(*args, **kwargs)

        return checked

    def call(__self, __context: Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        _spending().in_time()
        name = getattr(__obj, "__name__", "")
        owner = getattr(__obj, "__self__", None)
        if isinstance(owner, str) or name in SIZED or name == "format":
            _check_numbers([*args, *kwargs.values()], f"the template calls {name!r}")
        if isinstance(owner, str) and name == "replace" and len(args) >= 2:
            _check_replace(owner, args[0], args[1])
        if isinstance(owner, str) and name == "join" and args:
            items = list(args[0])
            _check_join(owner, items)
            args = (items, *args[1:])
        if isinstance(owner, str) and name == "translate":
            raise OverBudget("the template translates a text: templates may not")
        return _within(super().call(__context, __obj, *args, **kwargs))


@pass_context
def _counted(context: Context, iterable: Any) -> Iterator[Any]:
    """A loop's values, each turn counted against the render's budget."""
    budget = _spending()
    for item in iterable:
        budget.step()
        yield item


@pass_context
def _joined(context: Context, parts: list[Any]) -> str:
    """`a ~ b ~ c`: checked before it is joined, so `{% set a = a ~ a %}` cannot double
    past the budget."""
    texts = [str(part) for part in parts]
    if sum(map(len, texts)) > MAX_VALUE:
        raise OverBudget(f"the template joins a text longer than {MAX_VALUE:,}")
    return "".join(texts)


def budgeted(tree: nodes.Template, environment: BudgetedSandbox) -> nodes.Template:
    """The template's syntax tree with every loop counted and every `~` and `{% set %}` block
    checked (jinja2.visitor.NodeTransformer: the tree is changed before it is compiled)."""
    changed = _Budgeted().visit(tree)
    changed.set_environment(environment)
    return changed  # type: ignore[no-any-return]  # a Template stays a Template


def _checked(node: nodes.Expr | None, name: str, lineno: int) -> nodes.Filter:
    return nodes.Filter(node, name, [], [], None, None, lineno=lineno)


class _Budgeted(NodeTransformer):
    # generic_visit changes the node's children in place.
    def visit_For(self, node: nodes.For) -> nodes.Node:
        self.generic_visit(node)
        node.iter = _checked(node.iter, LOOP_FILTER, node.lineno)  # type: ignore[arg-type]
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        self.generic_visit(node)
        return _checked(nodes.List(node.nodes, lineno=node.lineno), CONCAT_FILTER, node.lineno)

    def visit_AssignBlock(self, node: nodes.AssignBlock) -> nodes.Node:
        self.generic_visit(node)
        if node.filter is None:  # a filter of its own is checked as every filter is
            node.filter = _checked(None, VALUE_FILTER, node.lineno)
        return node


def render(environment: BudgetedSandbox, text: str, values: Mapping[str, Any], where: str) -> str:
    """The template rendered within its budget. Raises TemplateFailed naming `where`, for
    any failure at all: one template's failure is that template's, never its caller's."""
    budget = Budget()
    token = _BUDGET.set(budget)
    try:
        return _written(environment, text, values, budget)
    except UndefinedError as exc:
        raise TemplateFailed(where, str(exc), missing=True) from exc
    except TemplateError as exc:
        raise TemplateFailed(where, str(exc) or type(exc).__name__) from exc
    except RecursionError as exc:
        raise TemplateFailed(where, "the template calls itself without end") from exc
    except MemoryError as exc:
        raise TemplateFailed(where, "the template needs more memory than there is") from exc
    except Exception as exc:  # any failure is the template's, never the run's
        raise TemplateFailed(where, f"{type(exc).__name__}: {exc}") from exc
    finally:
        _BUDGET.reset(token)


def _written(
    environment: BudgetedSandbox, text: str, values: Mapping[str, Any], budget: Budget
) -> str:
    template = environment.from_string(budgeted(environment.parse(text), environment))
    pieces: list[str] = []
    written = 0
    for piece in template.generate(**values):
        written += len(piece)
        if written > MAX_OUTPUT:
            raise OverBudget(f"the template writes more than {MAX_OUTPUT:,} characters")
        budget.in_time()
        pieces.append(piece)
    return "".join(pieces)
