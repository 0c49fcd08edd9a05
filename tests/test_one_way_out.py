"""One way out of the building: mail leaves by core/mail.py, an HTTP request by
core/egress.py's `send_request`, and every retry waits core/backoff.py's time.

The product's modules (tests.packages.product_sources: import-linter's root packages, less
the development tools) are read with `ast`, and a module other than the one that owns the
way out fails the test when it:
- mail: imports django.core.mail (its send functions, its connection, its message classes),
  or opens an smtplib connection itself;
- HTTP: calls httpx, requests, urllib.request or http.client to send (a type such as
  httpx.URL or httpx.Response, and an exception class, is not sending);
- backoff: uses the `random` module (jitter is core.backoff's), or defines a function whose
  name says backoff.

An import only type checking reads (`if TYPE_CHECKING:`) is no way out. The planted
violations at the end show each rule catching what it is for.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

import pytest

from tests.packages import REPO, product_sources

MAIL_MODULE = "core/mail.py"
POSTER_MODULE = "core/egress.py"
BACKOFF_MODULE = "core/backoff.py"
# Where a request leaves by a library's own client, and why it is not the poster's.
HTTP_EXEMPT = {
    # The company sign-in is mozilla-django-oidc's code flow: the library fetches the token
    # with requests under its own settings (OIDC_VERIFY_SSL, OIDC_PROXY, OIDC_TIMEOUT), and
    # the override of its key lookup fetches the JWKS the same way, with the same settings.
    "accounts/oidc.py",
}

SENDING = {
    "httpx": {"get", "post", "put", "patch", "delete", "head", "options", "request", "stream"}
    | {"Client", "AsyncClient", "HTTPTransport", "AsyncHTTPTransport"},
    "requests": {"get", "post", "put", "patch", "delete", "head", "options", "request"}
    | {"Session", "session"},
    "urllib.request": {"urlopen", "Request", "build_opener", "OpenerDirector"},
    "http.client": {"HTTPConnection", "HTTPSConnection"},
    "urllib3": {"PoolManager", "HTTPConnectionPool", "HTTPSConnectionPool", "request"},
    "smtplib": {"SMTP", "SMTP_SSL", "LMTP"},
}


@dataclass(frozen=True)
class Violation:
    path: str
    line: int
    rule: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.rule}"


def _type_checking_lines(tree: ast.Module) -> set[int]:
    """The lines of every `if TYPE_CHECKING:` block."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines |= set(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def _aliases(tree: ast.Module, skipped: set[int]) -> dict[str, str]:
    """What each imported name stands for: `import httpx as h` → h: httpx, `from httpx
    import post` → post: httpx.post."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if getattr(node, "lineno", 0) in skipped:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                names[alias.asname or alias.name.split(".")[0]] = (
                    alias.name if alias.asname else alias.name.split(".")[0]
                )
        elif isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def _dotted(node: ast.expr, aliases: dict[str, str]) -> str:
    """The full dotted name a call's function is (`h.Client` → httpx.Client), or '' when it
    is no imported name's (a local `requests` dict is not the library)."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in aliases:
        return ""
    return ".".join([aliases[node.id], *reversed(parts)])


def _imported_modules(tree: ast.Module, skipped: set[int]) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if getattr(node, "lineno", 0) in skipped:
            continue
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.append((node.lineno, node.module))
    return found


def violations(source: str, path: str) -> list[Violation]:
    """Every way out of the building `source` (the module at `path`, relative to the
    repository) takes that is not its own."""
    tree = ast.parse(source)
    skipped = _type_checking_lines(tree)
    aliases = _aliases(tree, skipped)
    found: list[Violation] = []
    for line, module in _imported_modules(tree, skipped):
        if module.startswith("django.core.mail") and path != MAIL_MODULE:
            found.append(Violation(path, line, f"imports {module}: mail leaves by core.mail"))
        if module == "random" and path != BACKOFF_MODULE:
            found.append(Violation(path, line, "imports random: jitter is core.backoff's"))
    for node in ast.walk(tree):
        named = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name
        if named and "backoff" in named.lower() and path != BACKOFF_MODULE:
            found.append(Violation(path, node.lineno, f"defines {node.name}: a backoff"))
        if not isinstance(node, ast.Call) or node.lineno in skipped:
            continue
        called = _dotted(node.func, aliases)
        module, _, name = called.rpartition(".")
        if name in SENDING.get(module, ()):
            owner = MAIL_MODULE if module == "smtplib" else POSTER_MODULE
            if path != owner and path not in HTTP_EXEMPT:
                found.append(Violation(path, node.lineno, f"calls {called}: only {owner} sends"))
    return found


def test_no_module_but_the_ways_out_sends_mail_posts_or_backs_off() -> None:
    modules = list(product_sources())
    assert any(p.relative_to(REPO).as_posix() == MAIL_MODULE for p in modules)
    found = [
        str(v)
        for p in modules
        for v in violations(p.read_text(encoding="utf-8"), p.relative_to(REPO).as_posix())
    ]
    assert found == []


def test_the_ways_out_are_the_ones_used() -> None:
    """The owners themselves pass the checks, and they are what the senders call."""
    for owner in (MAIL_MODULE, POSTER_MODULE, BACKOFF_MODULE):
        assert violations((REPO / owner).read_text(encoding="utf-8"), owner) == []
    senders = {
        "automation/effects/smtp.py": "core.mail",
        "automation/effects/http.py": "core.egress",
        "automation/intake/imap.py": "core.egress",
        "notifications/services.py": "core.egress",
    }
    for path, owner in senders.items():
        assert f"from {owner} import" in (REPO / path).read_text(encoding="utf-8"), path


PLANTED = {
    "a message sent by Django": (
        "from django.core.mail import EmailMessage\nEmailMessage('s', 'b', to=['a@b']).send()\n",
        "imports django.core.mail",
    ),
    "send_mail by its module": (
        "import django.core.mail\ndjango.core.mail.send_mail('s', 'b', None, ['a@b'])\n",
        "imports django.core.mail",
    ),
    "an SMTP connection of its own": (
        "import smtplib\nsmtplib.SMTP('localhost')\n",
        "calls smtplib.SMTP",
    ),
    "a post by httpx": ("import httpx\nhttpx.post('https://x.example')\n", "calls httpx.post"),
    "a client under another name": (
        "import httpx as h\nwith h.Client() as c:\n    pass\n",
        "calls httpx.Client",
    ),
    "a function imported by name": (
        "from requests import get\nget('https://x.example')\n",
        "calls requests.get",
    ),
    "urlopen": (
        "from urllib.request import urlopen\nurlopen('https://x.example')\n",
        "calls urllib.request.urlopen",
    ),
    "a jitter of its own": (
        "import random\ndef wait(n):\n    return random.uniform(0, 2 ** n)\n",
        "imports random",
    ),
    "a backoff of its own": ("def _backoff(n):\n    return 2 ** n\n", "defines _backoff"),
}


@pytest.mark.parametrize("name", PLANTED)
def test_a_planted_way_out_is_caught(name: str) -> None:
    source, rule = PLANTED[name]
    found = violations(source, "automation/planted.py")
    assert any(rule in v.rule for v in found), found


def test_what_is_no_way_out_passes() -> None:
    """Types and exceptions of the libraries, and an import for type checking, send nothing."""
    source = (
        "from __future__ import annotations\n"
        "from typing import TYPE_CHECKING\n"
        "import httpx\n"
        "if TYPE_CHECKING:\n"
        "    from django.core.mail import EmailMessage\n"
        "def judge(answer: httpx.Response) -> httpx.URL:\n"
        "    return httpx.URL('https://x.example')\n"
        "try:\n    pass\nexcept httpx.HTTPError:\n    pass\n"
    )
    assert violations(source, "automation/planted.py") == []
