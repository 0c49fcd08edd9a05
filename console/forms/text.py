"""A free-text input whose limit is stated at the field and enforced when it is read."""

from __future__ import annotations

from typing import Any

from django import forms

from core import limits


class FreeTextField(forms.CharField):
    """A comment, reason or note: at most `max_length` characters (core.limits), and its
    help text says so ("Why: it goes on the run's record. At most 2,000 characters.")."""

    def __init__(
        self, *, max_length: int = limits.NOTE, help_text: str = "", **kwargs: Any
    ) -> None:
        limit = limits.stated(max_length)
        if not help_text:
            help_text = limit[:1].upper() + limit[1:] + "."
        elif help_text.endswith("."):
            help_text = f"{help_text} {limit[:1].upper()}{limit[1:]}."
        else:
            help_text = f"{help_text}; {limit}"
        messages = {"max_length": f"Too long: {limit}, and this has %(show_value)s."}
        super().__init__(
            max_length=max_length,
            help_text=help_text,
            error_messages=messages | kwargs.pop("error_messages", {}),
            **kwargs,
        )
