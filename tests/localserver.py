"""Serving a scripted test peer on 127.0.0.1: a real socket, a real HTTP exchange."""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Generic, Protocol, TypeVar


class Peer(Protocol):
    server: ThreadingHTTPServer | None
    release: threading.Event  # set on shutdown so that deliberately slow handlers finish

    def handle(self, handler: BaseHTTPRequestHandler) -> None: ...


P = TypeVar("P", bound=Peer)
B = TypeVar("B")


class Scripted(Generic[B]):
    """A peer that answers from a script of behaviours, then with its default one."""

    lock: threading.Lock
    script: deque[B]
    requests: list[Any]
    default: B

    def then(self, *behaviours: B) -> None:
        """Queue behaviours for the next requests, in order."""
        with self.lock:
            self.script.extend(behaviours)

    def count(self) -> int:
        with self.lock:
            return len(self.requests)

    def _next(self) -> B:
        with self.lock:
            return self.script.popleft() if self.script else self.default


@contextlib.contextmanager
def serving(peer: P, name: str, *, port: int = 0) -> Iterator[P]:
    """Serve `peer` (its `handle` answers every POST) for the duration of the block, on
    `port` (0: one the kernel picks)."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            peer.handle(self)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # quiet: the tests read what the peer recorded

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    peer.server = server
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.02}, name=name, daemon=True
    )
    thread.start()
    try:
        yield peer
    finally:
        peer.release.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
