"""E-mail addresses a reply is sent from or asks answers to (From, Reply-To): one address,
optionally with a display name (`Claims desk <claims@insurer.example>`), on one line.

A header value with a line break in it would start a header of its own (header injection):
it is refused here, where the address is saved, not only when a message is built.
"""

from __future__ import annotations

from email.utils import getaddresses

from django.core.exceptions import ValidationError
from django.core.validators import validate_email

MAX_ADDRESS = 254


def mail_address_refusal(value: str) -> str | None:
    """Why `value` is no address to send from or reply to; None when it is one."""
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        return "write the address on one line, without line breaks or control characters"
    if len(value) > MAX_ADDRESS:
        return f"an address has at most {MAX_ADDRESS} characters"
    found = getaddresses([value])
    if len(found) != 1 or not found[0][1]:
        return "give one e-mail address, such as Claims desk <claims@example.com>"
    try:
        validate_email(found[0][1])
    except ValidationError:
        return f"“{found[0][1][:80]}” is not an e-mail address"
    return None


def mail_address_validator(value: str) -> None:
    """mail_address_refusal as a Django field validator."""
    refusal = mail_address_refusal(value)
    if refusal is not None:
        raise ValidationError(refusal)
