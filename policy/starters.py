"""The starters a business is begun from in the console: the shipped documents, read from the
files the repository ships, each an example to edit and save as a new draft (never activated
by itself), and the empty business."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from policy.catalogue import Catalogue
from policy.schemas import ConfidencePolicy, PolicyDocument
from policy.services import DEFAULT_VERSION, DEFAULTS_DIR, PolicyError, load_policy_yaml

EXAMPLES_DIR = Path(__file__).resolve().parent / "examples"
# Starting from nothing: the name proposed for the first version.
NOTHING = "nothing"
NOTHING_NAME = "business-1"
# A new business reads nothing as sure until its ops lead says otherwise: a reading below
# this goes to a person (the reference business's default, default-1.yaml).
NOTHING_CONFIDENCE = 0.6


@dataclass(frozen=True)
class Starter:
    """A shipped document a business may start from: `key` in addresses, `title` in words,
    `sentence` the document's own note."""

    key: str
    title: str
    path: Path

    @property
    def document(self) -> PolicyDocument:
        """The file as a document, as it was shipped (what a new version may send is checked
        when it is saved, by the settings of then)."""
        data = load_policy_yaml(self.path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise PolicyError(f"{self.path.name} is not a policy document")
        return PolicyDocument.model_validate(data)

    @property
    def sentence(self) -> str:
        return self.document.note


STARTERS = (
    Starter("reference", "The reference business", DEFAULTS_DIR / f"{DEFAULT_VERSION}.yaml"),
    Starter("shop", "An online shop's customer service", EXAMPLES_DIR / "shop-1.yaml"),
)


def starter_get(key: str) -> Starter | None:
    return next((starter for starter in STARTERS if starter.key == key), None)


def nothing_document() -> PolicyDocument:
    """The empty business: no request type, route or effect yet. Not a valid document (a
    version needs one of each): a form fills it in, and the schema judges what it saves."""
    empty = Catalogue.model_construct(
        request_types={}, routes={}, effects={}, customer_attributes={}
    )
    return PolicyDocument.model_construct(
        version=NOTHING_NAME,
        routes={},
        allowed_effects=[],
        confidence=ConfidencePolicy(default=NOTHING_CONFIDENCE),
        catalogue=empty,
    )
