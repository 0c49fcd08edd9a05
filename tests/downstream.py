"""A real HTTP receiver for effect tests: records every request, deduplicates by key, fails on cue.

It listens on 127.0.0.1 (port 0: the kernel picks one) in a daemon thread. Each request takes
the next behaviour from a script, or the default when the script is empty:

- ("status", code, extra_headers): answer with that status. A 2xx performs the effect unless
  its Idempotency-Key was performed before (then it answers the same, performing nothing).
- ("hang", seconds): perform the effect, then wait that long (past the client's read timeout)
  before answering 200, so the sender never learns that it happened.
- ("close",): read the whole request, then close the socket without answering (not performed).

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


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    key: str
    signature: str
    signature_valid: bool  # by automation.effects.http.verify
    signature_as_documented: bool  # recomputed here: hex HMAC-SHA256(secret, "<t>." + body)
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

    def _perform(self, key: str) -> tuple[bool, int]:
        """Perform once per key; returns (performed now, the effect's number downstream)."""
        with self.lock:
            if key and key in self.performed:
                return False, self.performed.index(key) + 1
            self.performed.append(key)
            return True, len(self.performed)

    def handle(self, handler: BaseHTTPRequestHandler) -> None:
        body = handler.rfile.read(int(handler.headers.get("Content-Length") or 0))
        behaviour = self._next()
        key = handler.headers.get("Idempotency-Key") or ""
        signature = handler.headers.get(SIGNATURE_HEADER) or ""
        performed, number = False, 0
        kind = behaviour[0]
        if kind == "hang" or (kind == "status" and 200 <= behaviour[1] < 300):
            performed, number = self._perform(key)
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
            with contextlib.suppress(OSError):  # the sender gave up long ago
                self._answer(handler, 200, {"Location": f"/received/{number}"}, {})
            return
        code, extra = behaviour[1], behaviour[2] if len(behaviour) > 2 else {}
        if 200 <= code < 300:
            answer = {"received": number, "duplicate": not performed}
            self._answer(handler, code, {"Location": f"/received/{number}", **extra}, answer)
        else:
            self._answer(handler, code, extra, {"error": f"scripted {code}"})

    def _as_documented(self, signature: str, body: bytes) -> bool:
        parts = dict(item.split("=", 1) for item in signature.split(",") if "=" in item)
        timestamp = parts.get("t", "")
        if not timestamp.isdigit() or abs(time.time() - int(timestamp)) > 300:
            return False
        digest = hmac.new(self.secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
        return hmac.compare_digest(digest.hexdigest(), parts.get("v1", ""))

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
