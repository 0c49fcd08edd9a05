"""A real chat-completions server for classifier tests: records every request, answers on cue.

It listens on 127.0.0.1 (port 0: the kernel picks one) in a daemon thread and answers
`POST /v1/chat/completions` the way an OpenAI-compatible server does. Each request takes the
next behaviour from a script, or the default when the script is empty:

- ("content", text): answer 200 with a completion whose message content is `text` (valid JSON,
  invalid JSON, JSON with a wrong enum value: whatever the test wrote).
- ("refusal", text): answer 200 with a completion whose message refuses, content null.
- ("slow", seconds, text): wait that long (past the client's deadline), then answer as
  "content" if anyone is still listening.
- ("body", raw_bytes): answer 200 with exactly these bytes as an application/json body.
- ("status", code, extra_headers): answer with that error status and an OpenAI-style error
  body, e.g. ("status", 429, {"Retry-After": "0"}) or ("status", 500, {}).
- ("reader",): read the event the way the offline heuristic classifier does and answer with
  its reading: JSON when the request asked for structured output, else prose around a
  fenced JSON block, as chat models write.

With `dialect`, the server speaks one structured-output dialect only, as real ones do, and
refuses a request that asks for another before any behaviour is taken:
- "json_schema": OpenAI's `response_format: {"type": "json_schema"}`; anything else is 400;
- "json_object": JSON mode (`{"type": "json_object", "schema": ...}`); a json_schema request
  gets 500 naming `response_format`, as llama-cpp-python's server answers;
- "text": no `response_format` at all; any is 400.

Every request is kept with its path, headers (names in lower case), body and arrival time
(`time.monotonic()`). With `latency`, every answer waits that long first, as a model does;
`most_in_flight` is the most requests the server held at once.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.localserver import Scripted, serving

Behaviour = tuple[Any, ...]
COMPLETIONS_PATH = "/v1/chat/completions"


def content(value: Any) -> Behaviour:
    """Answer with `value` as the message content (dumped to JSON unless already text)."""
    return ("content", value if isinstance(value, str) else json.dumps(value))


def slow(seconds: float, value: Any) -> Behaviour:
    return ("slow", seconds, content(value)[1])


RUNAWAY: Behaviour = ("runaway",)


def status(code: int, **headers: str) -> Behaviour:
    return ("status", code, {name.replace("_", "-"): value for name, value in headers.items()})


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    behaviour: Behaviour
    at: float = 0.0  # time.monotonic() on arrival

    @property
    def payload(self) -> Any:
        return json.loads(self.body)

    def message(self, role: str) -> str:
        return next(m["content"] for m in self.payload["messages"] if m["role"] == role)


@dataclass
class ChatServer(Scripted[Behaviour]):
    model: str = "test-model"
    default: Behaviour = ("status", 500, {})
    requests: list[Received] = field(default_factory=list)
    script: deque[Behaviour] = field(default_factory=deque)
    release: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: ThreadingHTTPServer | None = None
    dialect: str | None = None
    # The tokens every answer reports having read and written.
    usage: tuple[int, int] = (1, 1)
    # Seconds every answer takes; requests held at once, now and at most.
    latency: float = 0.0
    in_flight: int = 0
    most_in_flight: int = 0

    @property
    def base_url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    # --- the server side ------------------------------------------------------------------

    def handle(self, handler: BaseHTTPRequestHandler) -> None:
        arrived = time.monotonic()
        body = handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
        behaviour = self._next()
        with self.lock:
            self.requests.append(
                Received(handler.path, _lowered(handler.headers.items()), body, behaviour, arrived)
            )
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if self.latency:
                self.release.wait(self.latency)
            self._handle(handler, body, behaviour)
        finally:
            with self.lock:
                self.in_flight -= 1

    def _handle(self, handler: BaseHTTPRequestHandler, body: bytes, behaviour: Behaviour) -> None:
        if handler.path != COMPLETIONS_PATH:
            self._answer(handler, 404, {}, _error(f"no route {handler.path}", "not_found"))
            return
        refusal = self._refusal(json.loads(body or b"{}"))
        if refusal is not None:
            self._answer(handler, refusal[0], {}, _error(refusal[1], "invalid_request_error"))
            return
        kind = behaviour[0]
        if kind == "reader":
            behaviour = ("content", _reading(json.loads(body)))
            kind = "content"
        if kind == "slow":
            self.release.wait(behaviour[1])
            with contextlib.suppress(OSError):  # the client gave up long ago
                self._answer(handler, 200, {}, self._completion(behaviour[2], None))
        elif kind == "content":
            self._answer(handler, 200, {}, self._completion(behaviour[1], None))
        elif kind == "runaway":
            # A model that does not stop: it writes until the request's max_tokens.
            limit = int(json.loads(body).get("max_tokens") or 4096)
            text = '{"category": "' + "very " * limit
            self._answer(handler, 200, {}, self._completion(text, None, cut_at=limit))
        elif kind == "refusal":
            self._answer(handler, 200, {}, self._completion(None, behaviour[1]))
        elif kind == "body":
            self._send(handler, 200, {}, behaviour[1])
        else:
            code, extra = behaviour[1], behaviour[2] if len(behaviour) > 2 else {}
            self._answer(handler, code, extra, _error(f"scripted {code}", "server_error"))

    def _refusal(self, payload: dict[str, Any]) -> tuple[int, str] | None:
        """The dialect check: (status, message) for a request this server cannot take."""
        asked = (payload.get("response_format") or {}).get("type")
        if self.dialect is None or asked == self.dialect or (self.dialect == "text" and not asked):
            return None
        if self.dialect == "json_object" and asked == "json_schema":
            return 500, "response_format type json_schema is not supported"
        return 400, f"response_format {asked!r} is not supported by this server"

    def _completion(
        self, text: str | None, refusal: str | None, *, cut_at: int | None = None
    ) -> dict[str, Any]:
        prompt, written = self.usage if cut_at is None else (self.usage[0], cut_at)
        return {
            "id": f"chatcmpl-{self.count()}",
            "object": "chat.completion",
            "created": 0,
            "model": self.model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text, "refusal": refusal},
                    "finish_reason": "stop" if cut_at is None else "length",
                }
            ],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": written,
                "total_tokens": prompt + written,
            },
        }

    @staticmethod
    def _answer(
        handler: BaseHTTPRequestHandler, code: int, headers: dict[str, str], body: Any
    ) -> None:
        ChatServer._send(handler, code, headers, json.dumps(body).encode())

    @staticmethod
    def _send(
        handler: BaseHTTPRequestHandler, code: int, headers: dict[str, str], data: bytes
    ) -> None:
        handler.send_response(code)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(data)


def _lowered(headers: Any) -> dict[str, str]:
    return {name.lower(): value for name, value in headers}  # header names ignore case


def _error(message: str, kind: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "code": None}}


@contextlib.contextmanager
def running_chat_server(**options: Any) -> Iterator[ChatServer]:
    """Serve a ChatServer on 127.0.0.1 for the duration of the block."""
    with serving(ChatServer(**options), "chat") as chat:
        yield chat


def _reading(payload: dict[str, Any]) -> str:
    """The heuristic classifier's reading of the event in the request, as a model writes it:
    with the reference policy's routes, as a model told the business would recommend them."""
    from automation.classifiers.base import ClassifierInput
    from automation.classifiers.heuristic import HeuristicClassifier
    from policy.services import DEFAULTS_DIR, parse_policy_text

    user = next(m["content"] for m in payload["messages"] if m["role"] == "user")
    event = json.loads(user)
    routes = parse_policy_text((DEFAULTS_DIR / "policy-1.yaml").read_text(encoding="utf-8")).routes
    reading = HeuristicClassifier().classify(
        ClassifierInput("chat", str(event.get("event_id", "")), event, routes=routes),
        1,
        deadline=5,
    )
    text = json.dumps(reading, indent=2)
    if payload.get("response_format"):
        return text
    return f"Here is my reading of the request.\n\n```json\n{text}\n```\n\nHope this helps!"
