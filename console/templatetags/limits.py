"""The free-text limits for inputs a template writes by hand: `{% load limits %}`.

`<input name="reason" maxlength="{% text_limit %}">` and, beside it,
`{% text_limit_said %}` ("At most 2,000 characters."); `"evidence"` and `"comment"` for the
longer limits.
The forms that read these inputs (console/forms) enforce the same numbers (core.limits).
"""

from __future__ import annotations

from django import template

from core import limits

register = template.Library()

LIMITS = {"note": limits.NOTE, "evidence": limits.EVIDENCE, "comment": limits.COMMENT}


@register.simple_tag
def text_limit(kind: str = "note") -> int:
    return LIMITS[kind]


@register.simple_tag
def text_limit_said(kind: str = "note") -> str:
    said = limits.stated(LIMITS[kind])
    return said[:1].upper() + said[1:] + "."
