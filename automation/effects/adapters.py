"""Which adapter delivers an effect: the one its catalogue entry names, configured from it.

An effect is delivered by the catalogue of the policy version that authorised it (the
`policy_version` of its authorization), so a later version that changes or removes the
effect never changes how one already written is sent.
"""

from __future__ import annotations

from automation.effects.base import EffectAdapter
from automation.effects.http import HttpAdapter
from automation.effects.local import RecordAdapter
from automation.effects.smtp import EmailReplyAdapter
from policy.catalogue import Catalogue
from policy.models import PolicyVersion, parsed_version
from policy.schemas import PolicyDocument


def adapter_for(business: Catalogue, name: str) -> EffectAdapter:
    """The adapter of effect `name` in this catalogue. An effect it does not list (one
    written before the catalogue changed under a version name reused in a test database)
    is kept as a task row, which loses nothing."""
    spec = business.effects.get(name)
    if spec is not None and spec.http is not None:
        return HttpAdapter(spec.http)
    if spec is not None and spec.email_reply is not None:
        return EmailReplyAdapter(spec.email_reply)
    record = spec.record if spec is not None else None
    group = record.group or "" if record is not None else ""
    return RecordAdapter(group, {route: r.group for route, r in business.routes.items()})


def version_document(name: str) -> PolicyDocument:
    """The validated document of the named version (one small query; validated once per
    process)."""
    pk, checksum = PolicyVersion.objects.values_list("pk", "checksum").get(name=name)
    return parsed_version(pk, name, checksum)


def effect_adapter(name: str, policy_version: str) -> EffectAdapter:
    """The adapter of an effect written under `policy_version`."""
    return adapter_for(version_document(policy_version).business, name)
