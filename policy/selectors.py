"""Reads of the stored policy versions for pages and lists: the businesses they decide for.

A page says a request type, route, effect or tier in its business's words: the active
version's catalogue first, then those of the versions stored before (a run decided under an
older version, whose type was removed since, still reads with its label), then the
reference catalogue. A version never changes once stored, so a process reads each one once;
what it checks again is only which versions exist and which is active, with one small query
(no documents), at most once per request (`recheck`, on each request's start) or every
CHECK_SECONDS outside one, and at once after this process stores or activates a version
(`forget`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from policy.catalogue import Catalogue, reference_catalogue
from policy.models import PolicyVersion, parsed_if_read
from policy.schemas import PolicyDocument

# How long a process outside a request (a worker, a command) trusts what it read last.
CHECK_SECONDS = 5.0

Section = Literal["request_types", "routes", "effects"]
# A version as the check sees it: (pk, name, checksum, active).
Identity = tuple[int, str, str, bool]


@dataclass(frozen=True)
class Businesses:
    """The catalogues of the stored versions, in the order a word is looked up in."""

    active: Catalogue  # the active version's; the reference catalogue while none is
    active_version: str | None
    by_version: dict[str, Catalogue]
    # The active one and the others, newest first (the active one alone while none is).
    stored: tuple[Catalogue, ...]
    identities: tuple[Identity, ...] = field(repr=False)

    @property
    def in_order(self) -> tuple[Catalogue, ...]:
        """Where a word is looked up: the stored ones, then the reference catalogue."""
        return (*self.stored, reference_catalogue())

    def names(self, section: Section) -> list[str]:
        """Every name of one section the stored versions have, the active one's first."""
        return list(dict.fromkeys(n for c in self.stored for n in getattr(c, section)))

    def of_version(self, name: str | None) -> Catalogue:
        """The named version's catalogue (the active one's for None or an unknown name)."""
        return self.by_version.get(name or "", self.active)


@dataclass
class _Cache:
    businesses: Businesses | None = None
    checked_at: float = float("-inf")  # time.monotonic() of the last check


_CACHE = _Cache()


def stored_businesses() -> Businesses:
    """The businesses of the stored versions: one small query when it is time to check,
    none when this request (or the last CHECK_SECONDS) already did. With nothing cached,
    that query reads the documents as well; after a change another process made, the
    documents it does not know yet are read in one more."""
    cached = _CACHE.businesses
    if cached is not None and time.monotonic() - _CACHE.checked_at < CHECK_SECONDS:
        return cached
    if cached is None:
        cached = _read_all()
    else:
        identities = _identities()
        if cached.identities != identities:
            cached = _read(identities)
    _CACHE.businesses = cached
    _CACHE.checked_at = time.monotonic()
    return cached


def recheck(**_: Any) -> None:
    """A new request checks again (connected to `request_started` in policy.apps)."""
    _CACHE.checked_at = float("-inf")


def forget() -> None:
    """Read everything again next time: this process stored or activated a version."""
    _CACHE.businesses = None


def _identities() -> tuple[Identity, ...]:
    rows = PolicyVersion.objects.order_by("-pk").values_list("pk", "name", "checksum", "is_active")
    return tuple(rows)


def _read_all() -> Businesses:
    """Every version with its document, in the one query of the check (nothing is cached)."""
    versions = list(PolicyVersion.objects.order_by("-pk"))
    identities = tuple((v.pk, v.name, v.checksum, v.is_active) for v in versions)
    return _businesses(identities, {v.pk: v.parsed for v in versions})


def _read(identities: tuple[Identity, ...]) -> Businesses:
    return _businesses(identities, _documents(identities))


def _businesses(
    identities: tuple[Identity, ...], documents: dict[int, PolicyDocument]
) -> Businesses:
    by_version = {name: documents[pk].business for pk, name, _, _ in identities if pk in documents}
    active_version = next((name for _, name, _, active in identities if active), None)
    active = by_version.get(active_version or "") or reference_catalogue()
    others = [c for name, c in by_version.items() if name != active_version]
    return Businesses(
        active=active,
        active_version=active_version,
        by_version=by_version,
        stored=(active, *others),
        identities=identities,
    )


def _documents(identities: Iterable[Identity]) -> dict[int, PolicyDocument]:
    """Each version's validated document: from this process's cache of parsed versions,
    the rest in one query."""
    found: dict[int, PolicyDocument] = {}
    missing = []
    for pk, name, checksum, _ in identities:
        document = parsed_if_read(pk, name, checksum)
        if document is None:
            missing.append(pk)
        else:
            found[pk] = document
    for version in PolicyVersion.objects.filter(pk__in=missing) if missing else []:
        found[version.pk] = version.parsed
    return found
