"""Policy versions whose catalogue configures effects for a test: the active version's document
with some effects of its catalogue (the reference catalogue when it has none) replaced.

    version = activate_effects({"send_internal_notification": http_effect(url, read_timeout=0.3)})

An effect is delivered by the catalogue of the version that authorised it, so a test that
changes an effect's configuration stores a new version and writes new effects under it.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from accounts.roles import roles_ensure
from policy.catalogue import reference_catalogue
from policy.models import PolicyVersion
from policy.schemas import NEW_VERSION, PolicyDocument
from policy.services import parse_policy_text, policy_version_activate, policy_version_create

# The variable a test's HTTP effects are signed with (tests set it with monkeypatch).
SIGNING_VARIABLE = "TEST_EFFECT_SIGNING_SECRET"
# Every variable the tests' catalogues (and the shipped examples they load) name as a secret:
# declared for effects in every test (tests/conftest.py), as an operator would.
TEST_SECRETS = frozenset(
    {
        SIGNING_VARIABLE,
        "TEST_EFFECT_HELPDESK_TOKEN",
        "TEST_EFFECT_WARRANTY_DESK_TOKEN",
        "HELPDESK_TOKEN",
        "HELPDESK_SIGNING_KEY",
        "HELPDESK_AUTHORIZATION",
        "PAYMENTS_AUTHORIZATION",
        "PAYMENTS_SIGNING_KEY",
        "DESK_WEBHOOK_TOKEN",
    }
)
_numbers = itertools.count(1)


def http_effect(url: str, **http: Any) -> dict[str, Any]:
    """An `http` effect entry posting to `url`, signed with SIGNING_VARIABLE's secret. It
    keeps the label and description of the effect it replaces."""
    return {
        "adapter": "http",
        "http": {"url": url, "signing": {"secret": SIGNING_VARIABLE}, **http},
    }


def email_reply_effect(templates: dict[str, dict[str, str]], **config: Any) -> dict[str, Any]:
    """An `email_reply` effect entry with these templates per language."""
    return {
        "adapter": "email_reply",
        "email_reply": {"templates": templates, **config},
    }


def with_effects(
    effects: dict[str, dict[str, Any]], *, checked: bool = True, **changes: Any
) -> PolicyDocument:
    """The active document with these catalogue effects (added or replaced) and top-level
    `changes`, under a new version name; `checked=False` skips the checks of a save (what a
    version written straight into the table would be)."""
    active = PolicyVersion.objects.get(is_active=True)
    data = active.parsed.stored()
    catalogue = changes.pop("catalogue", None) or data.get("catalogue")
    catalogue = catalogue or reference_catalogue().model_dump(mode="json", exclude_none=True)
    for name, entry in effects.items():
        words = {"label": "Tell the receiver", "description": "An effect of the test."}
        was = catalogue["effects"].get(name) or words
        catalogue["effects"][name] = {
            "label": was["label"],
            "description": was["description"],
            **entry,
        }
    data.update(catalogue=catalogue, version=f"{active.name}-fx{next(_numbers)}", **changes)
    return PolicyDocument.model_validate(data, context=NEW_VERSION if checked else None)


def activate_effects(effects: dict[str, dict[str, Any]], **changes: Any) -> PolicyVersion:
    """Store and activate with_effects(...): effects written from now on are delivered by it.
    The role groups are made first: a catalogue names the groups that own its work."""
    roles_ensure()
    version, _ = policy_version_create(document=with_effects(effects, **changes))
    return policy_version_activate(name=version.name)


def force_effects(effects: dict[str, dict[str, Any]]) -> PolicyVersion:
    """with_effects(...) written straight into the table and activated, past every check a
    save makes: what a delivery must still refuse to send."""
    roles_ensure()
    document = with_effects(effects, checked=False)
    PolicyVersion.objects.create(
        name=document.version, document=document.stored(), checksum=document.checksum()
    )
    return policy_version_activate(name=document.version)


# A business of its own for the correction form's tests (tests/data/venue-hire-1.yaml).
VENUE_HIRE = Path(__file__).resolve().parent / "data" / "venue-hire-1.yaml"


def activate_venue_hire() -> PolicyVersion:
    """Store and activate the venue's version (the role groups first: its routes name one)."""
    roles_ensure()
    version, _ = policy_version_create(
        document=parse_policy_text(VENUE_HIRE.read_text(encoding="utf-8"))
    )
    return policy_version_activate(name=version.name)
