"""The business catalogue: what a company's requests are about, as data an ops lead edits.

A catalogue names the request types (label, description, the fields to extract with their
types, cue words per language for the local readers), the routes and the group that owns
each, the effects (label, description, adapter, the adapter's configuration and the
parameters built from a reading) and the customer attributes policy may use. It is a
section of the policy document (`PolicyDocument.catalogue`), so one version decides a run
and names everything the decision refers to; docs/business.md says why.

Closed per version: a reading that names a type, route or effect the run's version does not
list is invalid output. Open to every company: nothing here names a business.

Templates (an HTTP body, an e-mail) are Jinja2 strings rendered in Jinja2's sandbox with
undefined names refused (`TEMPLATES`): a template can read the values it is given and call
nothing else. An HTTP body is written as a YAML structure whose strings are templates, and
is sent as JSON made from the rendered structure, so no value can break out of its string.
A secret is never a value in the document: it is `{secret: VARIABLE}`, the name of an
environment variable read when the effect is delivered, one the operator declared for effects
and none of the server's own (core.egress: checked when a version is saved, with the settings
of the address an HTTP effect may reach and the header values it may send).

Typed values reach templates typed: an amount is `params.amount.value` (a decimal, as text)
and `params.amount.currency` (ISO 4217), a date is ISO. Filters write them for people, with
Babel in a language's way: `{{ params.amount | money(run.language) }}` (2.340,00 £),
`{{ params.loss_date | date(run.language) }}` (3. Dezember 2026), `{{ params.loss_date |
isodate }}`. In a reply, `money` and `date` without a language write the reply's.
"""

from __future__ import annotations

import functools
import re
from datetime import date
from decimal import Decimal, InvalidOperation
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from babel import Locale, UnknownLocaleError
from babel.dates import format_date
from babel.numbers import format_currency
from jinja2 import StrictUndefined, TemplateRuntimeError, TemplateSyntaxError, nodes
from jinja2.runtime import Context
from jinja2.sandbox import (
    UNSAFE_ASYNC_GENERATOR_ATTRIBUTES,
    UNSAFE_COROUTINE_ATTRIBUTES,
    UNSAFE_FUNCTION_ATTRIBUTES,
    UNSAFE_GENERATOR_ATTRIBUTES,
    UNSAFE_METHOD_ATTRIBUTES,
)
from jinja2.utils import pass_context
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from core.addresses import mail_address_refusal
from core.egress import header_value_refusal, secret_refusal, url_refusal
from core.limits import NOTE
from policy.sandbox import BudgetedSandbox, render

Name = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,59}$")]
Label = Annotated[str, Field(min_length=1, max_length=100)]
Description = Annotated[str, Field(max_length=NOTE)]
Cue = Annotated[str, Field(min_length=2, max_length=200)]


def _words_if_not(pattern: str, words: str) -> Any:
    """A check of a text against a pattern that says, in words, what it must look like."""
    compiled = re.compile(pattern)

    def check(value: str) -> str:
        if not compiled.fullmatch(value):
            raise PydanticCustomError("catalogue_pattern", words)
        return value

    return AfterValidator(check)


EnvName = Annotated[
    str,
    _words_if_not(
        r"[A-Z][A-Z0-9_]{0,99}",
        "must be the name of an environment variable: capital letters, digits and underscores",
    ),
]
HeaderName = Annotated[
    str, _words_if_not(r"[A-Za-z0-9-]{1,100}", "must be a header name: letters, digits and dashes")
]
TemplateText = Annotated[str, Field(max_length=20_000)]
LANGUAGE = re.compile(r"[a-z]{2}")
# Nested quantifiers (`(a+)+`) can take exponential time on a crafted message.
NESTED_QUANTIFIER = re.compile(r"\([^()]*[+*}][^()]*\)\s*[+*{]")
MAX_CUES = 2000
MAX_CUE_WEIGHT = 10

# The sandbox every template of a catalogue is parsed and rendered in, with its budget
# (policy.sandbox): render them with `render_template`.
TEMPLATES = BudgetedSandbox(undefined=StrictUndefined, autoescape=False)
# The variable that tells the filters the language a reply is written in (no template
# names it: the template checks allow only TEMPLATE_ROOTS).
LOCALE = "gatehouse_locale"
# The language the filters write in when none is given or known.
DEFAULT_LOCALE = "en"


class Money(dict[str, str]):
    """An amount as a template reads it: `.value` (a decimal, as text) and `.currency` (ISO
    4217); printed whole it is "2340.00 GBP"."""

    def __str__(self) -> str:
        return f"{self.get('value', '')} {self.get('currency', '')}".strip()


def babel_locale(language: str | None) -> Locale:
    """Babel's locale for a two-letter language (or en_GB-like tag); the default one for a
    language it does not know or none."""
    try:
        return Locale.parse((language or DEFAULT_LOCALE).replace("-", "_"))
    except (UnknownLocaleError, ValueError):
        return Locale.parse(DEFAULT_LOCALE)


def money_text(value: Any, language: str | None = None) -> str:
    """An amount ({"value", "currency"}) as the language writes it: 2.340,00 £, £2,340.00."""
    try:
        number, currency = Decimal(str(value["value"])), str(value["currency"])
    except (KeyError, TypeError, InvalidOperation):
        raise ValueError(f"{value!r} is not an amount with its currency") from None
    return str(format_currency(number, currency, locale=babel_locale(language)))


def date_text(value: Any, language: str | None = None) -> str:
    """A date (ISO or a date) as the language writes it in full: 3. Dezember 2026."""
    return str(format_date(_date(value), format="long", locale=babel_locale(language)))


def _date(value: Any) -> date:
    if isinstance(value, date):
        return value
    try:
        return date.fromisoformat(str(value))
    except ValueError:
        raise ValueError(f"{value!r} is not a date") from None


def _filter(write: Any) -> Any:
    """A template filter: in the language given, else the reply's, else the default; a value
    it cannot write is a template error (the effect is held, nothing is sent)."""

    @pass_context
    def written(context: Context, value: Any, language: str | None = None) -> str:
        try:
            return str(write(value, language or context.get(LOCALE) or DEFAULT_LOCALE))
        except ValueError as exc:
            raise TemplateRuntimeError(str(exc)) from None

    return written


def _isodate(value: Any) -> str:
    try:
        return _date(value).isoformat()
    except ValueError as exc:
        raise TemplateRuntimeError(str(exc)) from None


TEMPLATES.add_filters(
    {"money": _filter(money_text), "date": _filter(date_text), "isodate": _isodate}
)


def render_template(text: str, values: dict[str, Any], *, where: str) -> str:
    """A catalogue template rendered in the sandbox within its budget. Raises
    policy.sandbox.TemplateFailed naming `where` (`effects.open_ticket.http.body`), whatever
    went wrong."""
    return render(TEMPLATES, text, values, where)


# What a template may read: the effect's parameters, and the run and its customer.
TEMPLATE_ROOTS = frozenset({"params", "run", "customer"})
# What a parameter's value may read besides: the fields of the reading.
SOURCE_ROOTS = TEMPLATE_ROOTS | {"fields"}
# What a template knows of the run and the customer (keys of `run` and `customer`).
RUN_KEYS = frozenset(
    {"id", "event_id", "subject", "body", "category", "route", "effect", "sender", "language"}
)
CUSTOMER_KEYS = frozenset({"reference", "name", "email_domains"})


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FieldType(StrEnum):
    AMOUNT = "amount"  # a number with its currency: 1,250.00 EUR
    DATE = "date"
    REFERENCE = "reference"  # an identifier, held to the field's pattern
    EMAIL = "email"
    TEXT = "text"


def usable_pattern(pattern: str | None) -> str | None:
    """A regular expression a policy may match messages with: flat and well formed."""
    if pattern is None:
        return None
    if NESTED_QUANTIFIER.search(pattern):
        raise ValueError(f"pattern {pattern!r} repeats a repeated group: write it flat")
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"pattern {pattern!r} is not a regular expression: {exc}") from exc
    return pattern


def language_checked(language: str) -> str:
    if not LANGUAGE.fullmatch(language):
        raise ValueError(f"{language!r} is not a two-letter language code (en, de, ...)")
    return language


def cue_words(by_language: dict[str, list[str]]) -> list[str]:
    """The words of every language, each once, in lower case as the readers compare them."""
    return list(dict.fromkeys(word.lower() for words in by_language.values() for word in words))


def words_by_language(
    by_language: dict[str, list[str]], *, limit: int, what: str, words: str
) -> dict[str, list[str]]:
    """Words per two-letter language, at most `limit` of them in all."""
    for language in by_language:
        language_checked(language)
    if sum(len(listed) for listed in by_language.values()) > limit:
        raise ValueError(f"{what} at most {limit} {words}")
    return by_language


class FieldSpec(Strict):
    """A fact to extract from a request of this type."""

    type: FieldType
    required: bool = False
    label: Label | None = None
    description: Description = ""
    # For a reference: what one looks like (a regular expression, matched in full).
    pattern: Annotated[str, Field(min_length=1, max_length=200)] | None = None

    @field_validator("pattern")
    @classmethod
    def _usable(cls, pattern: str | None) -> str | None:
        return usable_pattern(pattern)

    @model_validator(mode="after")
    def _pattern_for_references(self) -> FieldSpec:
        if self.pattern is not None and self.type != FieldType.REFERENCE:
            raise ValueError("only a reference field has a pattern")
        return self


class RequestTypeSpec(Strict):
    """One kind of request: what the model prompt and the console call it and explain, what
    to extract from it, and the words that point to it for the local readers."""

    label: Label
    description: Description
    fields: dict[Name, FieldSpec] = Field(default_factory=dict, max_length=50)
    # Per language, the words that point to this type: each counts `cue_weight`...
    cues: dict[str, list[Cue]] = Field(default_factory=dict)
    # ...except these, which only set the scene (a locked-out user mentions MFA too): each
    # counts one, whatever the weight.
    scene_cues: dict[str, list[Cue]] = Field(default_factory=dict)
    # A type whose miss costs more than a person's time (a compromised account) counts more.
    cue_weight: Annotated[int, Field(ge=1, le=MAX_CUE_WEIGHT)] = 1
    # What an e-mail of this type wants when its words ask for no effect (a mail states no
    # action of its own); with `default_effect_always`, whatever else its words ask.
    default_effect: Name | None = None
    default_effect_always: bool = False

    @field_validator("cues", "scene_cues")
    @classmethod
    def _languages(cls, cues: dict[str, list[str]]) -> dict[str, list[str]]:
        return words_by_language(cues, limit=MAX_CUES, what="a request type has", words="cue words")

    @model_validator(mode="after")
    def _cues_counted_one_way(self) -> RequestTypeSpec:
        both = sorted(set(cue_words(self.cues)) & set(cue_words(self.scene_cues)))
        if both:
            raise ValueError(
                f"{', '.join(both)}: listed as a cue and as a scene cue; keep each word in one"
            )
        if self.default_effect_always and self.default_effect is None:
            raise ValueError("default_effect_always needs a default_effect")
        return self


class RouteSpec(Strict):
    """Where a request of a type goes, and the group of people who own that work."""

    label: Label
    description: Description = ""
    group: Annotated[str, Field(min_length=1, max_length=150)]


class Secret(Strict):
    """A secret, by the name of the environment variable that holds it."""

    secret: EnvName


def _new_version(info: ValidationInfo) -> bool:
    """Whether the document is about to be stored (policy.schemas.NEW_VERSION): what the
    settings allow is checked then; a version stored before is read back as it was (and its
    deliveries are checked again, automation.effects.http)."""
    return isinstance(info.context, dict) and bool(info.context.get("new_version"))


def _declared(secret: Secret, info: ValidationInfo) -> Secret:
    if _new_version(info):
        refusal = secret_refusal(secret.secret)
        if refusal is not None:
            raise PydanticCustomError("undeclared_secret", refusal)
    return secret


# Template syntax in a header value: headers are sent as written, never rendered.
TEMPLATE_SYNTAX = re.compile(r"\{[{%#]")


def _sendable(value: str | Secret, info: ValidationInfo) -> str | Secret:
    if isinstance(value, Secret):
        return _declared(value, info)
    if not _new_version(info):
        return value
    refusal = header_value_refusal(value)
    if refusal is None and TEMPLATE_SYNTAX.search(value):
        refusal = (
            "a header value is sent as written, not rendered as a template: write the value "
            "out, or send what varies in the body"
        )
    if refusal is not None:
        raise PydanticCustomError("header_value", refusal)
    return value


# A secret an effect sends: one the operator declared for effects (core.egress).
EffectSecret = Annotated[Secret, AfterValidator(_declared)]
HeaderValue = Annotated[str | Secret, AfterValidator(_sendable)]

# Header names whose value is a credential: given as a value, it would sit in every version
# and every diff. A catalogue names the variable instead (`{secret: HELPDESK_TOKEN}`).
CREDENTIAL_HEADER = re.compile(r"authorization|token|secret|api[-_]?key|password|cookie", re.I)
USERINFO = re.compile(r"^[a-z][a-z0-9+.-]*://[^/@]*@", re.I)


class RecordConfig(Strict):
    """A task row kept in Gatehouse, for a group of people to work."""

    group: Annotated[str, Field(min_length=1, max_length=150)] | None = None


class HttpConfig(Strict):
    """A request to another system: its address, headers, body and delivery budget.

    Every request carries the effect's key in the idempotency header and, with `signing`,
    an HMAC-SHA256 signature of a timestamp, a nonce new at every attempt and the body
    (`X-Gatehouse-Signature`); a receiver that deduplicates by key may get it again after an
    attempt whose outcome is unknown, and answers it as the first time."""

    method: Literal["POST", "PUT", "PATCH"] = "POST"
    url: Annotated[
        str,
        Field(max_length=2000),
        _words_if_not(r"https?://\S+", "must be an address starting with https:// or http://"),
    ]
    # Sent as written (no templates), a credential by the name of its variable.
    headers: dict[HeaderName, HeaderValue] = Field(default_factory=dict, max_length=30)
    # The JSON body, as a structure whose strings are templates.
    body: Any = None
    idempotency_header: HeaderName = "Idempotency-Key"
    signing: EffectSecret | None = None
    connect_timeout: Annotated[float, Field(gt=0, le=60)] = 3.0
    read_timeout: Annotated[float, Field(gt=0, le=300)] = 10.0
    max_attempts: Annotated[int, Field(ge=1, le=50)] = 6
    deadline_seconds: Annotated[float, Field(gt=0, le=7 * 24 * 3600)] = 3600.0
    honours_idempotency_keys: bool = True

    @field_validator("url")
    @classmethod
    def _no_credentials_in_url(cls, url: str, info: ValidationInfo) -> str:
        if USERINFO.match(url):
            raise ValueError(
                "the address carries a user name or password: name a secret in a header instead"
            )
        if _new_version(info):
            refusal = url_refusal(url)
            if refusal is not None:
                raise PydanticCustomError("effect_address", refusal)
        return url

    @field_validator("headers")
    @classmethod
    def _credentials_by_name(cls, headers: dict[str, str | Secret]) -> dict[str, str | Secret]:
        for name, value in headers.items():
            if isinstance(value, str) and CREDENTIAL_HEADER.search(name):
                raise ValueError(
                    f"header {name} carries a secret given as a value: give the name of an "
                    f"environment variable instead ({name}: {{secret: VARIABLE_NAME}})"
                )
        return headers


class MessageTemplate(Strict):
    subject: Annotated[TemplateText, Field(min_length=1, max_length=1000)]
    body: Annotated[TemplateText, Field(min_length=1)]


def _address(value: str) -> str:
    refusal = mail_address_refusal(value)
    if refusal is not None:
        raise PydanticCustomError("mail_address", refusal)
    return value


# One e-mail address, with a display name or not, on one line (core.addresses).
MailAddress = Annotated[str, AfterValidator(_address)]


class EmailReplyConfig(Strict):
    """A reply to the sender, in the thread, over the SMTP server of the settings. One
    template per language; `default_language` when the request's is not among them.
    `from_address` and `reply_to` win over the intake channel's (and the server's)."""

    templates: dict[str, MessageTemplate] = Field(min_length=1)
    default_language: str = "en"
    from_address: MailAddress | None = None
    reply_to: MailAddress | None = None

    @model_validator(mode="after")
    def _default_template(self) -> EmailReplyConfig:
        for language in self.templates:
            language_checked(language)
        if self.default_language not in self.templates:
            raise ValueError(f"no template for the default language {self.default_language!r}")
        return self


class ParameterSpec(Strict):
    """One value the effect is given, made from the reading and the run (`value`, a
    template), and checked before anything is written to the outbox."""

    value: Annotated[str, Field(min_length=1, max_length=2000)]
    type: FieldType = FieldType.TEXT
    required: bool = True
    pattern: Annotated[str, Field(min_length=1, max_length=200)] | None = None

    @field_validator("pattern")
    @classmethod
    def _usable(cls, pattern: str | None) -> str | None:
        return usable_pattern(pattern)


class EffectSpec(Strict):
    label: Label
    description: Description
    adapter: Literal["record", "http", "email_reply"]
    record: RecordConfig | None = None
    http: HttpConfig | None = None
    email_reply: EmailReplyConfig | None = None
    parameters: dict[Name, ParameterSpec] = Field(default_factory=dict, max_length=50)
    # Per language, the words of a request that ask for this effect (for the local readers).
    cues: dict[str, list[Cue]] = Field(default_factory=dict)
    # When a request's words ask for two effects equally often, the higher priority wins
    # (between equals, the effect listed first).
    cue_priority: Annotated[int, Field(ge=0, le=100)] = 0

    @field_validator("cues")
    @classmethod
    def _languages(cls, cues: dict[str, list[str]]) -> dict[str, list[str]]:
        return words_by_language(cues, limit=MAX_CUES, what="an effect has", words="cue words")

    @model_validator(mode="after")
    def _one_configuration(self) -> EffectSpec:
        given = [a for a in ("record", "http", "email_reply") if getattr(self, a) is not None]
        if self.adapter in ("http", "email_reply") and given != [self.adapter]:
            raise ValueError(f"an {self.adapter} effect needs its `{self.adapter}:` settings only")
        if self.adapter == "record" and given not in ([], ["record"]):
            raise ValueError("a record effect takes `record:` settings only")
        return self

    def templates(self) -> list[tuple[str, str]]:
        """(where, template) for each template the effect renders."""
        found: list[tuple[str, str]] = []
        if self.http is not None:
            found += _strings(self.http.body, "http.body")
        if self.email_reply is not None:
            for language, message in self.email_reply.templates.items():
                where = f"email_reply.templates.{language}"
                found += [(f"{where}.subject", message.subject), (f"{where}.body", message.body)]
        return found


class CustomerAttribute(Strict):
    """Something known of a customer that policy may use (the tier of the account)."""

    label: Label
    description: Description = ""
    values: list[Name] = Field(min_length=1, max_length=50)


# Characters of a customer reference pattern: a reference is an identifier, not a grammar.
MAX_REFERENCE_PATTERN = 200


class CustomerMatching(Strict):
    """How a request's customer is found in the registry: a reference number in its text
    (matched by `reference_pattern`; without one, the server's GATEHOUSE_CUSTOMER_REFERENCE_
    PATTERN), else the sender's e-mail domain when `match_sender_domain`."""

    reference_pattern: (
        Annotated[str, Field(min_length=1, max_length=MAX_REFERENCE_PATTERN)] | None
    ) = None
    match_sender_domain: bool = True

    @field_validator("reference_pattern")
    @classmethod
    def _usable(cls, pattern: str | None) -> str | None:
        usable_pattern(pattern)
        # A pattern that matches nothing at all would find a "reference" everywhere.
        if pattern is not None and re.search(pattern, "") is not None:
            raise ValueError(f"pattern {pattern!r} matches an empty text: say what a reference has")
        return pattern


class Catalogue(Strict):
    request_types: dict[Name, RequestTypeSpec] = Field(min_length=1, max_length=100)
    routes: dict[Name, RouteSpec] = Field(min_length=1, max_length=100)
    effects: dict[Name, EffectSpec] = Field(min_length=1, max_length=100)
    customer_attributes: dict[Name, CustomerAttribute] = Field(default_factory=dict)
    # None: the server's setting decides, as it did before a catalogue could say.
    customer_matching: CustomerMatching | None = None

    @model_validator(mode="after")
    def _templates_name_what_exists(self) -> Catalogue:
        known = {
            "fields": {name for t in self.request_types.values() for name in t.fields},
            "run": set(RUN_KEYS),
            "customer": set(CUSTOMER_KEYS) | set(self.customer_attributes),
        }
        for effect_name, effect in self.effects.items():
            params = set(effect.parameters)
            where = f"effects.{effect_name}"
            for name, parameter in effect.parameters.items():
                own = {**known, "params": params - {name}}
                _check_template(
                    parameter.value, f"{where}.parameters.{name}.value", SOURCE_ROOTS, own
                )
            for place, text in effect.templates():
                _check_template(
                    text, f"{where}.{place}", TEMPLATE_ROOTS, {**known, "params": params}
                )
        return self

    @model_validator(mode="after")
    def _default_effects_exist(self) -> Catalogue:
        for name, spec in self.request_types.items():
            if spec.default_effect is not None and spec.default_effect not in self.effects:
                raise ValueError(
                    f"request_types.{name}.default_effect: {spec.default_effect!r} is no effect "
                    f"of the catalogue (it has {', '.join(self.effects)})"
                )
        return self

    @property
    def matching(self) -> CustomerMatching:
        """How customers are matched: the catalogue's say, else the defaults."""
        return self.customer_matching or CustomerMatching()

    def tier_values(self) -> list[str]:
        tier = self.customer_attributes.get("tier")
        return list(tier.values) if tier is not None else []


# The catalogue of a policy version that has none of its own (PolicyDocument.business).
REFERENCE_FILE = Path(__file__).resolve().parent / "defaults" / "catalogues" / "reference-1.yaml"


@functools.cache
def reference_catalogue() -> Catalogue:
    return Catalogue.model_validate(yaml.safe_load(REFERENCE_FILE.read_text(encoding="utf-8")))


class TemplateProblem(ValueError):
    """A template that cannot be parsed or names something that does not exist."""


def _strings(value: Any, where: str) -> list[tuple[str, str]]:
    """Every string in a JSON-like structure, with its path."""
    if isinstance(value, str):
        return [(where, value)]
    if isinstance(value, dict):
        return [s for key, item in value.items() for s in _strings(item, f"{where}.{key}")]
    if isinstance(value, list):
        return [s for index, item in enumerate(value) for s in _strings(item, f"{where}.{index}")]
    return []


def template_names(text: str) -> list[tuple[str, str | None]]:
    """(root, key) for each name a template reads: `params.amount` is ("params", "amount"),
    a bare `run` is ("run", None). Raises TemplateSyntaxError."""
    return _names(TEMPLATES.parse(text))


def _names(tree: nodes.Template) -> list[tuple[str, str | None]]:
    found: list[tuple[str, str | None]] = []
    attributes: set[int] = set()
    for node in tree.find_all((nodes.Getattr, nodes.Getitem)):
        owner = node.node  # type: ignore[attr-defined]  # both node types have it
        if isinstance(owner, nodes.Name):
            if isinstance(node, nodes.Getattr):
                key: str | None = node.attr
            else:
                key = _constant(node.arg)  # type: ignore[attr-defined]
            found.append((owner.name, key))
            attributes.add(id(owner))
    # Names the template binds itself (a loop's variable, a `set`) are its own, not inputs.
    own = {n.name for n in tree.find_all(nodes.Name) if n.ctx in ("store", "param")} | {"loop"}
    for node in tree.find_all(nodes.Name):
        if node.ctx == "load" and id(node) not in attributes and node.name not in own:
            found.append((node.name, None))
    return [(root, key) for root, key in found if root not in own]


def _constant(node: nodes.Node) -> str | None:
    return str(node.value) if isinstance(node, nodes.Const) else None


# Filters whose first arguments name what they apply: for each position, a filter's or a
# test's name, or an attribute's ("attribute"). They are checked as if written in the template.
NAMING_FILTERS: dict[str, tuple[str, ...]] = {
    "map": ("filter",),
    "select": ("test",),
    "reject": ("test",),
    "selectattr": ("attribute", "test"),
    "rejectattr": ("attribute", "test"),
}
# Filters a template may not use: `attr` reads any attribute by name, past what a template
# is given (the sandbox refuses a private one only when the template is rendered).
REFUSED_FILTERS = frozenset({"attr"})
# What the sandbox refuses to read besides names that start with an underscore.
UNSAFE_ATTRIBUTES = (
    UNSAFE_FUNCTION_ATTRIBUTES
    | UNSAFE_METHOD_ATTRIBUTES
    | UNSAFE_GENERATOR_ATTRIBUTES
    | UNSAFE_COROUTINE_ATTRIBUTES
    | UNSAFE_ASYNC_GENERATOR_ATTRIBUTES
)


def _unsafe_name(name: str) -> bool:
    return any(part.startswith("_") or part in UNSAFE_ATTRIBUTES for part in name.split("."))


def template_refusal(tree: nodes.Template) -> str | None:
    """Why the sandbox would refuse this template when it is rendered, found in its syntax
    tree before it is stored (None when nothing is): a private or unsafe attribute, a filter
    or test the environment does not have or a template may not use, another template, a
    loop that calls itself."""
    others = (nodes.Include, nodes.Import, nodes.FromImport, nodes.Extends)
    if tree.find(others) is not None:  # type: ignore[arg-type]  # find takes a tuple too
        return "a template cannot include, import or extend another template"
    if any(loop.recursive for loop in tree.find_all(nodes.For)):
        return "a loop cannot be recursive: write the levels out"
    for checked in (
        _read_refusal(tree),
        next(filter(None, map(_filter_refusal, tree.find_all(nodes.Filter))), None),
        _test_refusal(tree),
    ):
        if checked is not None:
            return checked
    return None


def _read_refusal(tree: nodes.Template) -> str | None:
    """A private or unsafe attribute or key, or a key computed while rendering."""
    for read in tree.find_all(nodes.Getattr):
        if _unsafe_name(read.attr):
            return f"the template reads {read.attr!r}, which templates may not read"
    for item in tree.find_all(nodes.Getitem):
        key = item.arg
        if isinstance(key, nodes.Slice):
            continue  # a part of a list or a text: `run.subject[:40]`
        if not isinstance(key, nodes.Const):
            return "the template reads a value by a computed key: write the key out"
        if isinstance(key.value, str) and _unsafe_name(key.value):
            return f"the template reads {key.value!r}, which templates may not read"
    return None


def _test_refusal(tree: nodes.Template) -> str | None:
    for test in tree.find_all(nodes.Test):
        if test.name not in TEMPLATES.tests:
            return f"the template uses the test {test.name!r}, which templates do not have"
    return None


def _filter_refusal(node: nodes.Filter) -> str | None:
    name = node.name
    if name not in TEMPLATES.filters:
        return f"the template uses the filter {name!r}, which templates do not have"
    if name in REFUSED_FILTERS:
        return f"the template uses the filter {name!r}, which templates may not use"
    if node.dyn_args is not None or node.dyn_kwargs is not None:
        return f"the filter {name!r} is given its arguments computed, not written out"
    named = list(zip(NAMING_FILTERS.get(name, ()), node.args, strict=False))
    named += [("attribute", kw.value) for kw in node.kwargs if kw.key == "attribute"]
    for kind, argument in named:
        if not isinstance(argument, nodes.Const) or not isinstance(argument.value, str):
            return f"the filter {name!r} is given a name computed, not written out"
        if not _names_what_exists(kind, argument.value):
            return f"the filter {name!r} is given {argument.value!r}, which templates may not use"
    return None


def _names_what_exists(kind: str, value: str) -> bool:
    if kind == "filter":
        return value in TEMPLATES.filters and value not in REFUSED_FILTERS
    if kind == "test":
        return value in TEMPLATES.tests
    return not _unsafe_name(value)


def _check_template(
    text: str, where: str, roots: frozenset[str], known: dict[str, set[str]]
) -> None:
    try:
        tree = TEMPLATES.parse(text)
    except TemplateSyntaxError as exc:
        raise TemplateProblem(f"{where}: the template cannot be read: {exc.message}") from exc
    refusal = template_refusal(tree)
    if refusal is not None:
        raise TemplateProblem(f"{where}: {refusal}")
    names = _names(tree)
    for root, key in names:
        if root not in roots:
            allowed = ", ".join(sorted(roots))
            raise TemplateProblem(f"{where}: the template names {root!r}; it may use {allowed}")
        if key is not None and root in known and key not in known[root]:
            what = {"fields": "field", "params": "parameter"}.get(root, f"{root} value")
            raise TemplateProblem(f"{where}: the template names an unknown {what} {key!r}")


def money_field(business: Catalogue, effect: str) -> str | None:
    """The reading's field that is the effect's money: the one its first parameter of type
    `amount` reads (`{{ fields.<name> }}`); None when the effect carries no money (or its
    amount parameter reads no field, or the effect is unknown)."""
    spec = business.effects.get(effect)
    for parameter in spec.parameters.values() if spec is not None else []:
        if parameter.type != FieldType.AMOUNT:
            continue
        try:
            names = template_names(parameter.value)
        except TemplateSyntaxError:
            return None
        fields = [key for root, key in names if root == "fields" and key is not None]
        return fields[0] if fields else None
    return None
