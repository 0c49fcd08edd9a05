"""The raw input of a run, for people: a bounded preview on a page, the bytes as a download.

A request may be megabytes (an e-mail with its attachments); a page shows its first bytes,
escaped as text, and links to the download. The download is an attachment of a type no
browser renders (application/octet-stream, nosniff), so stored input never runs as a page.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.http import content_disposition_header

from automation.intake.selectors import raw_preview
from automation.intake.services import MAIL_TYPE
from automation.models import IntakeRecord

EXTENSIONS = {MAIL_TYPE: "eml", "application/json": "json"}


def raw_page(
    request: HttpRequest, *, intake_id: int, download_url: str, back_url: str, back_label: str
) -> HttpResponse:
    """The run's input as received (runs/raw.html), from the run page or from the evidence
    of one of its approval requests: `back_url` leads back to whichever it was."""
    context = {
        "preview": raw_preview(intake_id=intake_id),
        "download_url": download_url,
        "back_url": back_url,
        "back_label": back_label,
    }
    return render(request, "runs/raw.html", context)


def raw_download(*, intake_id: int) -> HttpResponse:
    record = IntakeRecord.objects.only("raw", "content_type").get(pk=intake_id)
    name = f"intake-{intake_id}.{EXTENSIONS.get(record.content_type, 'bin')}"
    response = HttpResponse(bytes(record.raw), content_type="application/octet-stream")
    response["Content-Disposition"] = content_disposition_header(True, name) or "attachment"
    response["X-Content-Type-Options"] = "nosniff"
    return response
