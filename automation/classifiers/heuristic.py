"""Offline, deterministic reading: keyword scores and regular expressions, honest confidence.

The default classifier, so the console works with no model service. It proposes like any
model would (and policy checks it like any model's proposal): a category from the words of
the request, the effect the text asks for, and the amounts, dates and references it finds,
each with the sentence it came from. Confidence falls when signals are weak or conflict.
"""

from __future__ import annotations

import re
from typing import Any

from automation.classifiers import ClassifierInput
from automation.schemas import EffectName, RequestType, Route

VERSION = "heuristic-1"
KEYWORDS: dict[str, tuple[str, ...]] = {
    RequestType.SUPPORT: (
        "access",
        "log in",
        "login",
        "locked out",
        "password",
        "error",
        "not working",
        "help",
        "bug",
        "cannot",
        "support",
    ),
    RequestType.BILLING: (
        "invoice",
        "refund",
        "charge",
        "charged",
        "payment",
        "billing",
        "vat",
        "card",
        "credit note",
        "receipt",
        "finance",
    ),
    RequestType.SALES: (
        "quote",
        "pricing",
        "price",
        "licence",
        "license",
        "seats",
        "purchase",
        "upgrade",
        "trial",
        "offer",
    ),
    RequestType.SECURITY: (
        "suspicious",
        "sign-in",
        "sign-ins",
        "fraud",
        "breach",
        "phishing",
        "unauthorised",
        "unauthorized",
        "compromised",
        "account review",
    ),
}
ROUTES = {
    RequestType.SUPPORT: Route.SERVICE_DESK,
    RequestType.BILLING: Route.FINANCE,
    RequestType.SALES: Route.COMMERCIAL,
    RequestType.SECURITY: Route.SECURITY_REVIEW,
}
EFFECT_CUES: dict[str, tuple[str, ...]] = {
    EffectName.QUEUE_ACCOUNT_REVIEW: ("account review", "review the account", "review of"),
    EffectName.SEND_INTERNAL_NOTIFICATION: ("notify", "notification", "let finance know"),
    EffectName.CREATE_FOLLOW_UP: ("follow up", "follow-up", "call back", "get back", "reply"),
}
AMOUNT = re.compile(
    r"(?:(?P<symbol>[€$£])\s?(?P<a>\d[\d.,']*\d|\d))|(?:(?P<b>\d[\d.,' ]*\d|\d)\s?"
    r"(?P<code>EUR|USD|GBP|CHF|SEK|NOK|DKK|PLN)\b)"
)
DATE = re.compile(
    r"\b(\d{4}-\d{2}-\d{2}|\d{1,2} (?:January|February|March|April|May|June|July|August|"
    r"September|October|November|December) \d{4})\b"
)
REFERENCE = re.compile(r"\b[A-Z]{2,4}-\d{3,8}\b")
SYMBOLS = {"€": "EUR", "$": "USD", "£": "GBP"}


def _hits(text: str, words: tuple[str, ...]) -> int:
    return sum(len(re.findall(rf"\b{re.escape(word)}\b", text)) for word in words)


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if s.strip()]


def _source(sentences: list[str], found: str) -> str:
    return next((s for s in sentences if found in s), found)


def extract(text: str) -> dict[str, dict[str, Any]]:
    """Amounts, dates and references, each with the sentence it was read from."""
    sentences = _sentences(text)
    fields: dict[str, dict[str, Any]] = {}
    if match := AMOUNT.search(text):
        number = match.group("a") or match.group("b")
        currency = SYMBOLS.get(match.group("symbol") or "", match.group("code") or "")
        value = f"{number} {currency}".strip()
        fields["amount"] = {
            "value": value,
            "confidence": 0.8,
            "source": _source(sentences, match.group(0)),
        }
    if match := DATE.search(text):
        fields["date"] = {
            "value": match.group(1),
            "confidence": 0.85,
            "source": _source(sentences, match.group(1)),
        }
    if match := REFERENCE.search(text):
        fields["reference"] = {
            "value": match.group(0),
            "confidence": 0.9,
            "source": _source(sentences, match.group(0)),
        }
    return fields


def read(normalized: dict[str, Any]) -> dict[str, Any]:
    """The proposal for one event; pure, so tests and replays get the same answer."""
    original = f"{normalized.get('subject', '')}. {normalized.get('body', '')}"
    text = original.lower()
    scores = {category: _hits(text, words) for category, words in KEYWORDS.items()}
    ranked = sorted(
        scores.items(), key=lambda item: (-item[1], item[0] != normalized.get("request_type"))
    )
    (category, best), (_, second) = ranked[0], ranked[1]
    if best == 0:
        # No signal in the words: keep the stated type, and say how little this is worth.
        category, confidence = normalized.get("request_type", RequestType.SUPPORT), 0.3
    else:
        # Keywords are never certain: even a clear, unopposed signal stays below 0.9.
        strength = min(0.9, 0.55 + 0.15 * best)
        confidence = strength * best / (best + second)
    cues = {effect: _hits(text, words) for effect, words in EFFECT_CUES.items()}
    effect = max(cues, key=lambda name: cues[name]) if any(cues.values()) else None
    if effect is None:
        requested = normalized.get("requested_action", "")
        known = {member.value for member in EffectName}
        effect = requested if requested in known else EffectName.CREATE_FOLLOW_UP
        confidence *= 0.9
    return {
        "category": str(category),
        "recommended_route": str(ROUTES[RequestType(category)]),
        "requested_effect": str(effect),
        "reason_code": f"{category}_keywords" if best else "no_clear_signal",
        "confidence": round(confidence, 2),
        "fields": extract(original),
    }


class HeuristicClassifier:
    name = "heuristic"
    version = VERSION

    def classify(self, event: ClassifierInput, attempt: int, *, deadline: float) -> Any:
        return read(event.normalized)
