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
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import yaml
from django import forms
from django.contrib.auth.models import Group
from django.forms import BoundField
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from automation.conf import setting
from console.forms.policy import (
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
from core.inputs import parse_number
from policy.catalogue import MAX_REFERENCE_PATTERN, EffectSpec, FieldSpec
from policy.models import PolicyVersion
from policy.schemas import NEW_VERSION, PolicyDocument
from policy.services import PolicyError, load_policy_yaml

# The route select's choice for the route added in the same form (no catalogue name has a +).
NEW_ROUTE = "+new"
NEW_EFFECT = "+new"  # the same, in the usual effect's select
ADAPTERS = [
    ("", "(choose how it is done)"),
    ("record", "Record: a task row kept in Gatehouse, for a group to work"),
    ("http", "HTTP: a request to another system"),
    ("email_reply", "E-mail reply: an answer to the sender, in the same thread"),
]
ADAPTER_NAMES = [code for code, _ in ADAPTERS if code]
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
class Block:
    """One request type, route or effect on the page (or the block that adds one)."""

    code: str  # "" in a block that adds one
    title: str
    testid: str
    short: list[BoundField]  # side by side
    long: list[BoundField]  # one under the other

    @property
    def has_errors(self) -> bool:
        return any(field.errors for field in [*self.short, *self.long])


class BusinessForm(NewVersionForm):
    """The business of `base`'s document, and the rules that name it (see document())."""

    def __init__(self, *args: Any, base: PolicyVersion, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.base_version = base
        self.base_document = base.parsed
        self.business = self.base_document.business
        self.fields["base"].initial = base.name
        self.places: dict[Path, str] = {("version",): "version", ("note",): "note"}
        self.field_places = {
            name: f"The new version > {self.fields[name].label}" for name in ("version", "note")
        }
        self.approvers = deciding_groups()
        self.owners = set(Group.objects.values_list("name", flat=True))
        self.route_blocks = [self._route_block(name) for name in self.business.routes]
        self.new_route = self._route_block("")
        self.type_blocks = [self._type_block(name) for name in self.business.request_types]
        self.new_type = self._type_block("")
        self.effect_blocks = [self._effect_block(name) for name in self.business.effects]
        self.new_effect = self._effect_block("")
        self.matching = self._matching_fields()

    # --- fields, built from the base document ---

    def _add(self, name: str, field: forms.Field, place: str) -> BoundField:
        self.fields[name] = field
        self.field_places[name] = f"{place} > {field.label}"
        return self[name]

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

    def _name(self, prefix: str, title: str, example: str) -> BoundField | None:
        """The name input of a block that adds one (a name, once stored, is kept)."""
        if not prefix.startswith("new_"):
            return None
        field = forms.CharField(
            label="Name", required=False, max_length=60, help_text=f"{NAME_HELP} {example}"
        )
        return self._add(f"{prefix}-name", field, title)

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

    def _route_choices(self, current: str) -> list[tuple[str, str]]:
        routes = self.business.routes
        choices = [("", "(choose where it goes)")]
        choices += [(name, spec.label) for name, spec in routes.items()]
        if current and current not in routes:
            choices.append((current, f"{humanize(current)} (no route of the catalogue)"))
        return [*choices, (NEW_ROUTE, "The new route, added below")]

    def _head(
        self, kind: str, code: str, spec: Any, new_title: str, example: str, words_help: str
    ) -> tuple[str, str, BoundField | None, BoundField, BoundField]:
        """A block's prefix, title, name (a new one only), label and description fields."""
        prefix, title = (f"{kind}-{code}", spec.label) if spec else (f"new_{kind}", new_title)
        name = self._name(prefix, title, example)
        shown = (spec.label, spec.description) if spec else ("", "")
        label, description = self._words(prefix, title, shown, words_help)
        return prefix, title, name, label, description

    def _effect_choices(self, current: str) -> list[tuple[str, str]]:
        choices = [("", "None: the words decide, else the catalogue's first effect")]
        choices += [(name, spec.label) for name, spec in self.business.effects.items()]
        if current and current not in self.business.effects:
            choices.append((current, f"{humanize(current)} (no effect of the catalogue)"))
        return [*choices, (NEW_EFFECT, "The new effect, added below")]

    def _route_block(self, code: str) -> Block:
        spec = self.business.routes.get(code)
        prefix, title, name, label, description = self._head(
            "route",
            code,
            spec,
            "New route",
            "For example warranty_desk.",
            "What people see it called.",
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
        if spec:
            self._route_places(code, prefix)
        short = [field for field in (name, label, group) if field is not None]
        return Block(code, title, f"route-{code}" if spec else "add-route", short, [description])

    def _route_places(self, code: str, prefix: str) -> None:
        parts = {"": "label", "label": "label", "description": "description", "group": "group"}
        self._places(("catalogue", "routes", code), prefix, {**parts, "[key]": "name"})

    def _type_block(self, code: str) -> Block:
        spec = self.business.request_types.get(code)
        prefix, title, name, label, description = self._head(
            "type",
            code,
            spec,
            "New request type",
            "For example warranty_claim.",
            "What the console and the model's prompt call it.",
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
        cues = spec.cues if spec else {}
        listed = "\n".join(field_line(n, f) for n, f in fields.items())
        said = "\n".join(cue_line(language, words) for language, words in cues.items())
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
        short.append(self._add(f"{prefix}-effect", effect, title))
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
        ]
        return Block(code, title, f"type-{code}" if spec else "add-type", short, long)

    def _type_places(self, code: str, prefix: str) -> None:
        parts = {"": "label", "label": "label", "description": "description"}
        parts |= {"fields": "fields", "cues": "cues", "[key]": "name", "default_effect": "effect"}
        self._places(("catalogue", "request_types", code), prefix, parts)
        self.places[("routes", code)] = f"{prefix}-route"

    def _effect_block(self, code: str) -> Block:
        spec = self.business.effects.get(code)
        prefix, title, name, label, description = self._head(
            "effect",
            code,
            spec,
            "New effect",
            "For example open_warranty_ticket.",
            "What people see it called.",
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
        settings = settings_text(effect_settings(spec)) if spec else ""
        parameters = settings_text(effect_parameters(spec)) if spec else ""
        short = [field for field in (name, label) if field is not None]
        short += [
            self._add(f"{prefix}-adapter", adapter, title),
            self._add(f"{prefix}-allowed", allowed, title),
            self._add(f"{prefix}-approver", approver, title),
        ]
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
        ]
        if spec:
            self._effect_places(code, prefix)
        return Block(code, title, f"effect-{code}" if spec else "add-effect", short, long)

    def _effect_places(self, code: str, prefix: str) -> None:
        parts = {"": "settings", "label": "label", "description": "description"}
        parts |= {"adapter": "adapter", "parameters": "parameters", "[key]": "name"}
        parts |= dict.fromkeys(ADAPTER_NAMES, "settings")
        self._places(("catalogue", "effects", code), prefix, parts)
        self.places[("approvals", code)] = f"{prefix}-approver"

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

    def _apply_matching(self, values: dict[str, Any], data: dict[str, Any]) -> None:
        """The section as the catalogue's `customer_matching`; left as the defaults, none."""
        pattern = values["matching-pattern"].strip() or None
        domains = bool(values["matching-domains"])
        matching = {"reference_pattern": pattern, "match_sender_domain": domains}
        said = self.business.customer_matching
        if said is not None and said.model_dump(mode="json") == matching:
            return  # as it was: the base's exactly
        default = pattern is None and domains
        data["catalogue"]["customer_matching"] = None if default else matching

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
        nowhere = ROUTED_NOWHERE.match(text)
        if nowhere:
            said = "choose where requests of this type go: with no route they would go nowhere"
            return [(("routes", name), said) for name in nowhere.group(1).split(", ")]
        approved = APPROVED_NOT_ALLOWED.match(text)
        if approved:
            said = "only an effect policy allows is approved: allow it, or choose nobody"
            return [(("approvals", name), said) for name in approved.group(1).split(", ")]
        return [(problem_path(error), plain_problem(error))]

    def _applied(self, values: dict[str, Any]) -> dict[str, Any] | None:
        data = self.base_document.model_dump(mode="json")
        data["version"] = values["version"].strip()
        data["note"] = values["note"].strip()
        data["catalogue"] = self.business.model_dump(mode="json")
        new_route = self._apply_routes(values, data["catalogue"]["routes"])
        new_type = self._apply_types(values, data, new_route)
        new_effect = self._apply_effects(values, data)
        self._apply_usual_effects(values, data, new_type, new_effect)
        self._apply_matching(values, data)
        return None if self.errors else data

    def _apply_usual_effects(
        self, values: dict[str, Any], data: dict[str, Any], new_type: str | None, new: str | None
    ) -> None:
        """Each type's usual effect, once the effect added in this form has its name."""
        types = data["catalogue"]["request_types"]
        chosen = [(block.code, f"type-{block.code}") for block in self.type_blocks]
        if new_type is not None:
            chosen.append((new_type, "new_type"))
        for code, prefix in chosen:
            if code not in types:
                continue  # removed
            effect = values[f"{prefix}-effect"]
            if effect == NEW_EFFECT:
                if new is None:
                    self.add_error(
                        f"{prefix}-effect",
                        "Add the new effect below (its name and how it is done), or choose "
                        "another.",
                    )
                    continue
                effect = new
            types[code].pop("default_effect", None)
            if effect:
                types[code]["default_effect"] = effect
            else:
                types[code]["default_effect_always"] = False

    def _new_name(self, values: dict[str, Any], prefix: str, what: str, taken: Any) -> str | None:
        """The name of the one being added in block `prefix`, or None when the block is
        left empty (or names none: said at the field)."""
        if not any(values[name] for name in self.fields if name.startswith(f"{prefix}-")):
            return None
        name = str(values[f"{prefix}-name"]).strip()
        if not name:
            self.add_error(f"{prefix}-name", f"Give the new {what} a name: {NAME_HELP.lower()}")
            return None
        if name in taken:
            self.add_error(
                f"{prefix}-name",
                f"There is already a {what} named {name}: change that one, or choose another name.",
            )
            return None
        return name

    def _described(
        self, values: dict[str, Any], prefix: str, was: dict[str, Any]
    ) -> dict[str, Any]:
        return {
            **was,
            "label": values[f"{prefix}-label"],
            "description": values[f"{prefix}-description"].strip(),
        }

    def _apply_routes(self, values: dict[str, Any], routes: dict[str, Any]) -> str | None:
        """The routes edited and the one added; its name, or None when none is."""
        for block in self.route_blocks:
            routes[block.code] = self._route(values, f"route-{block.code}", routes[block.code])
        name = self._new_name(values, "new_route", "route", routes)
        if name is not None:
            self._route_places(name, "new_route")
            routes[name] = self._route(values, "new_route", {})
        return name

    def _route(self, values: dict[str, Any], prefix: str, was: dict[str, Any]) -> dict[str, Any]:
        route = self._described(values, prefix, was)
        route.pop("group", None)
        if values[f"{prefix}-group"]:
            route["group"] = values[f"{prefix}-group"]
        return route

    def _apply_types(
        self, values: dict[str, Any], data: dict[str, Any], new_route: str | None
    ) -> str | None:
        """The types edited, removed and added; the added one's name, or None."""
        types = data["catalogue"]["request_types"]
        for block in self.type_blocks:
            prefix = f"type-{block.code}"
            if values[f"{prefix}-remove"]:
                del types[block.code]
                data["routes"].pop(block.code, None)
                data["confidence"]["per_category"].pop(block.code, None)
                continue
            types[block.code] = self._type(values, prefix, types[block.code])
            self._route_to(values, prefix, block.code, data["routes"], new_route)
        name = self._new_name(values, "new_type", "request type", types)
        if name is not None:
            self._type_places(name, "new_type")
            types[name] = self._type(values, "new_type", {})
            self._route_to(values, "new_type", name, data["routes"], new_route)
        return name

    def _type(self, values: dict[str, Any], prefix: str, was: dict[str, Any]) -> dict[str, Any]:
        spec = self._described(values, prefix, was)
        readers = {
            "fields": lambda text: read_field_lines(text, was.get("fields") or {}),
            "cues": read_cue_lines,
        }
        for part, read in readers.items():
            field = f"{prefix}-{part}"
            if was and _same_text(values[field], str(self.fields[field].initial)):
                continue  # as shown: the base's value exactly
            try:
                spec[part] = read(values[field])
            except LineProblem as exc:
                self.add_error(field, sentence(str(exc)))
        return spec

    def _route_to(
        self,
        values: dict[str, Any],
        prefix: str,
        code: str,
        routes: dict[str, Any],
        new_route: str | None,
    ) -> None:
        chosen = values[f"{prefix}-route"]
        if chosen == NEW_ROUTE:
            if new_route is None:
                self.add_error(
                    f"{prefix}-route",
                    "Add the new route below (its name and who owns it), or choose another.",
                )
                return
            chosen = new_route
        if chosen:
            routes[code] = chosen
        else:
            routes.pop(code, None)  # the schema says the type goes nowhere, at this field

    def _apply_effects(self, values: dict[str, Any], data: dict[str, Any]) -> str | None:
        """The effects edited and added; the added one's name, or None."""
        effects = data["catalogue"]["effects"]
        for block in self.effect_blocks:
            prefix = f"effect-{block.code}"
            effects[block.code] = self._effect(values, prefix, effects[block.code])
            self._allowed(values, prefix, block.code, data)
        name = self._new_name(values, "new_effect", "effect", effects)
        if name is not None:
            self._effect_places(name, "new_effect")
            effects[name] = self._effect(values, "new_effect", {})
            self._allowed(values, "new_effect", name, data)
        return name

    def _effect(self, values: dict[str, Any], prefix: str, was: dict[str, Any]) -> dict[str, Any]:
        adapter = values[f"{prefix}-adapter"]
        effect = {
            key: value
            for key, value in self._described(values, prefix, was).items()
            if key not in ADAPTER_NAMES and key != "adapter"
        }
        if adapter:
            effect["adapter"] = adapter
        settings, parameters = f"{prefix}-settings", f"{prefix}-parameters"
        if was and adapter == was["adapter"] and self._as_shown(values, settings):
            effect[adapter] = was[adapter]
        else:
            config = self._mapping(values, settings)
            if adapter and config is not None:
                effect[adapter] = config
        if not (was and self._as_shown(values, parameters)):
            effect["parameters"] = self._mapping(values, parameters) or {}
        return effect

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

    def _allowed(
        self, values: dict[str, Any], prefix: str, code: str, data: dict[str, Any]
    ) -> None:
        """Whether policy allows the effect, and who approves it."""
        allowed: list[str] = data["allowed_effects"]
        if values[f"{prefix}-allowed"] and code not in allowed:
            allowed.append(code)
        elif not values[f"{prefix}-allowed"] and code in allowed:
            allowed.remove(code)
        group = values[f"{prefix}-approver"]
        if group:
            data["approvals"][code] = {**data["approvals"].get(code, {}), "group": group}
        else:
            data["approvals"].pop(code, None)


def _dotted(place: str) -> Path:
    """A dotted place as a path: its list positions as numbers (ASCII digits only: a name
    the person typed may hold a '²', which isdigit() takes and int() refuses)."""
    parts = place.split(".")
    return tuple(part if (number := parse_number(part)) is None else number for part in parts)
