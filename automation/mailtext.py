"""The sender's own words, told apart from what a message carries along.

A reply quotes the message it answers; a forward carries someone else's message; most mail
ends in a signature and many in a legal disclaimer. Only the sender's own text says what
they want: the rest is evidence. Someone who forwards a phishing mail reports a security
incident; they do not ask to pay the invoice in it.

`split_text` reads a plain-text body line by line (HTML is reduced to text before) and
recognises, in English, German, French, Spanish, Dutch and Italian:
- quoted replies: "On ... wrote:" lines, Outlook's "From: / Sent: / Subject:" blocks and
  lines that start with ">";
- forwarded messages: "---------- Forwarded message ----------" and its kin;
- signatures: the "-- " separator, or a closing line such as "Best regards" near the end;
- legal disclaimers: a paragraph that says the message is confidential or meant for its
  addressee only.
It is deliberately conservative: what it does not recognise stays the sender's own text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

OWN, QUOTED, FORWARDED, SIGNATURE, DISCLAIMER = (
    "own",
    "quoted",
    "forwarded",
    "signature",
    "disclaimer",
)
KINDS = (OWN, QUOTED, FORWARDED, SIGNATURE, DISCLAIMER)

_FORWARD = re.compile(
    r"^\s*(?:-{2,}|_{2,}|={2,})?\s*(?:"
    r"forwarded message|original message|begin forwarded message|"
    r"weitergeleitete nachricht|urspr(?:ü|ue)ngliche nachricht|"
    r"message transf[ée]r[ée]|message d'origine|d[ée]but du message r[ée]exp[ée]di[ée]|"
    r"mensaje reenviado|mensaje original|"
    r"doorgestuurd bericht|oorspronkelijk bericht|origineel bericht|"
    r"messaggio inoltrato|messaggio originale"
    r")\s*:?\s*(?:-{2,}|_{2,}|={2,})?\s*$",
    re.IGNORECASE,
)
# "On Tue, 3 Mar 2026 at 10:02, Ana <ana@example.com> wrote:" and its translations.
_ATTRIBUTION = re.compile(
    r"^\s*(?:on|am|le|el|op|il)\b.{3,300}?\b"
    r"(?:wrote|schrieb|a [ée]crit|escribi[óo]|schreef|ha scritto)\b.{0,200}:\s*$",
    re.IGNORECASE,
)
_HEADER_FROM = re.compile(r"^\s*\*?(?:from|von|de|van|da)\s*:\*?\s*\S", re.IGNORECASE)
_HEADER_REST = re.compile(
    r"^\s*\*?(?:sent|date|to|subject|cc|gesendet|datum|an|betreff|envoy[ée]|[àa]|objet|"
    r"enviado|fecha|para|asunto|verzonden|datum|aan|onderwerp|inviato|data|a|oggetto)"
    r"\s*:\*?",
    re.IGNORECASE,
)
_CLOSING = re.compile(
    r"^\s*(?:best|kind|warm|many thanks and best)?\s*(?:regards|wishes)\b|"
    r"^\s*(?:thanks|thank you|cheers|sincerely|yours (?:truly|sincerely))\s*[,!.]?\s*$|"
    r"^\s*(?:mit )?(?:freundlichen|besten|viele|liebe|beste) gr(?:ü|ue)(?:ß|ss)en?\b|"
    r"^\s*(?:bien )?cordialement\b|^\s*salutations\b|^\s*bien (?:à vous|a vous)\b|"
    r"^\s*(?:un )?(?:cordial )?saludos?\b|^\s*atentamente\b|"
    r"^\s*met (?:vriendelijke|hartelijke) groet(?:en)?\b|^\s*groeten\b|"
    r"^\s*(?:cordiali|distinti) saluti\b|^\s*saluti\b",
    re.IGNORECASE,
)
_DISCLAIMER = re.compile(
    r"confidential|intended (?:solely|only) for|intended recipient|"
    r"vertraulich|bestimmt f(?:ü|ue)r den adressaten|nicht der richtige adressat|"
    r"confidentiel|destinataire|"
    r"confidencial|destinatario|"
    r"vertrouwelijk|geadresseerde|"
    r"riservat|destinatar",
    re.IGNORECASE,
)
# At most this many short lines follow a closing line that starts a signature.
SIGNATURE_LINES = 8


@dataclass
class MessageParts:
    """A body cut into labelled pieces, in order; `text(kind)` joins those of one kind."""

    pieces: list[tuple[str, str]] = field(default_factory=list)

    def text(self, kind: str) -> str:
        return "\n".join(text for k, text in self.pieces if k == kind).strip()

    @property
    def own(self) -> str:
        return self.text(OWN)

    def kind_of(self, phrase: str) -> str:
        """The part a phrase was read from (the first piece that holds it), else own."""
        for kind, text in self.pieces:
            if phrase and phrase in text:
                return kind
        return OWN


def split_text(body: str) -> MessageParts:
    lines = body.replace("\r\n", "\n").split("\n")
    kinds = _carried_along(lines)
    _mark_disclaimers(lines, kinds)  # first: a notice after the signature is not its lines
    _mark_signature(lines, kinds)
    parts = MessageParts()
    for kind, line in zip(kinds, lines, strict=True):
        if parts.pieces and parts.pieces[-1][0] == kind:
            parts.pieces[-1] = (kind, parts.pieces[-1][1] + "\n" + line)
        else:
            parts.pieces.append((kind, line))
    parts.pieces = [(kind, text) for kind, text in parts.pieces if text.strip()]
    return parts


def _carried_along(lines: list[str]) -> list[str]:
    """Quoted and forwarded lines: from a marker to the end, and every '>' line."""
    kinds = [OWN] * len(lines)
    for number, line in enumerate(lines):
        start = _carried_from(lines, number)
        if start is not None:
            kinds[number:] = [start] * (len(lines) - number)
            break
        if line.lstrip().startswith(">"):
            kinds[number] = QUOTED
    return kinds


def _carried_from(lines: list[str], number: int) -> str | None:
    line = lines[number]
    if _FORWARD.match(line):
        return FORWARDED
    joined = f"{line} {lines[number + 1]}" if number + 1 < len(lines) else line
    if _ATTRIBUTION.match(line) or (not line.rstrip().endswith(":") and _ATTRIBUTION.match(joined)):
        return QUOTED
    if _HEADER_FROM.match(line):
        following = [text for text in lines[number + 1 : number + 5] if text.strip()]
        if sum(bool(_HEADER_REST.match(text)) for text in following) >= 2:
            return QUOTED
    return None


def _mark_signature(lines: list[str], kinds: list[str]) -> None:
    """From the '-- ' separator, or a closing line followed only by a few short lines (a
    name, a title, a number), to the end of the own text."""
    own = [number for number, kind in enumerate(kinds) if kind == OWN and lines[number].strip()]
    for position, number in enumerate(own):
        line = lines[number]
        after = [lines[i] for i in own[position + 1 :]]
        separator = line.rstrip() in ("--", "-- ", "__")
        closing = (
            position > 0  # something was said before it
            and len(line.strip()) <= 40
            and bool(_CLOSING.match(line))
            and len(after) <= SIGNATURE_LINES
            and all(len(text.strip()) <= 80 for text in after)
        )
        if separator or closing:
            for rest in range(number, len(kinds)):
                if kinds[rest] == OWN:
                    kinds[rest] = SIGNATURE
            return


def _mark_disclaimers(lines: list[str], kinds: list[str]) -> None:
    """A later paragraph of the sender's (or signature) text that reads as a legal notice:
    long, and with two notice phrases, so a request that merely says "confidential" stays."""
    paragraphs, start = [], 0
    for number in range(len(lines) + 1):
        if number == len(lines) or not lines[number].strip():
            if any(lines[i].strip() for i in range(start, number)):
                paragraphs.append(range(start, number))
            start = number + 1
    for paragraph in paragraphs[1:]:
        text = " ".join(lines[i] for i in paragraph)
        phrases = {match.lower() for match in _DISCLAIMER.findall(text)}
        if (
            len(text) >= 120
            and len(phrases) >= 2
            and all(kinds[i] in (OWN, SIGNATURE) for i in paragraph)
        ):
            for i in paragraph:
                kinds[i] = DISCLAIMER
