"""How much free text a person may type into one input, and the check the services make.

An approval's comment, a reason or a note is a paragraph or two for whoever reads the
record later; the evidence of work done by hand, or a comment on a run's thread, may be
longer. The console states each limit at its field and refuses more; the services refuse
more as well, so no way in (a page, a command, the demo) stores a longer text, and no page
shows one.
"""

from __future__ import annotations

from core.codes import Refusal
from core.errors import ServiceError

NOTE = 2000  # an approval comment, a reason, a QA or policy note
EVIDENCE = 4000  # what a person did by hand, or why a run is dropped
COMMENT = 4000  # a comment on a run's thread: a question, an answer, what was found


def stated(limit: int) -> str:
    """The limit as the field says it: "at most 2,000 characters"."""
    return f"at most {limit:,} characters"


def within(text: str, *, limit: int = NOTE, what: str = "the text") -> str:
    """`text` unchanged, or a refusal that says how long it is and how long it may be."""
    if len(text) > limit:
        raise ServiceError(
            Refusal.TOO_LONG, f"{what} is {len(text):,} characters long: {stated(limit)}"
        )
    return text
