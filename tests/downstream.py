"""A real HTTP receiver for effect tests: records every request, deduplicates by key, fails on cue.

It listens on 127.0.0.1 (port 0: the kernel picks one) in a daemon thread. Each request takes
the next behaviour from a script, or the default when the script is empty:

- ("status", code, extra_headers[, body]): the receiver answers with that status. A 2xx
  performs the effect.
- ("hang", seconds): perform the effect, then wait that long (past the client's read timeout)
  before answering 200, so the sender never learns that it happened.
- ("down", code, extra_headers): a gateway in front of the receiver answers that status; the
  receiver never sees the request (an outage), so its key changes nothing.
- ("close",): read the whole request, then close the socket without answering (not performed).

Like any receiver docs/integrators.md describes, it deduplicates by key and never fails a
delivery it performed: a request whose Idempotency-Key was performed before gets the first
answer again, marked `Idempotent-Replayed: true`, whatever "status" or "hang" the script says
(only "down" and "close", which never reach it, still happen).

Every request is kept with its Idempotency-Key and whether its signature verified.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from automation.effects.http import SIGNATURE_HEADER, verify
from tests.localserver import Scripted, serving

Behaviour = tuple[Any, ...]
OK: Behaviour = ("status", 200, {})
Answer = tuple[int, dict[str, str], Any]  # status, headers, JSON body
# docs/integrators.md: the header a receiver marks the answer to a key performed before with.
REPLAYED_HEADER = "Idempotent-Replayed"


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    key: str
    signature: str
    signature_valid: bool  # by automation.effects.http.verify
    signature_as_documented: bool  # recomputed here: hex HMAC-SHA256(secret, "<t>.<n>." + body)
    behaviour: Behaviour
    performed: bool  # this request performed the effect (a first 2xx or a hang for its key)
    at: float = field(default_factory=time.monotonic)  # when it arrived

    @property
    def payload(self) -> Any:
        return json.loads(self.body)


@dataclass
class Downstream(Scripted[Behaviour]):
    secret: str
    default: Behaviour = OK
    requests: list[Received] = field(default_factory=list)
    performed: list[str] = field(default_factory=list)  # keys, in the order performed
    # What the request that performed a key was answered: (status, headers, body).
    answers: dict[str, Answer] = field(default_factory=dict)
    script: deque[Behaviour] = field(default_factory=deque)
    release: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}/effects"

    def heal(self) -> None:
        """From now on every request succeeds."""
        with self.lock:
            self.script.clear()
            self.default = OK

    def keys(self) -> list[str]:
        with self.lock:
            return [received.key for received in self.requests]

    # --- the server side ------------------------------------------------------------------

    def _perform(self, key: str, code: int, headers: dict[str, str]) -> tuple[Answer, bool]:
        """Perform the effect of a new key and keep its answer; returns (the answer, whether
        this request performed it: not if another one of the key just did)."""
        with self.lock:
            if key in self.answers:
                return self.answers[key], False
            self.performed.append(key)
            number = len(self.performed)
            answer = (code, {"Location": f"/received/{number}", **headers}, {"received": number})
            if key:
                self.answers[key] = answer
            return answer, True

    def _first_answer(self, key: str) -> Answer | None:
        with self.lock:
            return self.answers.get(key) if key else None

    def handle(self, handler: BaseHTTPRequestHandler) -> None:
        body = handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
        behaviour = self._next()
        key = handler.headers.get("Idempotency-Key") or ""
        signature = handler.headers.get(SIGNATURE_HEADER) or ""
        kind = behaviour[0]
        # What the receiver itself answers: the first answer of a key it performed before.
        answer = None if kind in ("down", "close") else self._first_answer(key)
        performed = False
        if answer is None and kind == "hang":
            answer, performed = self._perform(key, 200, {})
        elif answer is None and kind == "status" and 200 <= behaviour[1] < 300:
            answer, performed = self._perform(key, behaviour[1], behaviour[2])
        replayed = answer is not None and not performed
        with self.lock:
            self.requests.append(
                Received(
                    path=handler.path,
                    headers=dict(handler.headers.items()),
                    body=body,
                    key=key,
                    signature=signature,
                    signature_valid=verify(self.secret, signature, body, now=time.time()),
                    signature_as_documented=self._as_documented(signature, body),
                    behaviour=behaviour,
                    performed=performed,
                )
            )
        if kind == "close":
            handler.close_connection = True
            return
        if kind == "hang":
            self.release.wait(behaviour[1])
        with contextlib.suppress(OSError):  # after a hang, the sender gave up long ago
            if answer is not None:
                code, headers, data = answer
                marked = {REPLAYED_HEADER: "true"} if replayed else {}
                self._answer(handler, code, {**headers, **marked}, data)
            else:
                code, extra = behaviour[1], behaviour[2] if len(behaviour) > 2 else {}
                data = behaviour[3] if len(behaviour) > 3 else {"error": f"scripted {code}"}
                self._answer(handler, code, extra, data)

    def _as_documented(self, signature: str, body: bytes) -> bool:
        parts = dict(item.split("=", 1) for item in signature.split(",") if "=" in item)
        timestamp, nonce = parts.get("t", ""), parts.get("n", "")
        if not timestamp.isdigit() or abs(time.time() - int(timestamp)) > 300 or not nonce:
            return False
        signed = f"{timestamp}.{nonce}.".encode() + body
        digest = hmac.new(self.secret.encode(), signed, hashlib.sha256)
        return hmac.compare_digest(digest.hexdigest(), parts.get("v2", ""))

    @staticmethod
    def _answer(
        handler: BaseHTTPRequestHandler, code: int, headers: dict[str, str], body: Any
    ) -> None:
        data = json.dumps(body).encode()
        handler.send_response(code)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(data)


@contextlib.contextmanager
def running_downstream(secret: str, *, port: int = 0) -> Iterator[Downstream]:
    """Serve a Downstream on 127.0.0.1 (on `port`, if given) for the duration of the block."""
    with serving(Downstream(secret=secret), "downstream", port=port) as downstream:
        yield downstream
