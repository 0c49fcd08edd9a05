"""A small, real OpenID Connect provider on 127.0.0.1 for the company sign-in tests.

It serves discovery, /authorize (signs in `person` at once, with no page, and sends the
browser back with a code and the state), /token (checks the client's secret, the redirect
URI and the PKCE verifier, and answers an RS256 id_token and an access token), /userinfo and
/jwks, on a free port in a thread. `id_token_changes` bends the next id_tokens (a wrong
audience, an expiry in the past) to test that the console refuses them.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

CLIENT_ID = "gatehouse-test"
CLIENT_SECRET = "test-client-secret-not-for-production"
KEY_ID = "test-key-1"


@dataclass
class Provider:
    issuer: str = ""
    # The claims of whoever signs in next: sub, preferred_username, email, groups.
    person: dict[str, Any] = field(default_factory=dict)
    id_token_changes: dict[str, Any] = field(default_factory=dict)
    # The `kid` the id_tokens' header names (none: a header without one), and how many other
    # keys the JWKS publishes beside the signing one.
    kid: str | None = KEY_ID
    other_keys: int = 0
    key: rsa.RSAPrivateKey = field(
        default_factory=lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048)
    )
    codes: dict[str, dict[str, Any]] = field(default_factory=dict)
    access_tokens: dict[str, dict[str, Any]] = field(default_factory=dict)

    def settings(self) -> dict[str, Any]:
        """The Django settings that point Gatehouse at this provider."""
        return {
            "OIDC_ENABLED": True,
            "OIDC_ISSUER": self.issuer,
            "OIDC_RP_CLIENT_ID": CLIENT_ID,
            "OIDC_RP_CLIENT_SECRET": CLIENT_SECRET,
            "OIDC_OP_AUTHORIZATION_ENDPOINT": f"{self.issuer}/authorize",
            "OIDC_OP_TOKEN_ENDPOINT": f"{self.issuer}/token",
            "OIDC_OP_USER_ENDPOINT": f"{self.issuer}/userinfo",
            "OIDC_OP_JWKS_ENDPOINT": f"{self.issuer}/jwks",
        }

    def discovery(self) -> dict[str, Any]:
        return {
            "issuer": self.issuer,
            "authorization_endpoint": f"{self.issuer}/authorize",
            "token_endpoint": f"{self.issuer}/token",
            "userinfo_endpoint": f"{self.issuer}/userinfo",
            "jwks_uri": f"{self.issuer}/jwks",
            "response_types_supported": ["code"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"],
            "code_challenge_methods_supported": ["S256"],
        }

    def jwks(self) -> dict[str, Any]:
        public = RSAAlgorithm.to_jwk(self.key.public_key(), as_dict=True)
        keys = [{**public, "kid": KEY_ID, "alg": "RS256", "use": "sig"}]
        for number in range(self.other_keys):
            other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
            public = RSAAlgorithm.to_jwk(other.public_key(), as_dict=True)
            keys.append({**public, "kid": f"other-key-{number}", "alg": "RS256", "use": "sig"})
        return {"keys": keys}

    def authorize(self, query: dict[str, str]) -> str:
        """Where the browser goes next: back to the client with a code and the state."""
        if query.get("client_id") != CLIENT_ID or query.get("response_type") != "code":
            raise ValueError("unknown client or response type")
        code = secrets.token_urlsafe(16)
        self.codes[code] = {**query, "claims": dict(self.person)}
        answer = {"code": code, "state": query["state"]}
        return f"{query['redirect_uri']}?{urlencode(answer)}"

    def token(self, form: dict[str, str]) -> dict[str, Any]:
        grant = self.codes.pop(form.get("code", ""), None)  # a code is good once
        if grant is None or form.get("client_secret") != CLIENT_SECRET:
            raise ValueError("invalid_grant")
        if form.get("client_id") != CLIENT_ID or form.get("redirect_uri") != grant["redirect_uri"]:
            raise ValueError("invalid_grant")
        if "code_challenge" in grant:
            digest = hashlib.sha256(form.get("code_verifier", "").encode()).digest()
            if base64.urlsafe_b64encode(digest).rstrip(b"=").decode() != grant["code_challenge"]:
                raise ValueError("invalid_grant")
        claims = grant["claims"]
        now = int(time.time())
        id_token = {
            **claims,
            "iss": self.issuer,
            "aud": CLIENT_ID,
            "iat": now,
            "exp": now + 300,
            "nonce": grant.get("nonce"),
            **self.id_token_changes,
        }
        access_token = secrets.token_urlsafe(16)
        self.access_tokens[access_token] = claims
        header = {"kid": self.kid} if self.kid is not None else None
        signed = jwt.encode(id_token, self.key, algorithm="RS256", headers=header)
        return {
            "access_token": access_token,
            "token_type": "Bearer",
            "expires_in": 300,
            "id_token": signed,
        }

    def userinfo(self, authorization: str) -> dict[str, Any]:
        claims = self.access_tokens[authorization.removeprefix("Bearer ")]
        # The groups are in the id_token only, as Microsoft Entra ID sends them.
        return {name: value for name, value in claims.items() if name != "groups"}


def _handler(provider: Provider) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def answer(self, status: int, body: Any = None, location: str = "") -> None:
            self.send_response(status)
            if location:
                self.send_header("Location", location)
            data = json.dumps(body).encode() if body is not None else b""
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            url = urlsplit(self.path)
            query = {name: values[0] for name, values in parse_qs(url.query).items()}
            try:
                if url.path == "/.well-known/openid-configuration":
                    self.answer(200, provider.discovery())
                elif url.path == "/jwks":
                    self.answer(200, provider.jwks())
                elif url.path == "/authorize":
                    self.answer(302, location=provider.authorize(query))
                elif url.path == "/userinfo":
                    self.answer(200, provider.userinfo(self.headers.get("Authorization", "")))
                else:
                    self.answer(404, {"error": "not_found"})
            except (KeyError, ValueError) as exc:
                self.answer(400, {"error": str(exc)})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
            if urlsplit(self.path).path != "/token":
                self.answer(404, {"error": "not_found"})
                return
            try:
                self.answer(200, provider.token(form))
            except (KeyError, ValueError) as exc:
                self.answer(400, {"error": str(exc)})

    return Handler


@contextmanager
def running_provider() -> Iterator[Provider]:
    """A provider listening on 127.0.0.1 on a free port until the block ends."""
    provider = Provider()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(provider))
    provider.issuer = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, name="oidc-provider", daemon=True)
    thread.start()
    try:
        yield provider
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
