"""What may leave by an effect: the secrets a catalogue may name, the addresses it may reach,
the header values it may send.

All three are the operator's to allow, in settings, and each is checked twice: when a
catalogue is saved (policy.catalogue, which names the place in the document) and when an
effect is delivered (automation.effects.http), so a document stored some other way still
sends nothing the settings do not allow.

- A secret is the name of an environment variable. A catalogue may name only the ones listed
  in GATEHOUSE_EFFECT_SECRETS, and never one of the server's own (SERVER_VARIABLES), even if
  listed: the server's secret key, its database URL and the sign-in provider's client secret
  are every GATEHOUSE_ variable and the database's.
- An address is where an HTTP effect connects, after its name is resolved: loopback,
  link-local, private, shared, unspecified, multicast and reserved addresses are refused unless
  GATEHOUSE_EFFECT_PRIVATE_HOSTS allows them, whatever way the address is written
  (http://2130706433/, http://[::ffff:127.0.0.1]/, a name that resolves to one).

`send_request` is the one way an HTTP request leaves the building: an effect's (after the
checks above), a chat webhook's (notifications), a mailbox's OAuth token request. It follows
no redirect (a 3xx is the caller's answer to judge: a redirect could lead anywhere the checks
did not look) and never retries (each caller counts its own attempts).
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

import httpx
from django.conf import settings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# The variables the server reads for itself: every setting of config/settings.py is a
# GATEHOUSE_ variable or DATABASE_URL; DJANGO_ ones are Django's, PG ones libpq's (PGPASSWORD).
SERVER_VARIABLES = re.compile(r"GATEHOUSE_.*|DJANGO_.*|PG[A-Z]*|DATABASE_URL")
# Header values go on the wire as they are: printable ASCII and tabs, no line breaks.
HEADER_VALUE = re.compile(r"[\t\x20-\x7e]*")
# NAT64 (RFC 6052) carries an IPv4 address in its last 32 bits.
NAT64 = ipaddress.ip_network("64:ff9b::/96")


class EgressRefused(Exception):
    """What an effect would send, or where, is not allowed by the settings: nothing is sent."""


# --- secrets -------------------------------------------------------------------------------


def declared_secrets() -> frozenset[str]:
    return frozenset(settings.GATEHOUSE_EFFECT_SECRETS)


def secret_refusal(name: str) -> str | None:
    """Why a catalogue may not name the environment variable `name`; None when it may."""
    if SERVER_VARIABLES.fullmatch(name):
        return (
            f"{name} is a setting of the Gatehouse server itself: no effect may send it, "
            "even when it is listed in GATEHOUSE_EFFECT_SECRETS"
        )
    if name not in declared_secrets():
        return (
            f"{name} is not a secret declared for effects: the operator lists the variables "
            "effects may send in GATEHOUSE_EFFECT_SECRETS"
        )
    return None


# --- header values -------------------------------------------------------------------------


def header_value_refusal(value: str) -> str | None:
    """Why `value` cannot be sent as a header value (the value itself is never repeated: it
    may be a secret)."""
    if HEADER_VALUE.fullmatch(value):
        return None
    if "\r" in value or "\n" in value:
        return "a header value cannot hold a line break"
    if not value.isascii():
        return "a header value is ASCII text: no accented letters or other characters"
    return "a header value cannot hold control characters"


# --- addresses -----------------------------------------------------------------------------


def _embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one stands for (mapped, 6to4, NAT64), if any."""
    if isinstance(address, ipaddress.IPv4Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address in NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def address_kind(address: IPAddress) -> str | None:
    """What makes an address internal ("loopback", "private", ...); None for a public one."""
    embedded = _embedded_ipv4(address)
    # The IPv4 address first: ::ffff:127.0.0.1 is loopback (Python calls it private too).
    candidates: list[IPAddress] = [address] if embedded is None else [embedded, address]
    for candidate in candidates:
        for kind in ("loopback", "link_local", "unspecified", "multicast", "private", "reserved"):
            if getattr(candidate, f"is_{kind}"):
                return kind.replace("_", "-")
        if not candidate.is_global:
            return "non-public"
    return None


def _allowed_entries() -> list[str]:
    return [entry.strip().lower() for entry in settings.GATEHOUSE_EFFECT_PRIVATE_HOSTS]


def _allowed(host: str, port: int, address: IPAddress) -> bool:
    """Whether GATEHOUSE_EFFECT_PRIVATE_HOSTS lets an effect reach `address` (an internal
    one) as `host:port`: `*`, a network holding it, or the host name (with its port)."""
    forms = [address, *filter(None, [_embedded_ipv4(address)])]  # 127.0.0.0/8: ::ffff:127.0.0.1
    for entry in _allowed_entries():
        if entry == "*":
            return True
        try:
            network = ipaddress.ip_network(entry, strict=False)
            if any(form in network for form in forms):
                return True
            continue
        except ValueError:
            pass
        name, _, wanted = entry.rpartition(":") if ":" in entry else (entry, "", "")
        if name.rstrip(".") == host.lower().rstrip(".") and wanted in ("", str(port)):
            return True
    return False


def address_refusal(host: str, port: int, address: IPAddress) -> str | None:
    """Why an effect may not connect to `address` (which `host` resolved to); None if it may."""
    kind = address_kind(address)
    if kind is None or _allowed(host, port, address):
        return None
    shown = host if _literal(host) == address else f"{host} ({address})"
    article = "an" if kind[0] in "aeiou" else "a"
    return (
        f"{shown} is {article} {kind} address: effects reach such addresses only when the "
        "operator allows them in GATEHOUSE_EFFECT_PRIVATE_HOSTS"
    )


def _literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def resolve(host: str, port: int) -> list[IPAddress]:
    """Every address `host` resolves to (a literal address, in any form, is itself: the
    resolver reads 2130706433 and 127.1 too). Raises OSError when it resolves to none."""
    found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    # The scope of a link-local IPv6 address (fe80::1%eth0) is not part of the address.
    addresses = (ipaddress.ip_address(str(info[4][0]).partition("%")[0]) for info in found)
    return list(dict.fromkeys(addresses))


def checked_address(host: str, port: int) -> IPAddress:
    """The address to connect to for `host:port`: the first it resolves to, once every one of
    them is allowed (one internal address among public ones is enough to refuse: which one a
    connection takes is not ours to choose). Connecting to this address, and not to the name
    again, means a second lookup cannot answer differently (DNS rebinding). Raises
    EgressRefused, or OSError when the name does not resolve."""
    try:
        addresses = resolve(host, port)
    except ValueError as exc:  # OSError (no answer now) is the caller's: a retry may resolve
        raise EgressRefused(f"the host name {host!r} cannot be looked up") from exc
    refusal = _first_refusal(host, port, addresses)
    if refusal is not None:
        raise EgressRefused(refusal)
    return addresses[0]


def _first_refusal(host: str, port: int, addresses: Iterable[IPAddress]) -> str | None:
    return next(filter(None, (address_refusal(host, port, a) for a in addresses)), None)


def url_refusal(url: str) -> str | None:
    """Why an effect may not post to `url`, as far as can be told when it is saved: the
    addresses its host resolves to now. A name that does not resolve yet is left to the
    delivery, which checks again."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:
        return "the address cannot be read"
    if not host:
        return "the address names no host"
    port = port or (443 if parts.scheme.lower() == "https" else 80)
    try:
        addresses = resolve(host, port)
    except OSError:
        return None
    except ValueError:  # a label too long for IDNA, a NUL: no lookup can be made of it
        return "the address's host name cannot be looked up"
    return _first_refusal(host, port, addresses)


# --- sending -------------------------------------------------------------------------------


def send_request(
    method: str,
    url: str | httpx.URL,
    *,
    timeout: float | httpx.Timeout,
    content: bytes | None = None,
    data: dict[str, str] | None = None,
    json: Any = None,
    headers: dict[str, str] | None = None,
    extensions: dict[str, Any] | None = None,
) -> httpx.Response:
    """Send one request and return the answer, whatever its status; redirects are not
    followed. Raises what httpx raises (httpx.HTTPError and its kin, httpx.InvalidURL): what
    a failure means (retry, give up, uncertain) is the caller's to say."""
    with httpx.Client(timeout=timeout, follow_redirects=False) as client:
        return client.request(
            method,
            url,
            content=content,
            data=data,
            json=json,
            headers=headers,
            extensions=extensions,
        )
