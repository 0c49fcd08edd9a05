"""The business form: a version's catalogue (request types, routes, effects) and the policy
rules that name it (where each request type goes, which effects policy allows and who
approves them), edited in fields instead of YAML.

Like the policy form (console/forms/policy.py), it starts from a base version's document,
applies the fields to a copy and lets the schema judge the whole document. A base without a
catalogue of its own starts from the reference catalogue's data, so the new version carries
its catalogue. What the schema (and the store's check that owning groups exist) refuses is
shown at the field it is about, in plain words.

Fields and cue words are written one per line, in the formats the page explains
(`field_line`, `cue_line`); an effect's adapter settings and parameters as small YAML texts.
A text left as it was shown keeps the base's value exactly, so an untouched form changes
nothing.

A form starts from a stored version, a shipped starter or nothing (`Start`), and shows as
many blocks that add a request type, route, effect, customer attribute or risk signal as it
is asked for (`shown`): the page's "Add another" buttons show it again with one more, what
was typed kept (`typed_initial`). Removing a route, an effect or an attribute that a rule
still names is refused at its "Remove" box, with the rule named.

The edits themselves, and what they refuse, are policy's (policy/editing.py: pure functions
over the document); this form reads the fields, calls them and says their refusals at the
field they are about.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import yaml
from django import forms
from django.contrib.auth.models import Group
from django.forms import BoundField
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from automation.conf import setting
from console.forms.policy import (
    SIGNAL_ACTIONS,
    NewVersionForm,
    Path,
    deciding_groups,
    document_problems,
    group_choices,
    place_in_words,
    plain_problem,
    problem_path,
    sentence,
)
from console.forms.text import FreeTextField
from console.vocabulary import humanize
from core.inputs import NumberField, parse_number
from policy import editing
from policy.catalogue import MAX_CUE_WEIGHT, MAX_REFERENCE_PATTERN, EffectSpec, FieldSpec
from policy.editing import Described, Document, Part, Use
from policy.models import PolicyVersion
from policy.schemas import NEW_VERSION, PolicyDocument
from policy.services import PolicyError, load_policy_yaml

# The route select's choice for the route added in the first block that adds one (no
# catalogue name has a +); the block n adds "+new<n>".
NEW_ROUTE = "+new"
NEW_EFFECT = "+new"  # the same, in the usual effect's select
# What the "Add another" buttons add, in the order of the page: the blocks each kind shows.
ADDABLE = ("type", "route", "effect", "attribute", "signal")
MAX_SHOWN = 30  # add blocks of one kind on one page
ADAPTERS = [
    ("", "(choose how it is done)"),
    ("record", "Record: a task row kept in Gatehouse, for a group to work"),
    ("http", "HTTP: a request to another system"),
    ("email_reply", "E-mail reply: an answer to the sender, in the same thread"),
]
ADAPTER_NAMES = [code for code, _ in ADAPTERS if code]
# Each part's add blocks (their prefix new_<kind>) and what the page calls one.
KINDS = {
    Part.REQUEST_TYPE: ("type", "request type"),
    Part.ROUTE: ("route", "route"),
    Part.EFFECT: ("effect", "effect"),
    Part.CUSTOMER_ATTRIBUTE: ("attribute", "customer attribute"),
    Part.SIGNAL: ("signal", "risk signal"),
}
LINES_LIMIT = 20_000
SETTINGS_LIMIT = 50_000
NAME_HELP = "Lower-case letters, digits and underscores, starting with a letter."

FIELDS_HELP = (
    "One field a line: its name, a colon, its type (amount, date, reference, email or text), "
    "then, separated by commas, required, label and its words (without commas), and last, "
    "for a reference, pattern and the expression it matches in full. For example "
    "“serial_number: reference, required, label Serial number, pattern SN-[0-9]{6}”. "
    "A field's longer description is kept; change it in the YAML."
)
# Beside each box: the formats are explained once, above the request types.
FIELDS_BOX_HELP = "One field a line: name: type, required, label …, pattern … (see above)."
CUES_BOX_HELP = "One language a line: en: word, other words."
CUES_HELP = (
    "One language a line: its two-letter code, a colon, then the words separated by commas, "
    "for example “en: warranty, broken, stopped working”."
)
SCENE_CUES_BOX_HELP = (
    "Words that only set the scene (each counts one, whatever the weight), as the cue words: "
    "one language a line."
)
WEIGHT_HELP = (
    f"1 to {MAX_CUE_WEIGHT}: how much each cue word counts. Give more to a type whose miss "
    "costs more. Empty: 1."
)
ALWAYS_HELP = "An e-mail of this type gets its usual effect whatever else its words ask."
EFFECT_CUES_HELP = "Words of a request that ask for this effect: one language a line."
PRIORITY_HELP = (
    "0 to 100: when a request's words ask for two effects equally, the higher wins. Empty: 0."
)
VALUES_HELP = (
    "Its values, separated by commas, each in lower-case letters, digits and underscores. "
    "For the tier, the first is the tier of a sender who is no known customer."
)
PHRASES_BOX_HELP = (
    "One language a line: its two-letter code, a colon, then the phrases separated by commas "
    "(en: chargeback, legal action). A message containing any of them matches."
)
PATTERNS_HELP = "Regular expressions a message is searched for, one a line (optional)."
SETTINGS_HELP = (
    "In YAML, the adapter's settings. HTTP: method, url, headers (a credential as "
    "{secret: VARIABLE_NAME}, never the value), body (its texts are templates). E-mail "
    "reply: templates per language (subject, body), default_language and, if the "
    "channel's or the server's address is not the one, from_address and reply_to. Record: "
    "group (optional)."
)
PARAMETERS_HELP = (
    "In YAML, each parameter's name with its value (a template reading fields.<name>, run "
    "or customer), type, required and, for a reference, pattern. For example "
    "“serial: {value: '{{ fields.serial_number }}', type: reference}”."
)

# The document's own checks of the rules against the catalogue (policy.schemas), which name
# the whole document: each is shown at the field of the request type or effect it names.
ROUTED_NOWHERE = re.compile(r"^routes leave out the request type (.+), so it goes nowhere$")
APPROVED_NOT_ALLOWED = re.compile(r"^approvals name effects that are not allowed: (.+)$")
UNKNOWN_TIERS = re.compile(r"^amount_limits name (.+), which is no account tier of the catalogue$")
# A type's own checks, which name the type only: the part of it each is about, in words.
TYPE_CHECKS = (
    (
        re.compile(r"^(.+): listed as a cue and as a scene cue; keep each word in one$"),
        "scene_cues",
        "{0}: listed as a cue word and as a scene cue; keep each word in one",
    ),
    (
        re.compile(r"^default_effect_always needs a default_effect$"),
        "default_effect_always",
        "choose the usual effect it always gets, or leave this off",
    ),
)
# What a block left out, said as what to do.
MISSING = {
    "adapter": "choose how the effect is done: a record, an HTTP request or an e-mail reply",
    "group": "choose the group of people who own the work",
}
# A field line's pattern: the rest of the line after ", pattern ".
PATTERN_PART = re.compile(r",\s*pattern\s+")
# A check that names its place in the text ("effects.open_ticket.http.body.subject: ...").
PLACED = re.compile(r"^([A-Za-z0-9_][\w.-]*\.[\w.-]*): (.+)$", re.DOTALL)


class LineProblem(ValueError):
    """A line of a field or cue list that cannot be read."""

    def __init__(self, number: int, message: str) -> None:
        super().__init__(f"line {number}: {message}")


def _lines(text: str) -> list[tuple[int, str]]:
    return [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1) if line.strip()]


def _same_text(text: str, shown: str) -> bool:
    return [line for _, line in _lines(text)] == [line for _, line in _lines(shown)]


def field_line(name: str, spec: FieldSpec) -> str:
    """A field as one line of the fields box: `serial_number: reference, required, ...`."""
    parts = [spec.type.value, *(["required"] if spec.required else [])]
    parts += [f"label {spec.label}"] if spec.label else []
    parts += [f"pattern {spec.pattern}"] if spec.pattern else []
    return f"{name}: {', '.join(parts)}"


def read_field_lines(text: str, was: dict[str, Any]) -> dict[str, Any]:
    """The fields box as the catalogue's fields; a field already there keeps its
    description. Raises LineProblem."""
    fields: dict[str, Any] = {}
    for number, line in _lines(text):
        name, colon, rest = line.partition(":")
        if not colon or not name.strip():
            raise LineProblem(number, "write each field as its name, a colon and its type")
        name = name.strip()
        if name in fields:
            raise LineProblem(number, f"the field {name} is listed twice")
        # The pattern comes last and is the rest of the line: it may hold commas.
        found = PATTERN_PART.search(rest)
        said, pattern = (rest[: found.start()], rest[found.end() :]) if found else (rest, "")
        fields[name] = _field(number, said, pattern.strip(), was.get(name) or {})
    return fields


def _field(number: int, rest: str, pattern: str, was: dict[str, Any]) -> dict[str, Any]:
    kind, *said = [part.strip() for part in rest.split(",")]
    if not kind:
        raise LineProblem(number, "give the field's type: amount, date, reference, email or text")
    field: dict[str, Any] = {"type": kind, "description": was.get("description", "")}
    for part in said:
        if part in ("required", "optional"):
            field["required"] = part == "required"
        elif part.startswith("label "):
            field["label"] = part.removeprefix("label ").strip()
        else:
            raise LineProblem(
                number,
                f"“{part[:60]}” is not something a field says: after its type write "
                "required, label and its words, or pattern and its expression",
            )
    if pattern:
        field["pattern"] = pattern
    return field


def cue_line(language: str, words: list[str]) -> str:
    return f"{language}: {', '.join(words)}"


def read_cue_lines(text: str) -> dict[str, list[str]]:
    """The cues box as words per language. Raises LineProblem."""
    cues: dict[str, list[str]] = {}
    for number, line in _lines(text):
        language, colon, rest = line.partition(":")
        if not colon or not language.strip():
            raise LineProblem(number, "write each language as its code, a colon and the words")
        if language.strip() in cues:
            raise LineProblem(number, f"the language {language.strip()} is listed twice")
        words = [word.strip() for word in rest.split(",") if word.strip()]
        if words:
            cues[language.strip()] = words
    return cues


def settings_text(value: Any) -> str:
    """An adapter's settings or an effect's parameters as the YAML its box shows."""
    if not value:
        return ""
    return yaml.safe_dump(value, sort_keys=False, allow_unicode=True, width=100)


def read_yaml_mapping(text: str) -> dict[str, Any] | None:
    """A small YAML box as a mapping (None when blank), held to the policy document's
    limits. Raises ValueError with the problem in words."""
    if not text.strip():
        return None
    try:
        found = load_policy_yaml(text)
    except PolicyError as exc:
        raise ValueError(document_problems(exc)[0].message) from exc
    if found is None:
        return None
    if not isinstance(found, dict):
        raise ValueError("write the settings as lines of name: value")
    return found


def effect_settings(effect: EffectSpec) -> dict[str, Any] | None:
    config = getattr(effect, effect.adapter)
    return None if config is None else config.model_dump(mode="json", exclude_defaults=True)


def effect_parameters(effect: EffectSpec) -> dict[str, Any]:
    return {
        name: parameter.model_dump(mode="json", exclude_defaults=True) | {"value": parameter.value}
        for name, parameter in effect.parameters.items()
    }


@dataclass(frozen=True)
class Start:
    """What a form starts from: a stored version, a shipped starter (its key) or nothing."""

    document: PolicyDocument
    version: PolicyVersion | None = None
    starter: str = ""


def add_prefix(kind: str, number: int) -> str:
    """The prefix of the block that adds the `number`th one of a kind (new_type, new_type2)."""
    return f"new_{kind}" if number == 1 else f"new_{kind}{number}"


def add_choice(number: int) -> str:
    """A select's choice for the route or effect added in block `number`."""
    return NEW_ROUTE if number == 1 else f"{NEW_ROUTE}{number}"


def shown_counts(data: Any) -> dict[str, int]:
    """How many add blocks of each kind the page showed (its hidden `shown-<kind>`), one at
    least and at most MAX_SHOWN."""
    counts = {}
    for kind in ADDABLE:
        number = parse_number(str(data.get(f"shown-{kind}", "") if data else ""))
        counts[kind] = min(max(int(number or 1), 1), MAX_SHOWN)
    return counts


def typed_initial(form: forms.Form) -> dict[str, Any]:
    """What was typed into a bound form, as the initial values of the same form shown again
    (a box left unticked stays unticked)."""
    return {bound.name: bound.data for bound in form}


def _words_line(text: str) -> list[str]:
    return [word.strip() for word in text.split(",") if word.strip()]


@dataclass(frozen=True)
class Block:
    """One request type, route, effect, attribute or signal on the page (or a block that
    adds one)."""

    code: str  # "" in a block that adds one
    title: str
    testid: str
    short: list[BoundField]  # side by side
    long: list[BoundField]  # one under the other

    @property
    def has_errors(self) -> bool:
        return any(field.errors for field in [*self.short, *self.long])


class BusinessForm(NewVersionForm):
    """The business of the start's document, and the rules that name it (see document())."""

    def __init__(
        self, *args: Any, base: Start, shown: dict[str, int] | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.start = base
        self.shown = shown or dict.fromkeys(ADDABLE, 1)
        self.base_document = base.document
        self.business = self.base_document.business
        self.fields["base"].required = False
        self.fields["base"].initial = base.version.name if base.version else ""
        self.fields["start"] = forms.CharField(
            widget=forms.HiddenInput, required=False, initial=base.starter
        )
        self.places: dict[Path, str] = {("version",): "version", ("note",): "note"}
        self.field_places = {
            name: f"The new version > {self.fields[name].label}" for name in ("version", "note")
        }
        self.approvers = deciding_groups()
        self.owners = set(Group.objects.values_list("name", flat=True))
        self.route_blocks = [self._route_block(name, "") for name in self.business.routes]
        self.new_routes = [self._route_block("", p) for p in self._add_prefixes("route")]
        self.type_blocks = [self._type_block(name, "") for name in self.business.request_types]
        self.new_types = [self._type_block("", p) for p in self._add_prefixes("type")]
        self.effect_blocks = [self._effect_block(name, "") for name in self.business.effects]
        self.new_effects = [self._effect_block("", p) for p in self._add_prefixes("effect")]
        attributes = self.business.customer_attributes
        self.attribute_blocks = [self._attribute_block(name, "") for name in attributes]
        self.new_attributes = [
            self._attribute_block("", p) for p in self._add_prefixes("attribute")
        ]
        self.signal_blocks = [self._signal_block(name, "") for name in self.base_document.signals]
        self.new_signals = [self._signal_block("", p) for p in self._add_prefixes("signal")]
        self.matching = self._matching_fields()

    def _add_prefixes(self, kind: str) -> list[str]:
        return [add_prefix(kind, n) for n in range(1, self.shown[kind] + 1)]

    # --- fields, built from the base document ---

    def _add(self, name: str, field: forms.Field, place: str) -> BoundField:
        self.fields[name] = field
        self.field_places[name] = f"{place} > {field.label}"
        return self[name]

    def _typed(self, name: str) -> str:
        """What was typed into field `name` (on this page, or the one shown before it)."""
        source = self.data if self.is_bound else self.initial
        return str(source.get(name) or "").strip()

    def _text(
        self, label: str, initial: str, help_text: str, limit: int = LINES_LIMIT
    ) -> forms.CharField:
        return forms.CharField(
            label=label,
            required=False,
            max_length=limit,
            strip=False,
            initial=initial,
            help_text=help_text,
            widget=forms.Textarea(attrs={"rows": 4, "spellcheck": "false", "class": "code"}),
        )

    def _number(
        self, label: str, initial: int | None, bounds: tuple[int, int], help_text: str
    ) -> forms.Field:
        return NumberField(
            label=label,
            required=False,
            min_value=bounds[0],
            max_value=bounds[1],
            initial=initial,
            help_text=help_text,
        )

    def _name(self, prefix: str, title: str, example: str) -> BoundField | None:
        """The name input of a block that adds one (a name, once stored, is kept)."""
        if not prefix.startswith("new_"):
            return None
        field = forms.CharField(
            label="Name", required=False, max_length=60, help_text=f"{NAME_HELP} {example}"
        )
        return self._add(f"{prefix}-name", field, title)

    def _remove(self, prefix: str, title: str, what: str, help_text: str) -> BoundField:
        box = forms.BooleanField(label=f"Remove this {what}", required=False, help_text=help_text)
        return self._add(f"{prefix}-remove", box, title)

    def _words(
        self, prefix: str, title: str, shown: tuple[str, str], help_text: str
    ) -> tuple[BoundField, BoundField]:
        label = forms.CharField(
            label="Label", required=False, max_length=100, initial=shown[0], help_text=help_text
        )
        description = FreeTextField(
            label="Description",
            required=False,
            initial=shown[1],
            widget=forms.Textarea(attrs={"rows": 2}),
        )
        return (
            self._add(f"{prefix}-label", label, title),
            self._add(f"{prefix}-description", description, title),
        )

    def _places(self, where: Path, prefix: str, parts: dict[str, str]) -> None:
        """The fields that show the problems of `where` and of its parts ("" for itself)."""
        for part, field in parts.items():
            self.places[(*where, part) if part else where] = f"{prefix}-{field}"

    def _owner_choices(self, current: str) -> list[tuple[str, str]]:
        choices = [("", "(choose a group)")] + [(name, name) for name in sorted(self.owners)]
        if current and current not in self.owners:
            choices.append((current, f"{current} (no such group)"))
        return choices

    def _added_choices(self, kind: str, what: str) -> list[tuple[str, str]]:
        """The choices for the ones added in this form's blocks, by what was typed in them."""
        count = self.shown[kind]
        choices = []
        for number in range(1, count + 1):
            prefix = add_prefix(kind, number)
            typed = self._typed(f"{prefix}-label") or self._typed(f"{prefix}-name")
            if typed:
                words = f"{typed} (the new {what}, added below)"
            elif count == 1:
                words = f"The new {what}, added below"
            else:
                words = f"New {what} {number}, added below"
            choices.append((add_choice(number), words))
        return choices

    def _route_choices(self, current: str) -> list[tuple[str, str]]:
        routes = self.business.routes
        choices = [("", "(choose where it goes)")]
        choices += [(name, spec.label) for name, spec in routes.items()]
        if current and current not in routes:
            choices.append((current, f"{humanize(current)} (no route of the catalogue)"))
        return [*choices, *self._added_choices("route", "route")]

    def _head(
        self,
        kind: str,
        code: str,
        prefix: str,
        spec: Any,
        words: tuple[str, str, str],
    ) -> tuple[str, str, BoundField | None, BoundField, BoundField]:
        """A block's prefix, title, name (a new one only), label and description fields;
        `words` are the title of a new one, the example name and the label's help."""
        if spec:
            prefix, title = f"{kind}-{code}", spec.label
        else:
            number = prefix.removeprefix(f"new_{kind}")
            title = f"{words[0]} {number}" if number else words[0]
        name = self._name(prefix, title, words[1])
        shown = (spec.label, spec.description) if spec else ("", "")
        label, description = self._words(prefix, title, shown, words[2])
        return prefix, title, name, label, description

    @staticmethod
    def _testid(kind: str, code: str, prefix: str) -> str:
        if code:
            return f"{kind}-{code}"
        number = prefix.removeprefix(f"new_{kind}")
        return f"add-{kind}-{number}" if number else f"add-{kind}"

    def _effect_choices(self, current: str) -> list[tuple[str, str]]:
        choices = [("", "None: the words decide, else the catalogue's first effect")]
        choices += [(name, spec.label) for name, spec in self.business.effects.items()]
        if current and current not in self.business.effects:
            choices.append((current, f"{humanize(current)} (no effect of the catalogue)"))
        return [*choices, *self._added_choices("effect", "effect")]

    def _route_block(self, code: str, new: str) -> Block:
        spec = self.business.routes.get(code)
        prefix, title, name, label, description = self._head(
            "route",
            code,
            new,
            spec,
            ("New route", "For example warranty_desk.", "What people see it called."),
        )
        owner = forms.ChoiceField(
            label="Owned by",
            required=False,
            choices=self._owner_choices(spec.group if spec else ""),
            initial=spec.group if spec else "",
            help_text="The group of people who work the requests sent here.",
            error_messages={
                "invalid_choice": "There is no group named “%(value)s”: choose one of the list."
            },
        )
        group = self._add(f"{prefix}-group", owner, title)
        short = [field for field in (name, label, group) if field is not None]
        if spec:
            self._route_places(code, prefix)
            short.append(
                self._remove(
                    prefix, title, "route", "Only a route no request type is sent to any more."
                )
            )
        return Block(code, title, self._testid("route", code, prefix), short, [description])

    def _route_places(self, code: str, prefix: str) -> None:
        parts = {"": "label", "label": "label", "description": "description", "group": "group"}
        self._places(("catalogue", "routes", code), prefix, {**parts, "[key]": "name"})

    def _type_block(self, code: str, new: str) -> Block:
        spec = self.business.request_types.get(code)
        prefix, title, name, label, description = self._head(
            "type",
            code,
            new,
            spec,
            (
                "New request type",
                "For example warranty_claim.",
                "What the console and the model's prompt call it.",
            ),
        )
        sent_to = self.base_document.routes.get(code, "")
        route = forms.ChoiceField(
            label="Sent to",
            required=False,
            choices=self._route_choices(sent_to),
            initial=sent_to,
            help_text="The route policy sends requests of this type to.",
        )
        fields = spec.fields if spec else {}
        listed = "\n".join(field_line(n, f) for n, f in fields.items())
        said = _cue_text(spec.cues if spec else {})
        scene = _cue_text(spec.scene_cues if spec else {})
        short = [field for field in (name, label) if field is not None]
        short.append(self._add(f"{prefix}-route", route, title))
        usual = spec.default_effect if spec else None
        effect = forms.ChoiceField(
            label="Usual effect",
            required=False,
            choices=self._effect_choices(usual or ""),
            initial=usual or "",
            help_text="What an e-mail of this type wants when its words ask for no effect.",
        )
        always = forms.BooleanField(
            label="Always this one, whatever else the words ask",
            required=False,
            initial=bool(spec and spec.default_effect_always),
            help_text=ALWAYS_HELP,
        )
        weight = self._number(
            "Cue weight", spec.cue_weight if spec else None, (1, MAX_CUE_WEIGHT), WEIGHT_HELP
        )
        short += [
            self._add(f"{prefix}-effect", effect, title),
            self._add(f"{prefix}-always", always, title),
            self._add(f"{prefix}-weight", weight, title),
        ]
        if spec:
            remove = forms.BooleanField(
                label="Remove this request type",
                required=False,
                help_text=(
                    "It is also taken out of where policy sends each type and out of the "
                    "confidence thresholds, so the version stays whole."
                ),
            )
            short.append(self._add(f"{prefix}-remove", remove, title))
            self._type_places(code, prefix)
        long = [
            description,
            self._add(f"{prefix}-fields", self._text("Fields", listed, FIELDS_BOX_HELP), title),
            self._add(f"{prefix}-cues", self._text("Cue words", said, CUES_BOX_HELP), title),
            self._add(
                f"{prefix}-scene_cues", self._text("Scene cues", scene, SCENE_CUES_BOX_HELP), title
            ),
        ]
        return Block(code, title, self._testid("type", code, prefix), short, long)

    def _type_places(self, code: str, prefix: str) -> None:
        parts = {"": "label", "label": "label", "description": "description"}
        parts |= {"fields": "fields", "cues": "cues", "[key]": "name", "default_effect": "effect"}
        parts |= {"scene_cues": "scene_cues", "cue_weight": "weight"}
        parts |= {"default_effect_always": "always"}
        self._places(("catalogue", "request_types", code), prefix, parts)
        self.places[("routes", code)] = f"{prefix}-route"

    def _effect_block(self, code: str, new: str) -> Block:
        spec = self.business.effects.get(code)
        prefix, title, name, label, description = self._head(
            "effect",
            code,
            new,
            spec,
            ("New effect", "For example open_warranty_ticket.", "What people see it called."),
        )
        adapter = forms.ChoiceField(
            label="How it is done",
            required=False,
            choices=ADAPTERS,
            initial=spec.adapter if spec else "",
            help_text="The adapter: its settings are below.",
        )
        rule = self.base_document.approvals.get(code)
        approver = forms.ChoiceField(
            label="Approved by",
            required=False,
            choices=group_choices(
                self.approvers, "Nobody: no approval needed", {rule.group if rule else ""}
            ),
            initial=rule.group if rule else "",
            help_text=(
                "The group whose members approve it before it happens. How many of them, "
                "and for how long: the policy editor."
            ),
        )
        allowed = forms.BooleanField(
            label="Policy allows it",
            required=False,
            initial=code in self.base_document.allowed_effects,
            help_text="Off: no run may ask for it.",
        )
        priority = self._number(
            "Cue priority", spec.cue_priority if spec else None, (0, 100), PRIORITY_HELP
        )
        settings = settings_text(effect_settings(spec)) if spec else ""
        parameters = settings_text(effect_parameters(spec)) if spec else ""
        short = [field for field in (name, label) if field is not None]
        short += [
            self._add(f"{prefix}-adapter", adapter, title),
            self._add(f"{prefix}-allowed", allowed, title),
            self._add(f"{prefix}-approver", approver, title),
            self._add(f"{prefix}-priority", priority, title),
        ]
        if spec:
            short.append(
                self._remove(
                    prefix, title, "effect", "Only an effect no request type has as its usual one."
                )
            )
        cues = _cue_text(spec.cues if spec else {})
        long = [
            description,
            self._add(
                f"{prefix}-settings",
                self._text("Adapter settings", settings, SETTINGS_HELP, SETTINGS_LIMIT),
                title,
            ),
            self._add(
                f"{prefix}-parameters",
                self._text("Parameters", parameters, PARAMETERS_HELP, SETTINGS_LIMIT),
                title,
            ),
            self._add(f"{prefix}-cues", self._text("Cue words", cues, EFFECT_CUES_HELP), title),
        ]
        if spec:
            self._effect_places(code, prefix)
        return Block(code, title, self._testid("effect", code, prefix), short, long)

    def _effect_places(self, code: str, prefix: str) -> None:
        parts = {"": "settings", "label": "label", "description": "description"}
        parts |= {"adapter": "adapter", "parameters": "parameters", "[key]": "name"}
        parts |= {"cues": "cues", "cue_priority": "priority"}
        parts |= dict.fromkeys(ADAPTER_NAMES, "settings")
        self._places(("catalogue", "effects", code), prefix, parts)
        self.places[("approvals", code)] = f"{prefix}-approver"

    def _attribute_block(self, code: str, new: str) -> Block:
        spec = self.business.customer_attributes.get(code)
        prefix, title, name, label, description = self._head(
            "attribute",
            code,
            new,
            spec,
            (
                "New customer attribute",
                "For example tier (the one amount limits are written per).",
                "What people see it called.",
            ),
        )
        values = forms.CharField(
            label="Values",
            required=False,
            max_length=LINES_LIMIT,
            initial=", ".join(spec.values) if spec else "",
            help_text=VALUES_HELP,
        )
        short = [field for field in (name, label) if field is not None]
        short.append(self._add(f"{prefix}-values", values, title))
        if spec:
            self._attribute_places(code, prefix)
            short.append(
                self._remove(
                    prefix, title, "attribute", "Only an attribute no amount limit is written per."
                )
            )
        kind = "attribute"
        return Block(code, title, self._testid(kind, code, prefix), short, [description])

    def _attribute_places(self, code: str, prefix: str) -> None:
        parts = {"": "values", "label": "label", "description": "description"}
        parts |= {"values": "values", "[key]": "name"}
        self._places(("catalogue", "customer_attributes", code), prefix, parts)

    def _signal_block(self, code: str, new: str) -> Block:
        signal = self.base_document.signals.get(code)
        if signal:
            prefix, title = f"signal-{code}", humanize(code)
        else:
            number = new.removeprefix("new_signal")
            prefix, title = new, f"New risk signal {number}".strip()
        name = self._name(prefix, title, "For example chargeback_threat.")
        description = FreeTextField(
            label="Description",
            required=False,
            initial=signal.description if signal else "",
            widget=forms.Textarea(attrs={"rows": 2}),
            help_text="What a match means, for whoever reads the run.",
        )
        action = forms.ChoiceField(
            label="When it matches",
            required=False,
            choices=[("", "(choose what a match does)"), *SIGNAL_ACTIONS],
            initial=signal.action.value if signal else "",
        )
        approved = signal.approval.group if signal and signal.approval else ""
        approver = forms.ChoiceField(
            label="Approved by",
            required=False,
            choices=group_choices(
                self.approvers, "(choose when an approver must agree)", {approved}
            ),
            initial=approved,
            help_text="Only used when an approver must agree.",
        )
        phrases = _cue_text(signal.phrases if signal else {})
        patterns = "\n".join(signal.patterns) if signal else ""
        short = [field for field in (name,) if field is not None]
        short += [
            self._add(f"{prefix}-action", action, title),
            self._add(f"{prefix}-approver", approver, title),
        ]
        if signal:
            short.append(self._remove(prefix, title, "risk signal", "Nothing else names it."))
            self._signal_places(code, prefix)
        long = [
            self._add(f"{prefix}-description", description, title),
            self._add(f"{prefix}-phrases", self._text("Phrases", phrases, PHRASES_BOX_HELP), title),
            self._add(f"{prefix}-patterns", self._text("Patterns", patterns, PATTERNS_HELP), title),
        ]
        return Block(code, title, self._testid("signal", code, prefix), short, long)

    def _signal_places(self, code: str, prefix: str) -> None:
        parts = {"": "action", "action": "action", "approval": "approver", "[key]": "name"}
        parts |= {"description": "description", "phrases": "phrases", "patterns": "patterns"}
        self._places(("signals", code), prefix, parts)

    # --- how customers are matched (catalogue.customer_matching) ---

    def _matching_fields(self) -> list[BoundField]:
        title = "How customers are matched"
        said = self.business.customer_matching
        pattern = forms.CharField(
            label="Reference pattern",
            required=False,
            max_length=MAX_REFERENCE_PATTERN,
            initial=said.reference_pattern if said else "",
            help_text=(
                "A regular expression a customer's reference matches in full, for example "
                "POL-[0-9]{4}-[0-9]{6}. Empty: the server's, "
                f"{setting('CUSTOMER_REFERENCE_PATTERN')}."
            ),
            widget=forms.TextInput(attrs={"spellcheck": "false", "class": "code"}),
        )
        domains = forms.BooleanField(
            label="A message from a customer's e-mail domain is theirs",
            required=False,
            initial=self.business.matching.match_sender_domain,
            help_text="When the message names no reference.",
        )
        where = ("catalogue", "customer_matching")
        self.places[where] = self.places[(*where, "reference_pattern")] = "matching-pattern"
        self.places[(*where, "match_sender_domain")] = "matching-domains"
        return [
            self._add("matching-pattern", pattern, title),
            self._add("matching-domains", domains, title),
        ]

    def _apply_matching(self, values: dict[str, Any], data: Document) -> Document:
        """The section as the catalogue's `customer_matching`; left as the defaults, none."""
        return editing.customer_matching_set(
            data,
            reference_pattern=values["matching-pattern"].strip() or None,
            match_sender_domain=bool(values["matching-domains"]),
        )

    def problem_list(self) -> list[tuple[str, str]]:
        """Every problem of the form with its place in words, in the order of the page."""
        return [
            (self.field_places.get(field.name, str(field.label)), str(error))
            for field in self
            for error in field.errors
        ]

    # --- the document ---

    def document(self) -> PolicyDocument | None:
        """The base document with the fields applied, validated as a new version; None (and
        the problems added to the form, each at its field) when it cannot be."""
        data = self._applied(dict(self.cleaned_data))
        if data is None:
            return None
        try:
            return PolicyDocument.model_validate(data, context=NEW_VERSION)
        except ValidationError as exc:
            for error in exc.errors():
                for path, message in self._problems(error):
                    self.add_problem(path, message)
            return None

    def said_at(self, rest: Path, message: str) -> str:
        words = tuple(part for part in rest if part != "[key]")
        return sentence(f"{place_in_words(words)}: {message}" if words else message)

    def _problems(self, error: ErrorDetails) -> list[tuple[Path, str]]:
        text = str((error.get("ctx") or {}).get("error", ""))
        if error["type"] == "missing" and error["loc"][-1:] and error["loc"][-1] in MISSING:
            return [(tuple(error["loc"]), MISSING[str(error["loc"][-1])])]
        if error["type"] != "value_error":
            return [(problem_path(error), plain_problem(error))]
        placed = PLACED.match(text)
        if placed:
            return [((*error["loc"], *_dotted(placed.group(1))), placed.group(2))]
        for check, part, words in TYPE_CHECKS:
            found = check.match(text)
            if found:
                return [((*error["loc"], part), words.format(*found.groups()))]
        nowhere = ROUTED_NOWHERE.match(text)
        if nowhere:
            said = "choose where requests of this type go: with no route they would go nowhere"
            return [(("routes", name), said) for name in nowhere.group(1).split(", ")]
        approved = APPROVED_NOT_ALLOWED.match(text)
        if approved:
            said = "only an effect policy allows is approved: allow it, or choose nobody"
            return [(("approvals", name), said) for name in approved.group(1).split(", ")]
        tiers = UNKNOWN_TIERS.match(text)
        if tiers:
            said = (
                f"amount limits are written for {tiers.group(1)}: keep these tiers among the "
                "values, or change the limits in the policy editor first"
            )
            return [(("catalogue", "customer_attributes", "tier", "values"), said)]
        return [(problem_path(error), plain_problem(error))]

    def _applied(self, values: dict[str, Any]) -> Document | None:
        data = editing.draft(self.base_document, version=values["version"], note=values["note"])
        data, new_routes = self._apply_routes(values, data)
        data, new_types = self._apply_types(values, data, new_routes)
        data, new_effects = self._apply_effects(values, data)
        data = self._apply_usual_effects(values, data, new_types, new_effects)
        data = self._apply_attributes(values, data)
        data = self._apply_signals(values, data)
        data = self._remove_routes(values, data)
        data = self._remove_effects(values, data)
        data = self._apply_matching(values, data)
        self._one_of_each(data)
        return None if self.errors else data

    def _one_of_each(self, data: Document) -> None:
        """A business has at least one request type, route and effect: said at the first
        block that adds one (a business started from nothing has only those)."""
        for part in editing.parts_missing(data):
            kind, what = KINDS[part]
            if not self.has_error(f"new_{kind}-name"):
                self.add_error(
                    f"new_{kind}-name",
                    f"A business needs at least one {what}: give it a name and fill in this block.",
                )

    def _apply_usual_effects(
        self,
        values: dict[str, Any],
        data: Document,
        new_types: list[tuple[str, str]],
        added: dict[str, str],
    ) -> Document:
        """Each type's usual effect, once the effects added in this form have their names."""
        chosen = [(block.code, f"type-{block.code}") for block in self.type_blocks]
        for code, prefix in [*chosen, *new_types]:
            if code not in editing.parts(data, Part.REQUEST_TYPE):
                continue  # removed
            effect = values[f"{prefix}-effect"]
            if effect.startswith(NEW_EFFECT):
                if effect not in added:
                    self.add_error(
                        f"{prefix}-effect",
                        "Add the new effect below (its name and how it is done), or choose "
                        "another.",
                    )
                    continue
                effect = added[effect]
            always = bool(values[f"{prefix}-always"])
            data = editing.request_type_usual_effect(data, name=code, effect=effect, always=always)
        return data

    def _new_name(self, values: dict[str, Any], prefix: str, what: str) -> str | None:
        """The name of the one being added in block `prefix`, or None when the block is
        left empty (or names none: said at the field)."""
        if not any(values[name] for name in self.fields if name.startswith(f"{prefix}-")):
            return None
        name = str(values[f"{prefix}-name"]).strip()
        if not name:
            self.add_error(f"{prefix}-name", f"Give the new {what} a name: {NAME_HELP.lower()}")
            return None
        return name

    def _add_blocks(self, values: dict[str, Any], part: Part) -> list[tuple[int, str, str]]:
        """(number, prefix, name) of each add block of the part's kind that adds one."""
        kind, what = KINDS[part]
        found: list[tuple[int, str, str]] = []
        for number in range(1, self.shown[kind] + 1):
            prefix = add_prefix(kind, number)
            name = self._new_name(values, prefix, what)
            if name is not None:
                found.append((number, prefix, name))
        return found

    def _add_part(
        self, data: Document, part: Part, prefix: str, name: str, spec: dict[str, Any]
    ) -> Document | None:
        """The document with the part added, or None (said at its name) when the name is
        taken, by one there before or one added above."""
        try:
            return editing.part_add(data, part=part, name=name, spec=spec)
        except editing.NameTaken:
            self.add_error(
                f"{prefix}-name",
                f"There is already a {KINDS[part][1]} named {name}: change that one, or "
                "choose another name.",
            )
            return None

    def _change_part(
        self, data: Document, part: Part, name: str, spec: Callable[[dict[str, Any]], Any]
    ) -> Document:
        """The document with the part's spec made by `spec` from the one it had."""
        was = editing.parts(data, part)[name]
        return editing.part_change(data, part=part, name=name, spec=spec(was))

    def _removed(
        self, data: Document, field: str, remove: Callable[..., Document], name: str
    ) -> Document:
        """The document without the part, or as it was (said at its Remove box) when a rule
        still names the part."""
        try:
            return remove(data, name=name)
        except editing.StillUsed as refused:
            self.add_error(field, still_used_words(refused))
            return data

    @staticmethod
    def _words_of(values: dict[str, Any], prefix: str) -> Described:
        return Described(values[f"{prefix}-label"], values[f"{prefix}-description"])

    def _apply_routes(
        self, values: dict[str, Any], data: Document
    ) -> tuple[Document, dict[str, str]]:
        """The routes edited and added; the added ones' names by their choice (+new2)."""
        for block in self.route_blocks:
            prefix = f"route-{block.code}"
            data = self._change_part(
                data, Part.ROUTE, block.code, partial(self._route, values, prefix)
            )
        added = {}
        for number, prefix, name in self._add_blocks(values, Part.ROUTE):
            grown = self._add_part(data, Part.ROUTE, prefix, name, self._route(values, prefix, {}))
            if grown is not None:
                data = grown
                self._route_places(name, prefix)
                added[add_choice(number)] = name
        return data, added

    def _route(self, values: dict[str, Any], prefix: str, was: dict[str, Any]) -> dict[str, Any]:
        words = self._words_of(values, prefix)
        return editing.route_spec(was, words=words, group=values[f"{prefix}-group"])

    def _remove_routes(self, values: dict[str, Any], data: Document) -> Document:
        """The routes ticked for removal, unless a rule still sends work to them."""
        for block in self.route_blocks:
            field = f"route-{block.code}-remove"
            if values[field]:
                data = self._removed(data, field, editing.route_remove, block.code)
        return data

    def _apply_types(
        self, values: dict[str, Any], data: Document, new_routes: dict[str, str]
    ) -> tuple[Document, list[tuple[str, str]]]:
        """The types edited, removed and added; (name, prefix) of each added one."""
        for block in self.type_blocks:
            prefix = f"type-{block.code}"
            if values[f"{prefix}-remove"]:
                data = editing.request_type_remove(data, name=block.code)
                continue
            data = self._change_part(
                data,
                Part.REQUEST_TYPE,
                block.code,
                partial(self._type, values, prefix),
            )
            data = self._route_to(values, prefix, block.code, data, new_routes)
        added = []
        for _, prefix, name in self._add_blocks(values, Part.REQUEST_TYPE):
            spec = self._type(values, prefix, {})
            grown = self._add_part(data, Part.REQUEST_TYPE, prefix, name, spec)
            if grown is None:
                continue
            self._type_places(name, prefix)
            data = self._route_to(values, prefix, name, grown, new_routes)
            added.append((name, prefix))
        return data, added

    def _type(self, values: dict[str, Any], prefix: str, was: dict[str, Any]) -> dict[str, Any]:
        weight = values[f"{prefix}-weight"]
        words = self._words_of(values, prefix)
        spec = editing.request_type_spec(was, words=words, cue_weight=weight)
        readers = {
            "fields": lambda text: read_field_lines(text, was.get("fields") or {}),
            "cues": read_cue_lines,
            "scene_cues": read_cue_lines,
        }
        self._read_boxes(values, prefix, was, spec, readers)
        return spec

    def _read_boxes(
        self,
        values: dict[str, Any],
        prefix: str,
        was: dict[str, Any],
        spec: dict[str, Any],
        readers: dict[str, Any],
    ) -> None:
        """Each box `readers` names, read into `spec`; a box as shown keeps the base's value."""
        for part, read in readers.items():
            field = f"{prefix}-{part}"
            if was and _same_text(values[field], str(self.fields[field].initial)):
                continue  # as shown: the base's value exactly
            try:
                spec[part] = read(values[field])
            except LineProblem as exc:
                self.add_error(field, sentence(str(exc)))

    def _route_to(
        self,
        values: dict[str, Any],
        prefix: str,
        code: str,
        data: Document,
        new_routes: dict[str, str],
    ) -> Document:
        chosen = values[f"{prefix}-route"]
        if chosen.startswith(NEW_ROUTE):
            if chosen not in new_routes:
                self.add_error(
                    f"{prefix}-route",
                    "Add the new route below (its name and who owns it), or choose another.",
                )
                return data
            chosen = new_routes[chosen]
        # None chosen: the schema says the type goes nowhere, at this field.
        return editing.request_type_send(data, name=code, route=chosen)

    def _apply_effects(
        self, values: dict[str, Any], data: Document
    ) -> tuple[Document, dict[str, str]]:
        """The effects edited and added; the added ones' names by their choice (+new2)."""
        for block in self.effect_blocks:
            prefix = f"effect-{block.code}"
            data = self._change_part(
                data, Part.EFFECT, block.code, partial(self._effect, values, prefix)
            )
            data = self._allowed(values, prefix, block.code, data)
        added = {}
        for number, prefix, name in self._add_blocks(values, Part.EFFECT):
            spec = self._effect(values, prefix, {})
            grown = self._add_part(data, Part.EFFECT, prefix, name, spec)
            if grown is None:
                continue
            self._effect_places(name, prefix)
            data = self._allowed(values, prefix, name, grown)
            added[add_choice(number)] = name
        return data, added

    def _effect(self, values: dict[str, Any], prefix: str, was: dict[str, Any]) -> dict[str, Any]:
        adapter = values[f"{prefix}-adapter"]
        effect = editing.effect_spec(
            was,
            words=self._words_of(values, prefix),
            adapter=adapter,
            cue_priority=values[f"{prefix}-priority"],
        )
        settings, parameters = f"{prefix}-settings", f"{prefix}-parameters"
        if was and adapter == was["adapter"] and self._as_shown(values, settings):
            effect[adapter] = was[adapter]
        else:
            config = self._mapping(values, settings)
            if adapter and config is not None:
                effect[adapter] = config
        if not (was and self._as_shown(values, parameters)):
            effect["parameters"] = self._mapping(values, parameters) or {}
        self._read_boxes(values, prefix, was, effect, {"cues": read_cue_lines})
        return effect

    def _remove_effects(self, values: dict[str, Any], data: Document) -> Document:
        """The effects ticked for removal (out of what policy allows and approves too), unless
        a request type has it as its usual effect or an amount limit is written for it."""
        for block in self.effect_blocks:
            field = f"effect-{block.code}-remove"
            if values[field]:
                data = self._removed(data, field, editing.effect_remove, block.code)
        return data

    def _as_shown(self, values: dict[str, Any], field: str) -> bool:
        def kept(text: str) -> list[str]:
            return [line.rstrip() for line in text.splitlines() if line.strip()]

        return kept(values[field]) == kept(str(self.fields[field].initial))

    def _mapping(self, values: dict[str, Any], field: str) -> dict[str, Any] | None:
        try:
            return read_yaml_mapping(values[field])
        except ValueError as exc:
            self.add_error(field, sentence(str(exc)))
            return None

    def _allowed(self, values: dict[str, Any], prefix: str, code: str, data: Document) -> Document:
        """Whether policy allows the effect, and who approves it."""
        return editing.effect_allow(
            data,
            name=code,
            allowed=bool(values[f"{prefix}-allowed"]),
            approver=values[f"{prefix}-approver"],
        )

    def _apply_attributes(self, values: dict[str, Any], data: Document) -> Document:
        """The customer attributes edited, removed and added."""
        for block in self.attribute_blocks:
            prefix = f"attribute-{block.code}"
            if values[f"{prefix}-remove"]:
                field = f"{prefix}-remove"
                data = self._removed(data, field, editing.attribute_remove, block.code)
                continue
            data = self._change_part(
                data,
                Part.CUSTOMER_ATTRIBUTE,
                block.code,
                partial(self._attribute, values, prefix),
            )
        for _, prefix, name in self._add_blocks(values, Part.CUSTOMER_ATTRIBUTE):
            spec = self._attribute(values, prefix, {})
            grown = self._add_part(data, Part.CUSTOMER_ATTRIBUTE, prefix, name, spec)
            if grown is not None:
                self._attribute_places(name, prefix)
                data = grown
        return data

    def _attribute(
        self, values: dict[str, Any], prefix: str, was: dict[str, Any]
    ) -> dict[str, Any]:
        listed = _words_line(values[f"{prefix}-values"])
        if not listed:
            self.add_error(f"{prefix}-values", "Give it its values, separated by commas.")
        return editing.attribute_spec(was, words=self._words_of(values, prefix), values=listed)

    def _apply_signals(self, values: dict[str, Any], data: Document) -> Document:
        """The risk signals edited, removed and added; a changed one is a new version of it
        (policy.editing.signal_change)."""
        for block in self.signal_blocks:
            prefix = f"signal-{block.code}"
            if values[f"{prefix}-remove"]:
                data = editing.signal_remove(data, name=block.code)
                continue
            was = editing.parts(data, Part.SIGNAL)[block.code]
            spec = self._signal(values, prefix, was)
            data = editing.signal_change(data, name=block.code, spec=spec)
        for _, prefix, name in self._add_blocks(values, Part.SIGNAL):
            grown = self._add_part(
                data, Part.SIGNAL, prefix, name, self._signal(values, prefix, {})
            )
            if grown is not None:
                self._signal_places(name, prefix)
                data = grown
        return data

    def _signal(self, values: dict[str, Any], prefix: str, was: dict[str, Any]) -> dict[str, Any]:
        signal = editing.signal_spec(
            was,
            description=values[f"{prefix}-description"],
            action=values[f"{prefix}-action"],
            approver=values[f"{prefix}-approver"],
        )
        readers = {
            "phrases": read_cue_lines,
            "patterns": lambda text: [ln for _, ln in _lines(text)],
        }
        self._read_boxes(values, prefix, was, signal, readers)
        return signal


def still_used_words(refused: editing.StillUsed) -> str:
    """Why a part cannot be removed yet, and what to do first, in the page's words."""
    users = list(refused.users)
    if refused.use == Use.SENT_TO:
        verb = "is" if len(users) == 1 else "are"
        return (
            f"{_listed(users)} {verb} sent here: send them to another route first, or keep "
            "this one."
        )
    if refused.use == Use.SAMPLED:
        return (
            "The review after the fact samples this route: take it out of the sampling in the "
            "policy editor first, or keep this one."
        )
    if refused.use == Use.USUAL_EFFECT:
        return (
            f"It is the usual effect of {_listed(users)}: choose another there first, or keep "
            "this one."
        )
    if refused.part == Part.CUSTOMER_ATTRIBUTE:
        return (
            "The amount limits are written per tier: take them out in the policy editor "
            "first, or keep it."
        )
    return (
        f"The amount limits of {_listed(users)} are written for it: change them in the policy "
        "editor first, or keep this one."
    )


def _listed(words: list[str]) -> str:
    """`["b", "a", "c"]` → "a, b and c" (sorted: the database keeps no key order)."""
    ordered = sorted(words)
    return ", ".join(ordered[:-1]) + " and " + ordered[-1] if len(ordered) > 1 else ordered[0]


def _cue_text(cues: dict[str, list[str]]) -> str:
    return "\n".join(cue_line(language, words) for language, words in cues.items())


def _dotted(place: str) -> Path:
    """A dotted place as a path: its list positions as numbers (ASCII digits only: a name
    the person typed may hold a '²', which isdigit() takes and int() refuses)."""
    parts = place.split(".")
    return tuple(part if (number := parse_number(part)) is None else number for part in parts)
