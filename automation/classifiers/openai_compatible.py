"""Any chat-completions server (hosted, vLLM, Ollama, LM Studio) reached through a base URL.

It asks for structured output shaped by ClassifierDecision and hands back what the model
wrote, parsed when it is JSON and raw when it is not: the pipeline validates it, so invalid
output is held for a person with the raw text kept. The SDK never retries: the workflow owns
retries (its attempt counter, backoff and hold), and a hidden retry would spend its deadline.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import openai
from openai.types.shared_params import ResponseFormatJSONSchema

from automation.classifiers import ClassifierInput, ClassifierTimeout, ClassifierUnavailable
from automation.conf import setting
from automation.schemas import ClassifierDecision
from policy.schemas import canonical_json

# Enough for a long e-mail with attachment text; a bigger event is cut, never refused.
MAX_EVENT_CHARS = 24_000
PLACEHOLDER_API_KEY = "not-needed"  # local servers ignore the key, the SDK insists on one
VERSION_PREFIX = "version:"


@dataclass(frozen=True)
class Prompt:
    version: str
    text: str


@cache
def _read_prompt(path: str) -> Prompt:
    header, _, text = Path(path).read_text(encoding="utf-8").partition("\n")
    if not header.startswith(VERSION_PREFIX) or not header[len(VERSION_PREFIX) :].strip():
        raise ValueError(f"{path} must begin with a line 'version: <prompt version>'")
    return Prompt(version=header[len(VERSION_PREFIX) :].strip(), text=text.strip())


def load_prompt() -> Prompt:
    """The configured system prompt and the version its first line names."""
    return _read_prompt(str(setting("PROMPT_FILE")))


def response_format() -> ResponseFormatJSONSchema:
    # Not strict: strict mode cannot express the open `fields` dict. The pipeline validates.
    return {
        "type": "json_schema",
        "json_schema": {
            "name": "classifier_decision",
            "schema": ClassifierDecision.model_json_schema(),
            "strict": False,
        },
    }


def event_message(event: ClassifierInput) -> str:
    text = canonical_json(event.normalized)
    if len(text) <= MAX_EVENT_CHARS:
        return text
    return text[:MAX_EVENT_CHARS] + " [truncated]"


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # NaN and Infinity cannot be stored as JSON


def parse_output(content: str) -> Any:
    """The parsed JSON when the model wrote JSON, else its text unchanged."""
    try:
        return json.loads(content, parse_constant=_reject_constant)
    except ValueError:
        return content


class OpenAICompatibleClassifier:
    name = "openai-compatible"

    def __init__(self) -> None:
        self.model = str(setting("OPENAI_MODEL"))
        self.base_url = str(setting("OPENAI_BASE_URL"))

    @property
    def version(self) -> str:
        """`openai-compatible:<model>`; a model name too long for the version columns (100)
        is cut and ends in a hash of the whole name, so two long names never share one."""
        version = f"{self.name}:{self.model}"
        if len(version) > 100:
            version = f"{version[:87]}#{hashlib.sha256(self.model.encode()).hexdigest()[:12]}"
        return version

    @property
    def prompt_version(self) -> str:
        return load_prompt().version

    def classify(self, event: ClassifierInput, attempt: int, *, deadline: float) -> Any:
        api_key = setting("OPENAI_API_KEY") or PLACEHOLDER_API_KEY
        # max_retries=0: one HTTP request per attempt; the workflow's backoff does the rest.
        with openai.OpenAI(
            base_url=self.base_url, api_key=api_key, timeout=deadline, max_retries=0
        ) as client:
            try:
                completion = client.chat.completions.create(
                    model=self.model,
                    messages=[
                        {"role": "system", "content": load_prompt().text},
                        {"role": "user", "content": event_message(event)},
                    ],
                    response_format=response_format(),
                    temperature=0,
                )
            except openai.APITimeoutError as exc:  # before its parent, APIConnectionError
                raise ClassifierTimeout(
                    f"no answer from {self.base_url} within {deadline:g}s"
                ) from exc
            except openai.APIStatusError as exc:
                raise ClassifierUnavailable(self._status_message(exc)) from exc
            except openai.APIConnectionError as exc:
                raise ClassifierUnavailable(f"cannot reach {self.base_url}: {exc}") from exc
            except (openai.OpenAIError, ValueError) as exc:  # e.g. a 200 whose body is not JSON
                raise ClassifierUnavailable(f"unusable answer from {self.base_url}: {exc}") from exc
        return self._output(completion)

    def _status_message(self, exc: openai.APIStatusError) -> str:
        status, detail = exc.status_code, str(exc.message)[:200]
        if status == 429 or status >= 500:
            return f"{self.base_url} answered {status}, try again later: {detail}"
        # Bad request, auth, unknown model: a misconfiguration that a person must fix.
        return (
            f"{self.base_url} refused the request with {status} (check model, key, URL): {detail}"
        )

    def _output(self, completion: Any) -> Any:
        """What the model wrote; refusals and empty answers go on to be held as invalid."""
        choices = getattr(completion, "choices", None)
        if not choices:  # the server answered, but not with a completion: not the model's fault
            raise ClassifierUnavailable(f"{self.base_url} answered without a completion")
        message = getattr(choices[0], "message", None)
        content = getattr(message, "content", None)
        if isinstance(content, str) and content:
            return parse_output(content)
        refusal = getattr(message, "refusal", None)
        if refusal:
            return {"refusal": refusal}
        return content or ""  # not text (a lenient server): kept as it came
