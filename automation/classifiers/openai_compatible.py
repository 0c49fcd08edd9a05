"""Any chat-completions server (hosted, vLLM, Ollama, LM Studio, llama.cpp) reached through a
base URL.

It asks for structured output shaped by ClassifierDecision and hands back what the model
wrote, parsed when it is JSON and raw when it is not: the pipeline validates it, so invalid
output is held for a person with the raw text kept. The SDK never retries: the workflow owns
retries (its attempt counter, backoff and hold), and a hidden retry would spend its deadline.

Servers speak different structured-output dialects; GATEHOUSE_OPENAI_OUTPUT names the one
to use (`OUTPUTS`), and the classifier version records it. A server that refuses the
request itself (400 or 422, or an error that names `response_format`) raises
ClassifierRefused: the same request cannot succeed later, so the run is held at once, with
a reason that names the setting, instead of being retried.

The system prompt follows the run's catalogue. Every prompt file (GATEHOUSE_PROMPT_FILE) is
a Jinja2 template of plain text after its first line, `version: <prompt version>`, which is
the prompt version stamped on runs. It is rendered for the run's catalogue and the route its
policy version gives each request type (`prompt_context` says what a template reads), so
the model is told the names that the schema of its answer is closed to. A file with no
template syntax renders to itself: classify-1, which names the reference business, still
loads as it always did. Rendering is plain text (no HTML escaping) and refuses an undefined
name; names and labels go in as data, never as template text. A rendered prompt is cached
by the prompt and the catalogue's canonical JSON, since every call asks for one.
"""

from __future__ import annotations

import email.utils
import hashlib
import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from functools import cache, lru_cache
from pathlib import Path
from typing import Any

import openai
from jinja2 import Environment, StrictUndefined, Template, TemplateError
from openai.types.shared_params import ResponseFormatJSONSchema

from automation.classifiers.base import (
    Answer,
    ClassifierInput,
    ClassifierRateLimited,
    ClassifierRefused,
    ClassifierTimeout,
    ClassifierUnavailable,
    Usage,
)
from automation.conf import setting
from automation.schemas import decision_contract
from policy.catalogue import Catalogue, FieldType, reference_catalogue
from policy.schemas import canonical_json

# Enough for a long e-mail with attachment text; a bigger event is cut, never refused.
MAX_EVENT_CHARS = 24_000
PLACEHOLDER_API_KEY = "not-needed"  # local servers ignore the key, the SDK insists on one
VERSION_PREFIX = "version:"


# Prompts are text for a model, not HTML: escaping would garble `&` and quotes. The files
# are the deployment's own; the catalogue's words only ever fill in their values.
PROMPTS = Environment(
    autoescape=False,  # noqa: S701 - plain text for a model, never a page
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
# A name or label as one JSON string: quotes and line breaks in it cannot end it.
PROMPTS.filters["quoted"] = lambda value: json.dumps(str(value), ensure_ascii=False)
# A description on one line, so it cannot start an item of its own in a list.
PROMPTS.filters["oneline"] = lambda value: " ".join(str(value).split())


@dataclass(frozen=True)
class Prompt:
    version: str
    text: str
    path: str = ""


@cache
def _read_prompt(path: str) -> Prompt:
    header, _, text = Path(path).read_text(encoding="utf-8").partition("\n")
    if not header.startswith(VERSION_PREFIX) or not header[len(VERSION_PREFIX) :].strip():
        raise ValueError(f"{path} must begin with a line 'version: <prompt version>'")
    prompt = Prompt(version=header[len(VERSION_PREFIX) :].strip(), text=text.strip(), path=path)
    _template(prompt)  # a template that cannot be read is a broken setting: say so at once
    return prompt


@cache
def _template(prompt: Prompt) -> Template:
    try:
        return PROMPTS.from_string(prompt.text)
    except TemplateError as exc:
        raise ValueError(f"{prompt.path} is not a prompt template: {exc}") from exc


def load_prompt() -> Prompt:
    """The configured system prompt and the version its first line names."""
    return _read_prompt(str(setting("PROMPT_FILE")))


# How the answer's shape is asked for, by what servers actually accept:
# - json_schema: OpenAI's structured outputs (OpenAI, vLLM, Ollama, LM Studio);
# - json_object: JSON mode with the schema beside it (llama.cpp's and llama-cpp-python's
#   servers, which refuse json_schema);
# - text: no response_format at all; the schema is in the prompt and the first JSON object
#   in the answer is taken (any server, any model).
OUTPUTS = ("json_schema", "json_object", "text")
DEFAULT_OUTPUT = "json_schema"


def output_dialect() -> str:
    dialect = str(setting("OPENAI_OUTPUT") or DEFAULT_OUTPUT)
    if dialect not in OUTPUTS:
        raise ValueError(f"GATEHOUSE_OPENAI_OUTPUT must be one of {', '.join(OUTPUTS)}")
    return dialect


def response_format(
    dialect: str = DEFAULT_OUTPUT, business: Catalogue | None = None
) -> dict[str, Any] | None:
    """The answer's shape, closed to what the run's catalogue lists (the reference one when
    none is given)."""
    schema = _decision_schema(business)
    if dialect == "json_object":
        return {"type": "json_object", "schema": schema}
    if dialect == "text":
        return None
    # Not strict: strict mode cannot express the open `fields` dict. The pipeline validates.
    json_schema: ResponseFormatJSONSchema = {
        "type": "json_schema",
        "json_schema": {"name": "classifier_decision", "schema": schema, "strict": False},
    }
    return dict(json_schema)


def _decision_schema(business: Catalogue | None) -> dict[str, Any]:
    return grammar_schema(business or reference_catalogue())


def grammar_schema(business: Catalogue) -> dict[str, Any]:
    """The decision's JSON Schema as a server's grammar can enforce it while the model writes.

    The contract's `fields` is an open map of lowercase names (`patternProperties`), which
    grammar converters such as llama.cpp's ignore, leaving any object: a small model then
    writes words of the prompt there. Here `fields` names exactly the fields the catalogue's
    request types have, each optional, and nothing else. The categories, routes and effects
    are closed enums and every number keeps its bounds (a grammar that cannot bound a number
    still leaves it to the pipeline, which validates every answer against the contract).
    """
    names = sorted({name for kind in business.request_types.values() for name in kind.fields})
    key = (tuple(business.request_types), tuple(business.routes), tuple(business.effects), *names)
    found = _GRAMMAR_SCHEMAS.get(key)
    if found is None:
        if len(_GRAMMAR_SCHEMAS) >= 64:
            _GRAMMAR_SCHEMAS.clear()
        found = _GRAMMAR_SCHEMAS[key] = _grammar_schema(business, names)
    return found


# Made once per catalogue shape, by its names (a schema takes a millisecond to make, and every
# call sends one); shared, so never changed.
_GRAMMAR_SCHEMAS: dict[tuple[Any, ...], dict[str, Any]] = {}


def _grammar_schema(business: Catalogue, names: list[str]) -> dict[str, Any]:
    schema = decision_contract(business).model_json_schema()
    field = {"$ref": "#/$defs/ExtractedField"}
    schema["properties"]["fields"] = {
        "title": "Fields",
        "type": "object",
        "properties": {name: field for name in names},
        "additionalProperties": False,
    }
    return schema


@dataclass(frozen=True)
class _Business:
    """A catalogue and its version's routes, equal and hashed by their canonical JSON: what a
    rendered prompt is cached under (a catalogue holds dicts, so is not hashable itself)."""

    key: str
    catalogue: Catalogue = field(compare=False)
    routes: Mapping[str, str] = field(compare=False)

    @classmethod
    def of(cls, catalogue: Catalogue, routes: Mapping[str, str]) -> _Business:
        key = canonical_json({"catalogue": catalogue.model_dump(mode="json"), "routes": routes})
        return cls(key, catalogue, dict(routes))


def prompt_context(business: Catalogue, routes: Mapping[str, str]) -> dict[str, Any]:
    """What a prompt template reads: `catalogue`; `routes`, the route policy gives each
    request type (empty when the version gives none); `sent_to`, the request types policy
    sends to each route, in catalogue order; `field_types`, the field types the catalogue's
    request types use."""
    sent_to: dict[str, list[str]] = {name: [] for name in business.routes}
    for name in business.request_types:
        if name in routes:
            sent_to.setdefault(routes[name], []).append(name)
    used = {spec.type for kind in business.request_types.values() for spec in kind.fields.values()}
    return {
        "catalogue": business,
        "routes": dict(routes),
        "sent_to": sent_to,
        "field_types": [kind.value for kind in FieldType if kind in used],
    }


def system_prompt(
    dialect: str = DEFAULT_OUTPUT,
    business: Catalogue | None = None,
    routes: Mapping[str, str] | None = None,
) -> str:
    """The prompt file rendered for the catalogue (the reference one when none is given) and
    the version's routes; without json_schema, the schema the answer must follow too.
    Raises ValueError when the template cannot be rendered for this catalogue."""
    chosen = _business_of(business or reference_catalogue(), routes or {})
    return _system_prompt(load_prompt(), dialect, chosen)


def _business_of(catalogue: Catalogue, routes: Mapping[str, str]) -> _Business:
    """_Business.of, remembered for the very objects in hand: a stored version's catalogue
    and routes are read once per process (PolicyVersion.parsed) and never changed, and
    every call of every run asks for the same ones, whose canonical JSON takes a
    millisecond to write. The objects are kept with it, so their identities stay theirs."""
    key = (id(catalogue), id(routes))
    found = _BUSINESSES.get(key)
    if found is not None and found[0] is catalogue and found[1] is routes:
        return found[2]
    made = _Business.of(catalogue, routes)
    if len(_BUSINESSES) >= 64:
        _BUSINESSES.clear()
    _BUSINESSES[key] = (catalogue, routes, made)
    return made


_BUSINESSES: dict[tuple[int, int], tuple[Catalogue, Mapping[str, str], _Business]] = {}


@lru_cache(maxsize=64)
def _system_prompt(prompt: Prompt, dialect: str, business: _Business) -> str:
    try:
        text = _template(prompt).render(prompt_context(business.catalogue, business.routes))
    except TemplateError as exc:
        raise ValueError(f"{prompt.path} cannot be written for this catalogue: {exc}") from exc
    text = text.strip()
    if dialect == "json_schema":
        return text
    schema = json.dumps(_decision_schema(business.catalogue), sort_keys=True)
    return f"{text}\n\nAnswer with one JSON object that follows this JSON Schema:\n{schema}"


def event_message(event: ClassifierInput) -> str:
    text = canonical_json(event.normalized)
    if len(text) <= MAX_EVENT_CHARS:
        return text
    return text[:MAX_EVENT_CHARS] + " [truncated]"


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # NaN and Infinity cannot be stored as JSON


def parse_output(content: str, *, embedded: bool = False) -> Any:
    """The parsed JSON when the model wrote JSON, else its text unchanged. With `embedded`
    (the text dialect), the first JSON object in the text, e.g. inside a ```json fence."""
    try:
        return json.loads(content, parse_constant=_reject_constant)
    except ValueError:
        pass
    if embedded:
        found = _first_object(content)
        if found is not None:
            return found
    return content


def _first_object(text: str) -> dict[str, Any] | None:
    decoder = json.JSONDecoder(parse_constant=_reject_constant)
    start = text.find("{")
    while start != -1:
        try:
            value, _ = decoder.raw_decode(text, start)
        except ValueError:
            start = text.find("{", start + 1)
            continue
        if isinstance(value, dict):
            return value
        start = text.find("{", start + 1)
    return None


class OpenAICompatibleClassifier:
    name = "openai-compatible"

    def __init__(self) -> None:
        self.model = str(setting("OPENAI_MODEL"))
        self.base_url = str(setting("OPENAI_BASE_URL"))

    @property
    def version(self) -> str:
        """`openai-compatible:<model>`, then ` (<dialect>)` unless json_schema; a model name
        too long for the version columns (100) is cut and ends in a hash of the whole name,
        so two long names never share one."""
        dialect = output_dialect()
        suffix = "" if dialect == DEFAULT_OUTPUT else f" ({dialect})"
        version = f"{self.name}:{self.model}"
        if len(version) + len(suffix) > 100:
            digest = hashlib.sha256(self.model.encode()).hexdigest()[:12]
            version = f"{version[: 87 - len(suffix)]}#{digest}"
        return version + suffix

    @property
    def prompt_version(self) -> str:
        return load_prompt().version

    @property
    def server(self) -> str:
        """The model server its calls are counted against (automation.classifiers.servers)."""
        return self.base_url

    def estimated_tokens(self, event: ClassifierInput) -> int:
        """What a call may take under a tokens-per-minute limit: the prompt and event at
        about four characters a token, and the most the answer may be."""
        dialect = output_dialect()
        try:
            prompt = system_prompt(dialect, event.business, event.routes)
        except ValueError:
            prompt = ""
        return (len(prompt) + len(event_message(event))) // 4 + int(setting("OPENAI_MAX_TOKENS"))

    def classify(self, event: ClassifierInput, attempt: int, *, deadline: float) -> Any:
        dialect = output_dialect()
        shape = response_format(dialect, event.business)
        prompt = self._prompt(event, dialect)
        limit = int(setting("OPENAI_MAX_TOKENS"))
        client = _client(self.base_url, setting("OPENAI_API_KEY") or PLACEHOLDER_API_KEY)
        try:
            completion = client.chat.completions.create(
                model=self.model,
                messages=[
                    {"role": "system", "content": prompt},
                    {"role": "user", "content": event_message(event)},
                ],
                temperature=0,
                max_tokens=limit,
                timeout=deadline,
                # As sent, untyped: the SDK's types know no `schema` beside json_object.
                extra_body={"response_format": shape} if shape else None,
            )
        except openai.APITimeoutError as exc:  # before its parent, APIConnectionError
            raise ClassifierTimeout(f"no answer from {self.base_url} within {deadline:g}s") from exc
        except openai.RateLimitError as exc:
            raise ClassifierRateLimited(self._status_message(exc), retry_after(exc)) from exc
        except openai.APIStatusError as exc:
            if _refused_as_malformed(exc):
                raise ClassifierRefused(self._refusal_message(exc, dialect)) from exc
            raise ClassifierUnavailable(self._status_message(exc)) from exc
        except openai.APIConnectionError as exc:
            raise ClassifierUnavailable(f"cannot reach {self.base_url}: {exc}") from exc
        except (openai.OpenAIError, ValueError) as exc:  # e.g. a 200 whose body is not JSON
            raise ClassifierUnavailable(f"unusable answer from {self.base_url}: {exc}") from exc
        output = self._output(completion, embedded=dialect == "text")
        choice = completion.choices[0]
        cut = limit if getattr(choice, "finish_reason", None) == "length" else None
        return Answer(output, self._usage(completion), cut_at=cut)

    def _usage(self, completion: Any) -> Usage:
        """The tokens the server reported, and their price by the settings' table."""
        reported = getattr(completion, "usage", None)
        prompt = _count(getattr(reported, "prompt_tokens", None))
        written = _count(getattr(reported, "completion_tokens", None))
        price = prices().get(self.model)
        cost = None
        if price is not None and prompt is not None and written is not None:
            cost = (price[0] * prompt + price[1] * written) / MILLION
        return Usage(prompt, written, cost)

    @staticmethod
    def _prompt(event: ClassifierInput, dialect: str) -> str:
        """The prompt for the run's catalogue; one that cannot be written is a configuration
        for a person to fix, not a failure that a retry would get past."""
        try:
            return system_prompt(dialect, event.business, event.routes)
        except ValueError as exc:
            raise ClassifierRefused(str(exc)) from exc

    def _refusal_message(self, exc: openai.APIStatusError, dialect: str) -> str:
        others = ", ".join(d for d in OUTPUTS if d != dialect)
        return (
            f"{self.base_url} refused the request with {exc.status_code}, so it was not "
            f"retried: {str(exc.message)[:200]}. If the server does not accept "
            f"{dialect} output, set GATEHOUSE_OPENAI_OUTPUT to one of: {others}"
        )

    def _status_message(self, exc: openai.APIStatusError) -> str:
        status, detail = exc.status_code, str(exc.message)[:200]
        if status == 429 or status >= 500:
            return f"{self.base_url} answered {status}, try again later: {detail}"
        # Bad request, auth, unknown model: a misconfiguration that a person must fix.
        return (
            f"{self.base_url} refused the request with {status} (check model, key, URL): {detail}"
        )

    def _output(self, completion: Any, *, embedded: bool = False) -> Any:
        """What the model wrote; refusals and empty answers go on to be held as invalid."""
        choices = getattr(completion, "choices", None)
        if not choices:  # the server answered, but not with a completion: not the model's fault
            raise ClassifierUnavailable(f"{self.base_url} answered without a completion")
        message = getattr(choices[0], "message", None)
        content = getattr(message, "content", None)
        if isinstance(content, str) and content:
            return parse_output(content, embedded=embedded)
        refusal = getattr(message, "refusal", None)
        if refusal:
            return {"refusal": refusal}
        return content or ""  # not text (a lenient server): kept as it came


MILLION = Decimal(1_000_000)


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def prices() -> dict[str, tuple[Decimal, Decimal]]:
    """GATEHOUSE_OPENAI_PRICES: per model, the price of a million prompt and completion
    tokens ('gpt-4o-mini=0.15/0.60'). A model written otherwise has no price."""
    table: dict[str, tuple[Decimal, Decimal]] = {}
    for model, written in setting("OPENAI_PRICES").items():
        prompt, _, completion = written.partition("/")
        try:
            table[model] = (Decimal(prompt), Decimal(completion))
        except InvalidOperation:
            continue
    return table


# One client per server and key in each process, so calls reuse its connections (keep-alive,
# one TLS handshake). Made lazily: a worker forked from the cluster makes its own.
_CLIENTS: dict[tuple[str, str], openai.OpenAI] = {}
_CLIENTS_LOCK = threading.Lock()


def _client(base_url: str, api_key: str) -> openai.OpenAI:
    key = (base_url, api_key)
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            # max_retries=0: one HTTP request per attempt; the workflow's backoff does the rest.
            client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
            _CLIENTS[key] = client
        return client


def retry_after(exc: openai.APIStatusError) -> float | None:
    """The pause a 429 asks for, in seconds: `retry-after-ms` (OpenAI's), or `Retry-After` as
    seconds or an HTTP date; None when it names none."""
    headers = exc.response.headers
    try:
        if "retry-after-ms" in headers:
            return max(float(headers["retry-after-ms"]) / 1000, 0.0)
        written = headers.get("retry-after")
        if written is None:
            return None
        try:
            return max(float(written), 0.0)
        except ValueError:
            moment = email.utils.parsedate_to_datetime(written)
            return max((moment - datetime.now(UTC)).total_seconds(), 0.0)
    except (TypeError, ValueError, OverflowError):
        return None


def _refused_as_malformed(exc: openai.APIStatusError) -> bool:
    """The server says the request itself is wrong for it: 400 or 422, or an error of any
    status that names the part it cannot take (llama-cpp-python answers 500 to a
    json_schema response_format)."""
    if exc.status_code in (400, 422):
        return True
    return "response_format" in str(exc.message)
