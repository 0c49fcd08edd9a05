"""What schemathesis needs to send e-mail to the intake API (tests/automation/intake/test_openapi.py
loads this module through SCHEMATHESIS_HOOKS): the document names the format of a
`message/rfc822` body (`email-message`); here is how to make one and how to send it."""

from __future__ import annotations

from email.message import EmailMessage
from email.utils import formataddr
from typing import Any

import schemathesis
from hypothesis import strategies as st

# Words of any script, and the punctuation people write: a message is made by the standard
# library, which encodes what needs it, as a mail program would.
WORDS = st.text(
    alphabet=st.characters(categories=["L", "N", "Zs"], include_characters=".,;:!?'()-"),
    min_size=1,
    max_size=80,
).filter(str.strip)
LOCAL = st.from_regex(r"[a-z][a-z0-9.]{0,20}[a-z0-9]", fullmatch=True).filter(
    lambda part: ".." not in part
)
DOMAIN = st.from_regex(r"[a-z][a-z0-9]{1,20}\.(com|org|test)", fullmatch=True)


@st.composite
def email_messages(draw: st.DrawFn) -> str:
    message = EmailMessage()
    sender = f"{draw(LOCAL)}@{draw(DOMAIN)}"
    message["From"] = formataddr((draw(WORDS), sender))
    message["To"] = "requests@gatehouse.test"
    message["Subject"] = draw(WORDS)
    message["Message-ID"] = f"<{draw(LOCAL)}.{draw(st.integers(0, 10**9))}@{draw(DOMAIN)}>"
    message.set_content("\n".join(draw(st.lists(WORDS, min_size=1, max_size=5))))
    return message.as_string()


schemathesis.openapi.format("email-message", email_messages())


@schemathesis.serializer("message/rfc822")
def _raw_message(ctx: Any, value: Any) -> bytes:
    """A message is sent as its bytes; anything else (a negative case) as its text."""
    return value if isinstance(value, bytes) else str(value).encode("utf-8", "surrogatepass")
