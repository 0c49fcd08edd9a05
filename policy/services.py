"""Writes to policy versions: load (validate, checksum, store) and activate."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from django.contrib.auth.models import Group, User
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone
from pydantic import ValidationError

from core.codes import Refusal
from core.errors import ServiceError, field_messages
from policy import selectors
from policy.catalogue import Catalogue, reference_catalogue
from policy.models import PolicyVersion
from policy.schemas import NEW_VERSION, PolicyDocument, version_name_problem
from policy.signals import version_activated

DEFAULTS_DIR = Path(__file__).resolve().parent / "defaults"
# The reference policy of the case set (shared fixtures): fixtures and tests decide under it.
REFERENCE_VERSION = "policy-1"
# What a new installation runs (`load_policy` without arguments, `make demo`): the reference
# routes and approvals with confidence thresholds and risk signals.
DEFAULT_VERSION = "default-1"


class PolicyError(ServiceError):
    """A policy document that cannot be stored, with the message an operator should read.
    `where` is the dotted place in the document it is about ("" for the document as a
    whole); the message starts with it, and `problem` is the rest."""

    def __init__(self, message: str, *, where: str = "") -> None:
        super().__init__(Refusal.INVALID_POLICY, f"{where}: {message}" if where else message)
        self.where = where
        self.problem = message


class PolicyNameTaken(PolicyError):
    """Another version, with other content, already has the document's version name."""

    def __init__(self, name: str) -> None:
        super().__init__(
            f"{name} already exists with different content: "
            "policy versions are immutable, give the new one a new version name",
            where="version",
        )


# How some of pydantic's error types read for a policy document (core.errors.PLAIN words
# the others): its fields are settings, written in YAML, and the only pattern it has is the
# one of a signal's name.
POLICY_WORDS = {
    "extra_forbidden": "is not a setting a policy has: check the spelling and the indentation",
    "string_pattern_mismatch": (
        "use lower-case letters, digits and underscores, starting with a letter"
    ),
    "dict_type": "must be a group of names with their values",
    "model_type": "must be a group of settings (names with their values)",
    "model_attributes_type": "must be a group of settings (names with their values)",
}


def describe_validation_error(error: ValidationError) -> str:
    """Pydantic's errors as one line an operator reads (core.errors.field_messages)."""
    problems = field_messages(error, root="document", words=POLICY_WORDS)
    return "; ".join(f"{where}: {message}" for where, message in problems)


# Limits on a policy document's text, checked before it is turned into values: the shipped
# policy is 1 kB, nests 3 levels deep and has numbers of a few digits.
MAX_POLICY_CHARS = 100_000
MAX_DEPTH = 10
MAX_NUMBER_CHARS = 30
NUMBER_TAGS = {"tag:yaml.org,2002:int", "tag:yaml.org,2002:float"}
_RESOLVER = yaml.resolver.Resolver()
# Text PostgreSQL (and UTF-8) cannot hold, reachable through YAML's escapes ("\0", "\ud800").
UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def _yaml_problem(event: yaml.Event, depth: int) -> str | None:
    """What makes one parser event unacceptable: deep nesting (the loader recurses, and
    validation walks it), aliases (a few lines can expand to millions of values), a NUL
    (PostgreSQL cannot store it), a number too long to mean anything (4,300 digits is
    more than Python converts at all)."""
    if depth > MAX_DEPTH:
        return f"nested more than {MAX_DEPTH} levels deep"
    if isinstance(event, yaml.AliasEvent):
        return "aliases (*name) are not allowed: write each value out"
    if not isinstance(event, yaml.ScalarEvent):
        return None
    if UNSTORABLE.search(event.value):
        return "a NUL character or a lone surrogate escape (\\ud800) cannot be stored"
    if event.implicit[0] and len(event.value) > MAX_NUMBER_CHARS:  # plain: no quotes
        tag = _RESOLVER.resolve(yaml.ScalarNode, event.value, (True, False))
        if tag in NUMBER_TAGS:
            return f"a number has at most {MAX_NUMBER_CHARS} characters"
    return None


def _check_yaml_shape(text: str) -> None:
    """Walk the parser's events (iteratively: no recursion, no values built yet)."""
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
        problem = _yaml_problem(event, depth)
        if problem is not None:
            where = f"line {event.start_mark.line + 1}: " if event.start_mark else ""
            raise PolicyError(where + problem)


def load_policy_yaml(text: str) -> object:
    """YAML text written for a policy document (the whole of it, or a part such as an
    effect's settings) as values, held to the limits above; PolicyError when it cannot be
    read (the YAML parser's error is its cause)."""
    if len(text) > MAX_POLICY_CHARS:
        raise PolicyError(f"a policy document is at most {MAX_POLICY_CHARS:,} characters")
    try:
        _check_yaml_shape(text)
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise PolicyError(f"not valid YAML: {exc}") from exc
    except (ValueError, OverflowError) as exc:  # e.g. a date such as 2026-02-30
        raise PolicyError(f"a value cannot be read: {exc}") from exc


def parse_policy_text(text: str) -> PolicyDocument:
    data = load_policy_yaml(text)
    if not isinstance(data, dict):
        raise PolicyError("a policy document is a mapping of keys to values")
    try:
        return PolicyDocument.model_validate(data, context=NEW_VERSION)
    except ValidationError as exc:
        raise PolicyError(describe_validation_error(exc)) from exc


@transaction.atomic(durable=True)
def policy_version_create(
    *, document: PolicyDocument, author: User | None = None
) -> tuple[PolicyVersion, bool]:
    """Store a version. Loading the same document again is a no-op; a different one is refused.
    A new version's name must be usable in addresses (whoever built the document)."""
    return _version_create(document, author)


@transaction.atomic(durable=True)
def policy_version_activate(*, name: str, user: User | None = None) -> PolicyVersion:
    """Make one version the active one (see _version_activate for how two at once behave)."""
    return _version_activate(name, user)


def policy_version_activate_in_transaction(*, name: str, user: User | None = None) -> PolicyVersion:
    """policy_version_activate inside the caller's transaction: for a service that checks
    more (a fresh simulation) under the same locks before the version becomes active."""
    return _version_activate(name, user)


def policy_load_file(*, path: Path, activate: bool) -> tuple[PolicyVersion, bool]:
    document = parse_policy_text(path.read_text(encoding="utf-8"))
    with transaction.atomic(durable=True):
        return _store(document, activate=activate)


def policy_ensure_defaults(*, active: str = REFERENCE_VERSION) -> list[PolicyVersion]:
    """Load every shipped default, each in its own transaction; `active` becomes the active
    version when none is (the reference policy for the case set and the tests)."""
    return [policy_load_file(path=path, activate=False)[0] for path in shipped(first=active)]


def policy_ensure_defaults_in_transaction() -> list[PolicyVersion]:
    """policy_ensure_defaults inside the caller's transaction: for a dry run that rolls back
    everything it did (the classifier evaluation)."""
    return [
        _store(parse_policy_text(path.read_text(encoding="utf-8")), activate=False)[0]
        for path in shipped(first=REFERENCE_VERSION)
    ]


def shipped(*, first: str) -> list[Path]:
    """The shipped policy files (each named after its version), `first` first: the first one
    stored becomes the active version when none is."""
    return sorted(DEFAULTS_DIR.glob("*.yaml"), key=lambda path: (path.stem != first, path.stem))


def _store(document: PolicyDocument, *, activate: bool) -> tuple[PolicyVersion, bool]:
    """Store a document and make it active if asked, or if no version is."""
    version, created = _version_create(document, None)
    no_active = not PolicyVersion.objects.filter(is_active=True).exists()
    if activate or no_active:
        version = _version_activate(version.name, None)
    return version, created


def _version_create(document: PolicyDocument, author: User | None) -> tuple[PolicyVersion, bool]:
    existing = PolicyVersion.objects.filter(name=document.version).first()
    if existing is not None:
        if existing.checksum != document.checksum():
            raise PolicyNameTaken(document.version)
        return existing, False
    problem = version_name_problem(document.version)
    if problem is not None:
        raise PolicyError(problem, where="version")
    _checked_as_new(document)
    _groups_exist(document)
    if author is not None:
        _approvers_exist(document)
    version = PolicyVersion.objects.create(
        name=document.version,
        document=document.stored(),
        checksum=document.checksum(),
        note=document.note,
        author=author,
        parent=PolicyVersion.objects.filter(is_active=True).first(),
    )
    _forget_businesses()
    return version, True


def _checked_as_new(document: PolicyDocument) -> None:
    """Whoever built the document (a form, a file, a command), it is held to every rule a new
    version is (NEW_VERSION): what its effects may send, and where, by the settings of now."""
    try:
        PolicyDocument.model_validate(document.stored(), context=NEW_VERSION)
    except ValidationError as exc:
        raise PolicyError(describe_validation_error(exc)) from exc


def _groups_exist(document: PolicyDocument) -> None:
    """A catalogue's routes and record effects are owned by groups of people that exist: a
    group nobody is in, or a misspelt one, would leave its work with no one."""
    if document.catalogue is None:
        return
    owners = {f"catalogue.routes.{n}.group": r.group for n, r in document.catalogue.routes.items()}
    for name, effect in document.catalogue.effects.items():
        if effect.record is not None and effect.record.group:
            owners[f"catalogue.effects.{name}.record.group"] = effect.record.group
    known = set(Group.objects.filter(name__in=owners.values()).values_list("name", flat=True))
    for where, group in sorted(owners.items()):
        if group not in known:
            raise PolicyError(f"there is no group named {group!r}", where=where)


def _approvers_exist(document: PolicyDocument) -> None:
    """A version a person writes (the console's editors) names only groups that exist for its
    approval rules: a misspelt team would leave every request it should decide waiting for no
    one, then escalate to no one. (The shipped files and `load_policy` are not held to it:
    they are loaded before `setup_roles` makes the groups.)"""
    rules = {f"approvals.{effect}": rule for effect, rule in document.approvals.items()}
    if document.amount_approval is not None:
        rules["amount_approval"] = document.amount_approval
    for name, signal in document.signals.items():
        if signal.approval is not None:
            rules[f"signals.{name}.approval"] = signal.approval
    named = {f"{place}.group": rule.group for place, rule in rules.items()}
    named |= {f"{p}.escalate_to": r.escalate_to for p, r in rules.items() if r.escalate_to}
    known = set(Group.objects.filter(name__in=named.values()).values_list("name", flat=True))
    for where, group in sorted(named.items()):
        if group not in known:
            raise PolicyError(f"there is no group named {group!r}", where=where)


def _version_activate(name: str, user: User | None) -> PolicyVersion:
    """Locks every version row (in primary-key order, so two activations cannot deadlock)
    before looking at which one is active: a second activation waits for the first to commit
    and then sees its result, instead of missing the newly active row and tripping the
    single-active constraint."""
    if user is not None and not user.has_perm("policy.activate_policyversion"):
        raise PermissionDenied("you may not activate policy versions")
    versions = list(PolicyVersion.objects.select_for_update().order_by("pk"))
    previous = next((v.name for v in versions if v.is_active), None)
    target = next((v for v in versions if v.name == name), None)
    if target is None:
        raise PolicyVersion.DoesNotExist(f"no policy version named {name!r}")
    for version in versions:
        if version.is_active and version.pk != target.pk:
            version.is_active = False
            version.save(update_fields=["is_active"])
    if not target.is_active:
        target.is_active = True
        target.activated_at = timezone.now()
        target.save(update_fields=["is_active", "activated_at"])
        # The trail every run's decision can be traced back to (audit records it).
        version_activated.send(sender=PolicyVersion, name=name, previous=previous, user=user)
        _forget_businesses()
    return target


def _forget_businesses() -> None:
    """This process reads the stored versions' catalogues again (policy.selectors): now, for
    the rest of this transaction, and once it commits, for everything after."""
    selectors.forget()
    transaction.on_commit(selectors.forget)


def policy_available(*, name: str | None) -> bool:
    """Whether policy_get(name=name) finds a version: runs can be decided."""
    if name:
        return PolicyVersion.objects.filter(name=name).exists()
    return PolicyVersion.objects.filter(is_active=True).exists()


def policy_get(*, name: str | None, document: bool = True) -> PolicyVersion:
    """The named version, or the active one when name is None.

    With document=False the stored document is left in the database until it is read: a
    process validates each version once (`PolicyVersion.parsed`), so the pipeline, which
    asks for the policy on every run, reads and decodes it only the first time."""
    versions = PolicyVersion.objects.all() if document else PolicyVersion.objects.defer("document")
    if name:
        return versions.get(name=name)
    return versions.get(is_active=True)


def policy_business(*, name: str | None) -> Catalogue:
    """The business the named version (the active one when None) decides for; the reference
    catalogue while there is no version to decide."""
    try:
        return policy_get(name=name, document=False).parsed.business
    except PolicyVersion.DoesNotExist:
        return reference_catalogue()
