"""How a page tells a person that a service refused: the one place that renders it."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest

from config.errors import ServiceError


def refusal_text(error: ServiceError) -> str:
    """The service's plain words as a sentence: capitalised, with a full stop."""
    text = error.message
    return text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")


def show_refusal(request: HttpRequest, error: ServiceError, prefix: str = "") -> None:
    messages.error(request, prefix + refusal_text(error))
