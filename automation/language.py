"""The language a request is written in: which template an e-mail reply is written from.

py3langid's model (97 languages, trained on public text) reads the sender's own words. A
text too short or too mixed to tell (below MIN_PROBABILITY) has no language, and a reply
then uses its effect's default template. The model is loaded once per process, when the
first request is read (about half a second).
"""

from __future__ import annotations

from functools import cache

from py3langid.langid import MODEL_FILE, LanguageIdentifier

MIN_PROBABILITY = 0.5
MAX_CHARS = 4000  # the start of a long message tells its language as well as all of it


@cache
def _identifier() -> LanguageIdentifier:
    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


def request_language(text: str) -> str:
    """The two-letter code of the text's language, or "" when it cannot be told."""
    if not text.strip():
        return ""
    language, probability = _identifier().classify(text[:MAX_CHARS])
    return str(language) if probability >= MIN_PROBABILITY else ""
