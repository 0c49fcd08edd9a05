"""Offline, deterministic reading: keyword scores and regular expressions, honest confidence.

The default classifier, so the console works with no model service. It proposes like any
model would (and policy checks it like any model's proposal): a category from the words of
the request, the effect the text asks for, and the amounts, dates and references it finds,
each with the sentence it came from. Confidence falls when signals are weak or conflict.
"""

from __future__ import annotations

import re
from typing import Any

from automation.classifiers.base import ClassifierInput
from automation.customers import references_in
from automation.extraction import CURRENCIES, MONTH_PATTERN, parse_date
from automation.mailtext import MessageParts, split_text
from automation.schemas import EffectName, MessagePart, RequestType, Route, event_text, is_mail

VERSION = "heuristic-3"
# The reason code of a reading with no clear signal (a classifier's explicit abstention).
UNCLEAR = "unclear"
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
        "complaint",
        "broken",
        # de, fr, es
        "passwort",
        "anmeldung",
        "fehler",
        "mot de passe",
        "connexion",
        "contraseña",
        "no funciona",
        "kennwort",
        "funktioniert nicht",
        "störung",
        "erreur",
        "ne fonctionne pas",
        "ne marche pas",
        "acceso",
        "iniciar sesión",
        # nl, it
        "wachtwoord",
        "inloggen",
        "werkt niet",
        "storing",
        "foutmelding",
        "accesso",
        "accedere",
        "errore",
        "non funziona",
        "assistenza",
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
        "charged twice",
        "double charge",
        "rechnung",
        "erstattung",
        "facture",
        "remboursement",
        "factura",
        "reembolso",
        "zahlung",
        "gutschrift",
        "paiement",
        "pago",
        "cobro",
        # nl, it
        "factuur",
        "terugbetaling",
        "betaling",
        "creditnota",
        "fattura",
        "rimborso",
        "pagamento",
        "nota di credito",
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
        "angebot",
        "preis",
        "lizenz",
        "devis",
        "tarif",
        "presupuesto",
        "precio",
        "bestellung",
        "commande",
        "licencia",
        "cotización",
        # nl, it
        "offerte",
        "prijs",
        "prijsopgave",
        "licentie",
        "bestelling",
        "preventivo",
        "prezzo",
        "licenza",
        "offerta",
        "ordine",
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
        "verdächtig",
        "verdächtige",
        "kompromittiert",
        "suspect",
        "suspecte",
        "compromis",
        "sospechoso",
        "gehackt",
        "unbefugt",
        "piratage",
        "piraté",
        "hackeado",
        "no autorizado",
        # nl, it
        "verdacht",
        "verdachte",
        "onbevoegd",
        "sospetto",
        "sospetta",
        "compromesso",
        "non autorizzato",
        "violato",
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
CODES = "|".join(sorted(CURRENCIES))
AMOUNT = re.compile(
    rf"(?:(?P<symbol>[€$£])\s?(?P<a>\d[\d.,']*\d|\d))"
    rf"|(?:\b(?P<pre>{CODES})\s?(?P<c>\d[\d.,']*\d|\d))"
    rf"|(?:(?P<b>\d[\d.,' ]*\d|\d)\s?(?P<code>{CODES})\b)"
    # A three-letter code after a number with decimals is read as a currency, known or not:
    # an unknown one is then held for a person instead of being dropped.
    r"|(?:(?P<d>\d[\d.,' ]*[.,]\d{2})\s?(?P<other>[A-Z]{3})\b)"
    # The symbol after the number, as most of Europe writes it: "1 250,00 €".
    # Thousands in groups of three (a space, a dot, a comma or an apostrophe), so a number
    # written before it ("invoice 4411 1 250,00 €") is not read into the amount.
    "|(?:(?P<e>\\d{1,3}(?:[ \u00a0\u202f.,']\\d{3})+(?:[.,]\\d{2})?|\\d+(?:[.,]\\d{1,2})?)"
    "[\u00a0\u202f ]?(?P<post>[€$£]))"
)
# The amount a message is about: a total, an amount due or in dispute, not a unit price.
TOTAL = re.compile(
    r"\b(total|amount due|grand total|balance due|disputed|charged twice|"
    r"gesamt\w*|summe|betrag|strittig|montant|à payer|contest\w+|importe|total a pagar|"
    r"en disputa|totaal|te betalen|betwist\w*|totale|importo|da pagare|contestat\w+)\b",
    re.IGNORECASE,
)
DATE = re.compile(
    rf"\b(\d{{4}}-\d{{2}}-\d{{2}}"
    rf"|\d{{1,2}}\.?\s(?:de\s)?(?:{MONTH_PATTERN})\.?\s(?:de\s)?\d{{4}}"
    rf"|(?:{MONTH_PATTERN})\.?\s\d{{1,2}},?\s\d{{4}})\b",
    re.IGNORECASE,
)
# INV-4411, PO-2027-0088: letters, then one to three groups of digits.
REFERENCE = re.compile(r"\b(?!CUST-)[A-Z]{2,4}(?:-\d{2,8}){1,3}\b")
SYMBOLS = {"€": "EUR", "$": "USD", "£": "GBP"}


def _hits(text: str, words: tuple[str, ...]) -> int:
    return sum(len(re.findall(rf"\b{re.escape(word)}\b", text)) for word in words)


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+|\n+", text) if s.strip()]


def _source(sentences: list[str], found: str) -> str:
    return next((s for s in sentences if found in s), found)


def extract(text: str) -> dict[str, dict[str, Any]]:
    """Amounts, dates and references, each with the sentence it was read from."""
    sentences = _sentences(text)
    fields: dict[str, dict[str, Any]] = {}
    if match := _amount(text):
        number = next(match.group(g) for g in "abcde" if match.group(g))
        currency = SYMBOLS.get(match.group("symbol") or match.group("post") or "") or (
            match.group("code") or match.group("pre") or match.group("other") or ""
        )
        value = f"{number.strip()} {currency}".strip()
        fields["amount"] = {
            "value": value,
            "confidence": 0.8,
            "source": _source(sentences, match.group(0)),
        }
    if found := _date(text):
        fields["date"] = {
            "value": found,
            "confidence": 0.85,
            "source": _source(sentences, found),
        }
    if match := REFERENCE.search(text):
        fields["reference"] = {
            "value": match.group(0),
            "confidence": 0.9,
            "source": _source(sentences, match.group(0)),
        }
    if customers := references_in(text):
        fields["customer_reference"] = {
            "value": customers[0],
            "confidence": 0.9 if len(customers) == 1 else 0.6,
            "source": _source(sentences, customers[0]),
        }
    return fields


def _date(text: str) -> str | None:
    """The first date, unless a date-shaped text is no date at all: that one is reported."""
    dates = [match.group(1) for match in DATE.finditer(text)]
    for candidate in dates:
        try:
            parse_date(candidate)
        except ValueError:
            return candidate
    return dates[0] if dates else None


def _amount(text: str) -> re.Match[str] | None:
    """The amount that matters: the one on a line that says it is the total, else the first."""
    matches = list(AMOUNT.finditer(text))
    for match in matches:
        line_start = text.rfind("\n", 0, match.start()) + 1
        if TOTAL.search(text[line_start : match.start()]):
            return match
    return matches[0] if matches else None


# What an e-mail most likely wants when it names no effect: it states no action of its own.
MAIL_EFFECTS = {
    RequestType.SUPPORT: EffectName.CREATE_FOLLOW_UP,
    RequestType.BILLING: EffectName.SEND_INTERNAL_NOTIFICATION,
    RequestType.SALES: EffectName.CREATE_FOLLOW_UP,
    RequestType.SECURITY: EffectName.QUEUE_ACCOUNT_REVIEW,
}


def read(normalized: dict[str, Any]) -> dict[str, Any]:
    """The proposal for one event; pure, so tests and replays get the same answer.

    An e-mail's intent is read from its subject and the sender's own words; what it carries
    along (quotes, forwards, attachments) is read only when those say nothing, and then at
    half the confidence. Facts are taken from the sender's words first, and each says which
    part of the message it came from."""
    mail = is_mail(normalized)
    subject = str(normalized.get("subject", ""))
    if mail:
        parts = split_text(str(normalized.get("body", "")))
        intent = f"{subject}.\n\n{parts.own}"
        original = event_text(normalized)
    else:
        intent = original = f"{subject}. {normalized.get('body', '')}"
    category, best, confidence, tied = _intent(intent.lower(), normalized)
    carried = mail and best == 0
    if carried:  # nothing in the sender's own words: what they sent along is all there is
        category, best, confidence, tied = _intent(original.lower(), normalized)
        confidence /= 2
    text = (original if carried else intent).lower()
    cues = {effect: _hits(text, words) for effect, words in EFFECT_CUES.items()}
    effect = max(cues, key=lambda name: cues[name]) if any(cues.values()) else None
    if effect is None:
        requested = normalized.get("requested_action", "")
        known = {member.value for member in EffectName}
        if mail:
            effect = MAIL_EFFECTS[RequestType(category)]
        else:
            effect = requested if requested in known else EffectName.CREATE_FOLLOW_UP
        confidence *= 0.9
    fields = {**extract(original), **extract(intent)}  # the sender's own words win
    if mail:
        _mark_parts(fields, subject, parts, normalized)
        if normalized.get("sender_name"):
            fields["sender_name"] = {"value": normalized["sender_name"][:500], "confidence": 0.95}
    # No signal, or two categories signalled equally with nothing stated to choose between
    # them: the category is a fallback, and the reading says so (policy sends it to a person).
    reason = "unclear.tie" if tied else f"{category}_keywords" if best else UNCLEAR
    return {
        "category": str(category),
        "recommended_route": str(ROUTES[RequestType(category)]),
        "requested_effect": str(effect),
        "reason_code": f"{reason}.carried" if carried and best else reason,
        "confidence": round(confidence, 2),
        "fields": fields,
    }


def _intent(text: str, normalized: dict[str, Any]) -> tuple[str, int, float, bool]:
    """(category, its keyword hits, confidence, whether it is a guess between equals) read
    from `text`, lower-cased."""
    scores = {category: _hits(text, words) for category, words in KEYWORDS.items()}
    stated = normalized.get("request_type")
    ranked = sorted(scores.items(), key=lambda item: (-item[1], item[0] != stated))
    (category, best), (runner_up, second) = ranked[0], ranked[1]
    tied = best > 0 and best == second and stated not in (category, runner_up)
    if best == 0:
        # No signal in the words: keep the stated type, and say how little this is worth.
        category, confidence = normalized.get("request_type", RequestType.SUPPORT), 0.3
    else:
        # Keywords are never certain: even a clear, unopposed signal stays below 0.9.
        strength = min(0.9, 0.55 + 0.15 * best)
        confidence = strength * best / (best + second)
    return str(category), best, confidence, tied


def _mark_parts(
    fields: dict[str, dict[str, Any]],
    subject: str,
    parts: MessageParts,
    normalized: dict[str, Any],
) -> None:
    """Say which part of the message each fact was read from."""
    attachments = [str(a.get("text") or "") for a in normalized.get("attachments") or []]
    for found in fields.values():
        source = str(found.get("source") or found.get("value") or "")
        if source and source in subject:
            found["part"] = MessagePart.SUBJECT.value
        elif any(source and source in text for text in attachments) and not any(
            source in text for _, text in parts.pieces
        ):
            found["part"] = MessagePart.ATTACHMENT.value
        else:
            found["part"] = parts.kind_of(source)


class HeuristicClassifier:
    name = "heuristic"
    version = VERSION

    def classify(self, event: ClassifierInput, attempt: int, *, deadline: float) -> Any:
        return read(event.normalized)
