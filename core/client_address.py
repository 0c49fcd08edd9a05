"""The address a request came from, honouring only the proxies the deployment says it has."""

from __future__ import annotations

import ipaddress

from django.conf import settings
from django.http import HttpRequest


def _address(value: str | None) -> str | None:
    """A valid IP address, normalised (the database column is an address type), or None."""
    text = (value or "").strip().split("%", 1)[0]  # drop an IPv6 zone: it names our interface
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return None


def client_address(request: HttpRequest) -> str | None:
    """The client's address: the connection's own, unless TRUSTED_PROXIES says how many proxies
    in front append to X-Forwarded-For. Then the N-th entry from the right is the address the
    outermost trusted proxy saw; entries left of it were written by the client and are ignored.
    A header with fewer entries than proxies, or an unreadable entry, falls back to the
    connection's address: never to anything the client chose."""
    remote = _address(request.META.get("REMOTE_ADDR"))
    proxies: int = settings.TRUSTED_PROXIES
    if proxies <= 0:
        return remote
    header = request.META.get("HTTP_X_FORWARDED_FOR", "")
    hops = [hop.strip() for hop in header.split(",") if hop.strip()]
    if len(hops) < proxies:
        return remote
    return _address(hops[-proxies]) or remote
