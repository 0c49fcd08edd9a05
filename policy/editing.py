"""Editing a policy document's business: adding, changing and removing its request types,
routes, effects, customer attributes and risk signals, and the rules that name them.

Pure functions over the document as JSON (`PolicyDocument.model_dump(mode="json")`): each
takes a document and returns a new one, the one it was given untouched, and reads nothing
else. The new one shares what the edit did not change with the old (an edit copies only the
mappings on its way, so a form's many edits stay cheap on a large catalogue): treat both as
read-only. What the schema checks (a name's pattern, a route that exists, the templates) it leaves
to `PolicyDocument` when the edited document is validated; what only an edit can know (a part
removed while a rule still names it, a name already taken) is refused here with an
`EditRefused` that says what still uses the part, for the page to word.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from policy.schemas import PolicyDocument

Document = dict[str, Any]


class Part(StrEnum):
    """A kind of thing the business names, by where the document keeps it."""

    REQUEST_TYPE = "request_type"
    ROUTE = "route"
    EFFECT = "effect"
    CUSTOMER_ATTRIBUTE = "customer_attribute"
    SIGNAL = "signal"


# Where each part's mapping (name -> spec) is in the document.
PLACES: dict[Part, tuple[str, ...]] = {
    Part.REQUEST_TYPE: ("catalogue", "request_types"),
    Part.ROUTE: ("catalogue", "routes"),
    Part.EFFECT: ("catalogue", "effects"),
    Part.CUSTOMER_ATTRIBUTE: ("catalogue", "customer_attributes"),
    Part.SIGNAL: ("signals",),
}
# What a business has at least one of.
REQUIRED = (Part.REQUEST_TYPE, Part.ROUTE, Part.EFFECT)


class Use(StrEnum):
    """What in the document still names a part that was to be removed."""

    SENT_TO = "sent_to"  # request types policy sends to the route
    SAMPLED = "sampled"  # the QA sampling's rates per route or owner
    USUAL_EFFECT = "usual_effect"  # request types whose usual effect it is
    AMOUNT_LIMITS = "amount_limits"  # account tiers whose limits are written for it


class EditRefused(ValueError):
    """An edit the document refuses; the document is left as it was."""

    def __init__(self, part: Part, name: str, message: str) -> None:
        super().__init__(message)
        self.part = part
        self.name = name


class NameTaken(EditRefused):
    """A part added under a name the document already uses for one of its kind."""

    def __init__(self, part: Part, name: str) -> None:
        super().__init__(part, name, f"there is already a {part.value} named {name}")


class StillUsed(EditRefused):
    """A part removed while the document still names it: `users` are what names it (request
    types' labels, tiers), sorted."""

    def __init__(self, part: Part, name: str, use: Use, users: Iterable[str]) -> None:
        self.use = use
        self.users = tuple(sorted(users))
        said = ", ".join(self.users) or use.value
        super().__init__(part, name, f"the {part.value} {name} is still used: {said}")


@dataclass(frozen=True)
class Described:
    """What every part a person names says of itself."""

    label: str
    description: str


def draft(document: PolicyDocument, *, version: str, note: str) -> Document:
    """A new version's document to edit, from a base: its business written out in full (a base
    without a catalogue of its own carries the reference one's, so the new version has it)."""
    data = document.model_dump(mode="json")
    data["version"] = version.strip()
    data["note"] = note.strip()
    data["catalogue"] = document.business.model_dump(mode="json")
    return data


def parts(data: Document, part: Part) -> dict[str, Any]:
    """The part's mapping in the document (name -> spec)."""
    return dict(_mapping(data, part))


def _with(data: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    """`data` with the value at `path` replaced, each mapping on the way copied."""
    head, *rest = path
    return {**data, head: _with(data[head], tuple(rest), value) if rest else value}


def _set(data: Document, path: tuple[str, ...], name: str, spec: Any) -> Document:
    """The document with the mapping at `path` holding `spec` under `name`."""
    mapping = _at(data, path)
    return _with(data, path, {**mapping, name: spec})


def _drop(data: Document, path: tuple[str, ...], name: str) -> Document:
    """The document with `name` out of the mapping at `path` (as it was when not there)."""
    mapping = _at(data, path)
    if name not in mapping:
        return data
    return _with(data, path, {key: value for key, value in mapping.items() if key != name})


def _at(data: Document, path: tuple[str, ...]) -> Any:
    found: Any = data
    for key in path:
        found = found[key]
    return found


def _mapping(data: Document, part: Part) -> dict[str, Any]:
    mapping: dict[str, Any] = _at(data, PLACES[part])
    return mapping


def part_add(data: Document, *, part: Part, name: str, spec: dict[str, Any]) -> Document:
    """The document with a new part; raises NameTaken when one of its kind has the name."""
    if name in _mapping(data, part):
        raise NameTaken(part, name)
    return _set(data, PLACES[part], name, spec)


def part_change(data: Document, *, part: Part, name: str, spec: dict[str, Any]) -> Document:
    """The document with a part's spec replaced (a name, once stored, is kept: KeyError when
    there is none)."""
    if name not in _mapping(data, part):
        raise KeyError(f"no {part.value} named {name}")
    return _set(data, PLACES[part], name, spec)


def described(was: dict[str, Any], words: Described) -> dict[str, Any]:
    """A part's spec with its label and description as said."""
    return {**was, "label": words.label, "description": words.description.strip()}


def _without(spec: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    """The spec with `key` set to `value`, or without it when the value is empty."""
    kept = {k: v for k, v in spec.items() if k != key}
    return kept if value is None or value == "" else {**kept, key: value}


# --- routes -----------------------------------------------------------------------------


def route_spec(was: dict[str, Any], *, words: Described, group: str) -> dict[str, Any]:
    """A route as said: its words and the group that owns it (none: the schema asks)."""
    return _without(described(was, words), "group", group)


def route_remove(data: Document, *, name: str) -> Document:
    """The document without the route; refused while a request type is sent to it or the QA
    sampling samples it (both would name a route that is gone)."""
    types = data["catalogue"]["request_types"]
    sent = [types[t]["label"] for t, route in data["routes"].items() if route == name]
    if sent:
        raise StillUsed(Part.ROUTE, name, Use.SENT_TO, sent)
    sampled = data.get("qa_sampling") or {}
    if name in (sampled.get("routes") or {}) | (sampled.get("owners") or {}):
        raise StillUsed(Part.ROUTE, name, Use.SAMPLED, ())
    return _drop(data, PLACES[Part.ROUTE], name)


# --- request types ----------------------------------------------------------------------


def request_type_spec(
    was: dict[str, Any], *, words: Described, cue_weight: int | None
) -> dict[str, Any]:
    """A request type as said (its fields and cue words are set by the caller as read)."""
    return _without(described(was, words), "cue_weight", cue_weight)


def request_type_send(data: Document, *, name: str, route: str) -> Document:
    """The document with the type sent to `route`; "" sends it nowhere (which the schema
    then refuses, at this type)."""
    return _with(data, ("routes",), _without(data["routes"], name, route))


def request_type_usual_effect(data: Document, *, name: str, effect: str, always: bool) -> Document:
    """The document with the type's usual effect ("" for none), and whether the type always
    gets it whatever else the words ask."""
    spec = _without(_mapping(data, Part.REQUEST_TYPE)[name], "default_effect", effect)
    spec["default_effect_always"] = always
    return part_change(data, part=Part.REQUEST_TYPE, name=name, spec=spec)


def request_type_remove(data: Document, *, name: str) -> Document:
    """The document without the type, taken out of where policy sends each type and out of
    the confidence thresholds too, so the version stays whole."""
    edited = _drop(data, PLACES[Part.REQUEST_TYPE], name)
    edited = _drop(edited, ("routes",), name)
    return _drop(edited, ("confidence", "per_category"), name)


# --- effects ----------------------------------------------------------------------------

ADAPTER_NAMES = ("record", "http", "email_reply")


def effect_spec(
    was: dict[str, Any], *, words: Described, adapter: str, cue_priority: int | None
) -> dict[str, Any]:
    """An effect as said, without any adapter's settings (the caller adds the chosen one's)."""
    spec = {
        key: value
        for key, value in described(was, words).items()
        if key not in ADAPTER_NAMES and key != "adapter"
    }
    return _without(_without(spec, "adapter", adapter), "cue_priority", cue_priority)


def effect_allow(data: Document, *, name: str, allowed: bool, approver: str) -> Document:
    """The document with the effect allowed by policy or not, and approved by `approver`'s
    group ("" for nobody: then the effect needs no approval)."""
    listed = list(data["allowed_effects"])
    if allowed and name not in listed:
        listed.append(name)
    elif not allowed and name in listed:
        listed.remove(name)
    edited = _with(data, ("allowed_effects",), listed)
    if not approver:
        return _drop(edited, ("approvals",), name)
    rule = {**data["approvals"].get(name, {}), "group": approver}
    return _set(edited, ("approvals",), name, rule)


def effect_remove(data: Document, *, name: str) -> Document:
    """The document without the effect, out of what policy allows and approves too; refused
    while a request type has it as its usual effect or an amount limit is written for it."""
    types = data["catalogue"]["request_types"]
    usual = [t["label"] for t in types.values() if t.get("default_effect") == name]
    if usual:
        raise StillUsed(Part.EFFECT, name, Use.USUAL_EFFECT, usual)
    limits = data.get("amount_limits") or {}
    tiers = [tier for tier, limit in limits.items() if name in (limit.get("effects") or [])]
    if tiers:
        raise StillUsed(Part.EFFECT, name, Use.AMOUNT_LIMITS, tiers)
    edited = _drop(data, PLACES[Part.EFFECT], name)
    return effect_allow(edited, name=name, allowed=False, approver="")


# --- customer attributes ----------------------------------------------------------------


def attribute_spec(was: dict[str, Any], *, words: Described, values: list[str]) -> dict[str, Any]:
    return described(was, words) | {"values": list(values)}


def attribute_remove(data: Document, *, name: str) -> Document:
    """The document without the customer attribute; the tier is refused while amount limits
    are written per tier."""
    limits = data.get("amount_limits") or {}
    if name == "tier" and limits:
        raise StillUsed(Part.CUSTOMER_ATTRIBUTE, name, Use.AMOUNT_LIMITS, limits)
    return _drop(data, PLACES[Part.CUSTOMER_ATTRIBUTE], name)


# --- risk signals -----------------------------------------------------------------------


def signal_spec(
    was: dict[str, Any], *, description: str, action: str, approver: str
) -> dict[str, Any]:
    """A risk signal as said: an approver is kept only when a match asks for an approval."""
    approval = None
    if action == "approval" and approver:
        approval = {**(was.get("approval") or {}), "group": approver}
    signal = {**was, "description": description.strip(), "approval": approval}
    return _without(signal, "action", action)


def signal_change(data: Document, *, name: str, spec: dict[str, Any]) -> Document:
    """The document with the signal as said; a changed signal is a new version of it (the
    rule's text on a run names it: v2), one left as it was keeps its version."""
    was = _mapping(data, Part.SIGNAL)[name]
    if spec != was:
        spec = {**spec, "version": int(was.get("version", 1)) + 1}
    return part_change(data, part=Part.SIGNAL, name=name, spec=spec)


def signal_remove(data: Document, *, name: str) -> Document:
    """The document without the signal (nothing else names one)."""
    return _drop(data, PLACES[Part.SIGNAL], name)


# --- the whole business -----------------------------------------------------------------


def customer_matching_set(
    data: Document, *, reference_pattern: str | None, match_sender_domain: bool
) -> Document:
    """The document with how customers are matched; as it was, unchanged (a base that says
    the defaults keeps saying them), and the defaults otherwise said as none."""
    matching = {"reference_pattern": reference_pattern, "match_sender_domain": match_sender_domain}
    if data["catalogue"].get("customer_matching") == matching:
        return data
    default = reference_pattern is None and match_sender_domain
    return _with(data, ("catalogue", "customer_matching"), None if default else matching)


def parts_missing(data: Document) -> list[Part]:
    """What the business has none of, among what every business needs one of at least."""
    return [part for part in REQUIRED if not _mapping(data, part)]
