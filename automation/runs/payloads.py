"""What a run is judged, approved and delivered by, read from the run: the facts and reading
policy evaluates, the policy version, the approval binding, the effect's payload and key."""

from __future__ import annotations

import hashlib
from typing import Any

from approvals.binding import Binding
from automation.extraction import parse_amount
from automation.mailtext import FORWARDED, OWN, QUOTED, split_text
from automation.runs.models import Run
from automation.runs.parameters import effect_parameters, effect_request
from automation.schemas import is_mail
from policy.catalogue import Catalogue
from policy.evaluation import Decision, EventFacts, Interpretation, Money, evaluate
from policy.models import PolicyVersion
from policy.schemas import PolicyDocument
from policy.services import policy_get


def effect_key(*, scope: str, fingerprint: str, effect: str) -> str:
    """From the request, never the attempt: every retry, replay or racing worker agrees on it.

    The scope is the run's identity scope (Run.identity_scope): one for all e-mail, so two runs
    of one message reach one effect whichever path brought them; a JSON event's channel name,
    which is what the keys of JSON events have always been made of.
    """
    return hashlib.sha256(f"{scope}\n{fingerprint}\n{effect}".encode()).hexdigest()


# A reason code starting with this says the reader found no clear signal (an abstention).
UNCLEAR = "unclear"


def interpretation_of(classification: dict[str, Any]) -> Interpretation:
    """The reading policy judges: category, route, effect, confidence, the `amount` field
    and its currency, every field read as an amount (policy picks the one that is the
    effect's money), and whether the reader abstained (reason code `unclear[.<why>]`)."""
    fields = classification.get("fields") or {}
    reason = str(classification.get("reason_code") or "")
    amount = _amount(fields)
    return Interpretation(
        category=classification["category"],
        route=classification["recommended_route"],
        effect=classification["requested_effect"],
        confidence=classification.get("confidence"),
        amount=amount.value if amount is not None else None,
        currency=amount.currency if amount is not None else None,
        unclear=reason.split(".", 1)[0] == UNCLEAR,
        amounts=_amounts(fields),
    )


def sender_text(run: Run) -> str:
    """What policy's signals are matched on: the subject and everything the message says or
    carries, except its signature and legal disclaimer. The reading takes its request from
    the sender's own words only; the net is wider on purpose. A risk in a forward (new bank
    details in a forwarded invoice) or in the thread a reply quotes (a follow-up to prompts
    nobody started) is still a risk, and policy must see it."""
    normalized = run.normalized or {}
    subject, body = str(normalized.get("subject") or ""), str(normalized.get("body") or "")
    if not is_mail(normalized):
        return f"{subject}\n\n{body}"
    parts = split_text(body)
    carried = [parts.text(kind) for kind in (OWN, QUOTED, FORWARDED)] + [
        str(attachment.get("text") or "")
        for attachment in normalized.get("attachments") or []
        if attachment.get("content_type") == "message/rfc822"
    ]
    return "\n\n".join(text for text in (subject, *carried) if text)


def decision_of(run: Run, policy: PolicyDocument) -> Decision:
    """The run's reading judged under `policy`: the pipeline's decision and a simulation's."""
    return evaluate(
        policy,
        facts_of(run, tier=default_tier(policy.business)),
        interpretation_of(run.classification or {}),
        run.enrichment,
        text=sender_text(run),
        reviewed=frozenset(run.signals_reviewed),
    )


def _amount(fields: dict[str, Any]) -> Money | None:
    """The amount field's number and currency; None when there is none or it cannot be read
    (the extraction checks hold such a run for correction before policy sees it)."""
    return _amounts(fields).get("amount")


def _amounts(fields: dict[str, Any]) -> dict[str, Money | None]:
    """Each field with a value, as an amount in its currency, or None when it reads as none."""
    found: dict[str, Money | None] = {}
    for name, extracted in fields.items():
        value = (extracted or {}).get("value") if isinstance(extracted, dict) else None
        if value is None or str(value).strip() == "":
            continue
        try:
            number, currency = parse_amount(str(value))
        except ValueError:
            found[name] = None
        else:
            found[name] = Money(number, currency)
    return found


def facts_of(run: Run, *, tier: str = "") -> EventFacts:
    """The run's facts; `tier` is a message's when its enrichment names none."""
    if run.normalized is None:
        raise ValueError(f"run {run.pk} has no normalized event yet")
    return event_facts(run.normalized, run.enrichment, tier=tier)


def default_tier(business: Catalogue) -> str:
    """The tier of a customer nobody knows: the catalogue's first tier value ("" for a
    catalogue without tiers)."""
    values = business.tier_values()
    return values[0] if values else ""


def event_facts(
    normalized: dict[str, Any], enrichment: dict[str, Any] | None, *, tier: str = ""
) -> EventFacts:
    """What the policy reads of a normalized event (of a message: its known customer's tier,
    from the run's enrichment; `tier` before the run was enriched, or had none)."""
    if is_mail(normalized):
        # A message states neither type nor action; its tier is the known customer's.
        return EventFacts(
            request_type=None,
            requested_action=None,
            account_tier=(enrichment or {}).get("account_tier") or tier,
        )
    return EventFacts(
        request_type=normalized["request_type"],
        requested_action=normalized["requested_action"],
        account_tier=normalized["account_tier"],
    )


def policy_for(run: Run) -> PolicyVersion:
    """The policy version that decides the run: its channel's, or the active one. Read once
    for the run object in hand; a step that starts a transaction of its own reads it afresh
    (`policy_forget`), so a version activated meanwhile decides."""
    found = run.__dict__.get(_POLICY)
    if found is None:
        found = policy_get(name=run.channel.policy_version or None, document=False)
        run.__dict__[_POLICY] = found
    return found


def policy_known(run: Run, version: PolicyVersion) -> None:
    """The version that decides the run, read already by the caller for the run's channel
    (intake reads it to validate the event): policy_for answers with it."""
    run.__dict__[_POLICY] = version


def policy_forget(run: Run) -> None:
    run.__dict__.pop(_POLICY, None)


_POLICY = "_gatehouse_policy_version"


def binding_of(run: Run) -> Binding:
    return Binding(
        fingerprint=run.fingerprint,
        workflow_version=run.workflow_version,
        policy_version=run.policy_version,
        effect=run.effect_name,
    )


def effect_payload_of(run: Run, business: Catalogue) -> dict[str, Any]:
    """The full, canonical parameters of the effect: what the approver sees and approves.
    An effect whose catalogue entry names parameters carries them too (`params`), and an
    effect that leaves the building what it will send (`request`: a body, a message)."""
    event = run.normalized or {}
    payload = {
        "effect": run.effect_name,
        "route": run.route,
        "event_id": event.get("event_id"),
        "request_type": event.get("request_type") or run.category,
        "account_tier": event.get("account_tier") or (run.enrichment or {}).get("account_tier"),
        "subject": event.get("subject"),
    }
    if is_mail(event):
        payload["sender"] = event.get("sender")
    # The facts the effect acts on (an account reference, an amount) are part of what is
    # approved and delivered, not only evidence beside it.
    fields = (run.classification or {}).get("fields") or {}
    for name, extracted in sorted(fields.items()):
        payload.setdefault(name, extracted["value"])
    reading = run.classification or {}
    params = effect_parameters(business, run.effect_name, run, reading).values
    if params:
        payload["params"] = params
    # What an http or email_reply effect sends; its parameters were checked to render.
    request = effect_request(business, run.effect_name, run, reading, params)
    if request is not None:
        payload["request"] = request
    return payload


def decided_policy_of(run: Run) -> PolicyVersion:
    return PolicyVersion.objects.get(name=run.policy_version)
