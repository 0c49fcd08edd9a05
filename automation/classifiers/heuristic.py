"""Offline, deterministic reading: keyword scores and regular expressions, honest confidence.

The default classifier, so the console works with no model service. It proposes like any
model would (and policy checks it like any model's proposal): a category from the words of
the request, the effect the text asks for, and the amounts, dates and references it finds,
each with the sentence it came from. Confidence falls when signals are weak or conflict.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from automation.classifiers.base import ClassifierInput, recommended_route
from automation.extraction import (
    CURRENCIES,
    DATE_PATTERN,
    parse_amount,
    parse_date,
    reference_pattern,
    references_in,
)
from automation.language import request_language
from automation.mailtext import MessageParts, split_text
from automation.schemas import MessagePart, event_text, is_mail
from policy.catalogue import (
    Catalogue,
    FieldType,
    RequestTypeSpec,
    cue_words,
    reference_catalogue,
)

VERSION = "heuristic-3"
# The reason code of a reading with no clear signal (a classifier's explicit abstention).
UNCLEAR = "unclear"
# How far confidence falls when nothing in the words says which effect is wanted.
GUESSED_EFFECT = 0.9
# How many catalogues' word tables are kept (the versions that read runs at once are few).
CACHED_CATALOGUES = 32


@dataclass(frozen=True)
class Cues:
    """A catalogue's words as the heuristic counts them, in lower case and each once: per
    request type (in the catalogue's order, which breaks ties) each word with what it
    counts; per effect the words that ask for it, in the order that breaks ties."""

    types: dict[str, dict[str, int]]
    effects: dict[str, tuple[str, ...]]

    @classmethod
    def of(cls, business: Catalogue) -> Cues:
        types = {name: _weighted(spec) for name, spec in business.request_types.items()}
        listed = list(business.effects.items())
        # Higher priority first, then the order of the catalogue: max() keeps the first.
        ranked = sorted(listed, key=lambda item: -item[1].cue_priority)
        effects = {
            name: tuple(dict.fromkeys(_plain(word) for word in cue_words(spec.cues)))
            for name, spec in ranked
            if spec.cues
        }
        return cls(types, effects)


def _weighted(spec: RequestTypeSpec) -> dict[str, int]:
    """Each word of a type once (a word listed under two languages counts once), with what it
    counts: the type's weight, or one for a word that only sets the scene."""
    words = {_plain(word): spec.cue_weight for word in cue_words(spec.cues)}
    words.update({_plain(word): 1 for word in cue_words(spec.scene_cues)})
    return words


_CUES: dict[int, tuple[Catalogue, Cues]] = {}


def cues_of(business: Catalogue) -> Cues:
    """The word tables of a catalogue, made once per catalogue object. The entry holds its
    catalogue, so the id it is found by cannot pass to another object meanwhile."""
    cached = _CUES.get(id(business))
    if cached is None or cached[0] is not business:
        if len(_CUES) >= CACHED_CATALOGUES:
            _CUES.clear()
        cached = _CUES[id(business)] = (business, Cues.of(business))
    return cached[1]


CODES = "|".join(sorted(CURRENCIES))
# A currency sign: the euro, the pound, the yen, or a dollar with or without its country.
SIGN = r"(?:US|CA|AU|NZ|[AC])?\$|[€£¥]"
AMOUNT = re.compile(
    rf"(?:(?P<symbol>{SIGN})\s?(?P<a>\d[\d.,'\u2019]*\d|\d))"
    rf"|(?:\b(?P<pre>{CODES})\s?(?P<c>\d[\d.,'\u2019]*\d|\d))"
    rf"|(?:(?P<b>\d[\d.,' \u00a0\u202f]*\d|\d)[\u00a0\u202f ]?(?P<code>{CODES})\b)"
    # A three-letter code after a number with decimals is read as a currency, known or not:
    # an unknown one is then held for a person instead of being dropped.
    r"|(?:(?P<d>\d[\d.,' ]*[.,]\d{2})\s?(?P<other>[A-Z]{3})\b)"
    # The symbol after the number, as most of Europe writes it: "1 250,00 €".
    # Thousands in groups of three (a space, a dot, a comma or an apostrophe), so a number
    # written before it ("invoice 4411 1 250,00 €") is not read into the amount.
    r"|(?:(?P<e>\d{1,3}(?:[ \u00a0\u202f.,']\d{3})+(?:[.,]\d{2})?|\d+(?:[.,]\d{1,2})?)"
    rf"[\u00a0\u202f ]?(?P<post>{SIGN}))"
)
# The amount a message is about: a total, an amount due or in dispute, not a unit price.
TOTAL = re.compile(
    r"\b(total|amount due|grand total|balance due|disputed|charged twice|"
    r"gesamt\w*|summe|betrag|strittig|montant|à payer|contest\w+|importe|total a pagar|"
    r"en disputa|totaal|te betalen|betwist\w*|totale|importo|da pagare|contestat\w+)\b",
    re.IGNORECASE,
)
DATE = re.compile(rf"\b(?P<date>{DATE_PATTERN})\b", re.IGNORECASE)
# INV-4411, PO-2027-0088: letters, then one to three groups of digits.
REFERENCE = re.compile(r"\b(?!CUST-)[A-Z]{2,4}(?:-\d{2,8}){1,3}\b")
PLAIN = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'", "\u2010": "-", "\u2011": "-"})


@lru_cache(maxsize=2048)
def _word(word: str) -> re.Pattern[str]:
    return re.compile(rf"(?<!\w){re.escape(word)}(?!\w)")


def _hits(text: str, words: tuple[str, ...]) -> int:
    # The substring test first: most words are not in a message at all.
    return sum(len(_word(word).findall(text)) for word in words if word in text)


def _plain(text: str) -> str:
    """Lower case, with typographic apostrophes and hyphens written plainly."""
    return text.lower().translate(PLAIN)


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+|\n+", text) if s.strip()]


def _source(sentences: list[str], found: str) -> str:
    return next((s for s in sentences if found in s), found)


def extract(
    text: str,
    *,
    language: str | None = None,
    currency: str | None = None,
    customer_pattern: re.Pattern[str] | None = None,
) -> dict[str, dict[str, Any]]:
    """Amounts, dates and references, each with the sentence it was read from. An amount or
    a date that reads one way is given as a fact ("2340.00 GBP", "2026-12-03"), read in the
    message's `language`; one that does not is given as written, so the checks hold it for a
    person with the message's own words. A customer reference is one `customer_pattern`
    (the business's, else the server's) matches."""
    sentences = _sentences(text)
    fields: dict[str, dict[str, Any]] = {}
    if match := _amount(text):
        fields["amount"] = {
            "value": _amount_value(match.group(0), language, currency),
            "confidence": 0.8,
            "source": _source(sentences, match.group(0)),
        }
    if found := _date(text, language):
        fields["date"] = {
            "value": _date_value(found, language),
            "confidence": 0.85,
            "source": _source(sentences, found),
        }
    if match := REFERENCE.search(text):
        fields["reference"] = {
            "value": match.group(0),
            "confidence": 0.9,
            "source": _source(sentences, match.group(0)),
        }
    if customers := references_in(text, customer_pattern):
        fields["customer_reference"] = {
            "value": customers[0],
            "confidence": 0.9 if len(customers) == 1 else 0.6,
            "source": _source(sentences, customers[0]),
        }
    return fields


# A typed field read from a generic find, and how sure of it the reading is: the first
# amount or date of a message may not be the one the field is about.
FROM_GENERIC = 0.6
GENERIC = {FieldType.REFERENCE: "reference", FieldType.AMOUNT: "amount", FieldType.DATE: "date"}
EMAIL_ADDRESS = re.compile(r"(?<![\w.+-])[\w.+-]+@[\w-]+(?:\.[\w-]+)+")


@lru_cache(maxsize=512)
def _reference(pattern: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![\w-])(?:{pattern})(?![\w-])")


def typed_fields(
    spec: RequestTypeSpec, text: str, found: dict[str, dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """The request type's own fields that `found` lacks, read from `text` by their type: a
    reference by its pattern (or the generic reference), an amount and a date from the
    generic finds, an e-mail address; free text is left to a person or a model."""
    sentences = _sentences(text)
    typed: dict[str, dict[str, Any]] = {}
    for name, field in spec.fields.items():
        if name in found:
            continue
        value, confidence = None, FROM_GENERIC
        if field.type == FieldType.REFERENCE and field.pattern:
            match = _reference(field.pattern).search(text)
            value, confidence = (match.group(0), 0.9) if match else (None, 0.0)
        elif field.type == FieldType.EMAIL:
            match = EMAIL_ADDRESS.search(text)
            value = match.group(0) if match else None
        elif generic := GENERIC.get(field.type):
            if generic in found:
                typed[name] = {**found[generic], "confidence": FROM_GENERIC}
            continue
        if value:
            typed[name] = {
                "value": value,
                "confidence": confidence,
                "source": _source(sentences, str(value)),
            }
    return typed


def _date(text: str, language: str | None = None) -> str | None:
    """The first date, unless a date-shaped text is no date at all (or could be two): that
    one is reported."""
    dates = [match.group("date") for match in DATE.finditer(text)]
    for candidate in dates:
        try:
            parse_date(candidate, language=language)
        except ValueError:
            return candidate
    return dates[0] if dates else None


def _date_value(found: str, language: str | None) -> str:
    try:
        return parse_date(found, language=language).isoformat()
    except ValueError:
        return found


def _amount_value(found: str, language: str | None, currency: str | None) -> str:
    try:
        number, code = parse_amount(found, language=language, currency=currency)
    except ValueError:
        return " ".join(found.split())
    return f"{number} {code}" if code else str(number)


def _amount(text: str) -> re.Match[str] | None:
    """The amount that matters: the one on a line that says it is the total, else the first."""
    matches = list(AMOUNT.finditer(text))
    for match in matches:
        line_start = text.rfind("\n", 0, match.start()) + 1
        if TOTAL.search(text[line_start : match.start()]):
            return match
    return matches[0] if matches else None


def mail_effect(business: Catalogue, category: str) -> str:
    """What an e-mail of a type most likely wants when its words ask for no effect (it states
    no action of its own): the type's default effect, else the catalogue's first effect."""
    return business.request_types[category].default_effect or next(iter(business.effects))


def intent_text(normalized: dict[str, Any], parts: MessageParts | None = None) -> str:
    """What a request is read from: the subject and, for an e-mail, the sender's own words
    (without quotes, forwards, signature and disclaimer); for an event, its body."""
    subject = str(normalized.get("subject", ""))
    if is_mail(normalized):
        parts = parts or split_text(str(normalized.get("body", "")))
        return f"{subject}.\n\n{parts.own}"
    return f"{subject}. {normalized.get('body', '')}"


def read(
    normalized: dict[str, Any],
    *,
    business: Catalogue | None = None,
    routes: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The proposal for one event under a catalogue (the reference one unless given) and the
    version's routes; pure, so tests and replays get the same answer.

    An e-mail's intent is read from its subject and the sender's own words; what it carries
    along (quotes, forwards, attachments) is read only when those say nothing, and then at
    half the confidence. Facts are taken from the sender's words first, and each says which
    part of the message it came from."""
    business = reference_catalogue() if business is None else business
    cues = cues_of(business)
    mail = is_mail(normalized)
    subject = str(normalized.get("subject", ""))
    parts = split_text(str(normalized.get("body", ""))) if mail else MessageParts()
    intent = intent_text(normalized, parts if mail else None)
    original = event_text(normalized) if mail else intent
    category, best, confidence, tied = _intent(_plain(intent), normalized, cues)
    carried = mail and best == 0
    if carried:  # nothing in the sender's own words: what they sent along is all there is
        category, best, confidence, tied = _intent(_plain(original), normalized, cues)
        confidence /= 2
    text = _plain(original if carried else intent)
    effect, guessed = _effect(text, normalized, business, cues, category)
    if guessed:
        confidence *= GUESSED_EFFECT
    # The language the run's enrichment names (the same reading of the same words).
    language = request_language(intent)
    # The sender's own words win.
    pattern = reference_pattern(business.matching)
    fields = {
        **extract(original, language=language, customer_pattern=pattern),
        **extract(intent, language=language, customer_pattern=pattern),
    }
    spec = business.request_types[category]
    for text_read in (intent, original):  # the sender's own words first
        fields.update(typed_fields(spec, text_read, fields))
    if mail:
        _mark_parts(fields, subject, parts, normalized)
        if normalized.get("sender_name"):
            fields["sender_name"] = {"value": normalized["sender_name"][:500], "confidence": 0.95}
    # No signal, or two categories signalled equally with nothing stated to choose between
    # them: the category is a fallback, and the reading says so (policy sends it to a person).
    reason = "unclear.tie" if tied else f"{category}_keywords" if best else UNCLEAR
    return {
        "category": category,
        "recommended_route": recommended_route(business, routes or {}, category),
        "requested_effect": effect,
        "reason_code": f"{reason}.carried" if carried and best else reason,
        "confidence": round(confidence, 2),
        "fields": fields,
    }


def _effect(
    text: str, normalized: dict[str, Any], business: Catalogue, cues: Cues, category: str
) -> tuple[str, bool]:
    """(the effect wanted, whether it is a guess). An e-mail of a type whose default effect
    is always wanted gets that one, whatever else it asks; otherwise the effect whose cues
    are found most often. With no cue, an e-mail gets its type's usual effect and an event
    the action it states (the catalogue's first effect when the catalogue lacks it)."""
    mail = is_mail(normalized)
    spec = business.request_types[category]
    if mail and spec.default_effect_always and spec.default_effect is not None:
        return spec.default_effect, False
    hits = {effect: _hits(text, words) for effect, words in cues.effects.items()}
    if any(hits.values()):
        return max(hits, key=lambda name: hits[name]), False
    if mail:
        return mail_effect(business, category), True
    requested = str(normalized.get("requested_action", ""))
    return (requested if requested in business.effects else next(iter(business.effects))), True


def _score(text: str, words: dict[str, int]) -> int:
    return sum(
        len(_word(word).findall(text)) * weight for word, weight in words.items() if word in text
    )


def _intent(text: str, normalized: dict[str, Any], cues: Cues) -> tuple[str, int, float, bool]:
    """(category, its weighted cue hits, confidence, whether it is a guess between equals)
    read from `text`, lower-cased. Between equal scores the stated type wins, then the type
    listed first in the catalogue."""
    scores = {category: _score(text, words) for category, words in cues.types.items()}
    stated = normalized.get("request_type")
    ranked = sorted(scores.items(), key=lambda item: (-item[1], item[0] != stated))
    (category, best), (runner_up, second) = ranked[0], [*ranked, ("", 0)][1]
    tied = best > 0 and best == second and stated not in (category, runner_up)
    if best == 0:
        # No signal in the words: the ranking kept the stated type first (the catalogue's
        # first type when it states none the catalogue lists); say how little this is worth.
        confidence = 0.3
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
    # Pure and in-process: the pipeline reads with it inside the run's transaction.
    local = True
    version = VERSION

    def classify(self, event: ClassifierInput, attempt: int, *, deadline: float) -> Any:
        return read(event.normalized, business=event.business, routes=event.routes)
