"""The approval binding: what an approval authorises, and what an approver was shown."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields


@dataclass(frozen=True)
class Binding:
    """This input (its fingerprint), under these versions, for this effect.

    A request stores the binding it was opened for, a decision the one its approver saw, and
    the run has one now: an approval authorises the run only while all three are equal.
    """

    fingerprint: str
    workflow_version: str
    policy_version: str
    effect: str

    def as_dict(self) -> dict[str, str]:
        """The stored JSON form (checkpoints, audit rows)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, str]) -> Binding:
        """Every field required: nobody approves a part of the binding they were not shown."""
        return cls(**{field.name: data[field.name] for field in fields(cls)})
