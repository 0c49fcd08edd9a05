"""Risk signals: a policy's phrases and patterns matched on what a message says and carries.

Deterministic and explainable: the same text and policy version give the same hits, and each
hit names the phrase and the sentence it was found in, so an approver sees why. Phrases match
whole words, ignoring case, accents and spacing: "Passwort geändert" matches "PASSWORT
geandert" across a line break (an umlaut spelt "ae" is another word: list both). Patterns are
regular expressions, matched on the same folded text (lower case, no accents).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache

from policy.schemas import PolicyDocument, SignalAction, SignalRule

SENTENCE_LIMIT = 240
_SPACE = re.compile(r"\s+")
# Typographic apostrophes (U+2019 and kin) and hyphens are written plainly.
_PLAIN = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'", "\u2010": "-", "\u2011": "-"})
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n\s*\n")


@dataclass(frozen=True)
class SignalHit:
    name: str
    version: int
    action: SignalAction
    matched: str  # the phrase or pattern that hit
    sentence: str  # where, in the sender's words

    @property
    def rule_id(self) -> str:
        return f"signal.{self.name}"


def fold(text: str) -> str:
    """Lower case, no accents, one space between words: what phrases are compared on."""
    decomposed = unicodedata.normalize("NFKD", text.casefold().translate(_PLAIN))
    bare = "".join(c for c in decomposed if not unicodedata.combining(c))
    return _SPACE.sub(" ", bare).strip()


@lru_cache(maxsize=4096)
def _phrase_pattern(phrase: str) -> tuple[str, re.Pattern[str]]:
    """The folded phrase, and the pattern that finds it as whole words."""
    folded = fold(phrase)
    return folded, re.compile(rf"(?<!\w){re.escape(folded)}(?!\w)")


@lru_cache(maxsize=1024)
def _pattern(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE)


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]


def _sentence_with(text: str, found: re.Pattern[str]) -> str:
    for sentence in _sentences(text):
        if found.search(fold(sentence)):
            return _short(sentence)
    return _short(text)  # the match spans sentences: show the start of the text


def _short(sentence: str) -> str:
    flat = _SPACE.sub(" ", sentence).strip()
    return flat if len(flat) <= SENTENCE_LIMIT else flat[: SENTENCE_LIMIT - 1] + "…"


def _first_hit(rule: SignalRule, folded: str) -> tuple[str, re.Pattern[str]] | None:
    for language in sorted(rule.phrases):
        for phrase in rule.phrases[language]:
            words, pattern = _phrase_pattern(phrase)
            # The substring test first: most phrases are not in a message at all, and the
            # pattern, which starts with a look-behind, tries every position of the text.
            if words in folded and pattern.search(folded):
                return phrase, pattern
    for text in rule.patterns:
        pattern = _pattern(text)
        if pattern.search(folded):
            return text, pattern
    return None


def match_signals(policy: PolicyDocument, text: str) -> list[SignalHit]:
    """Every signal of the policy found in the text, by name: at most one hit each."""
    folded = fold(text)
    hits = []
    for name in sorted(policy.signals):
        rule = policy.signals[name]
        found = _first_hit(rule, folded)
        if found is not None:
            matched, pattern = found
            sentence = _sentence_with(text, pattern)
            hits.append(SignalHit(name, rule.version, rule.action, matched, sentence))
    return hits
