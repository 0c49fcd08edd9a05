"""Reading an e-mail message: headers, bodies, attachments, with the standard `email` API.

`parse_message(raw)` lists what is wrong with a message as problems instead of raising: it
returns what it could read and that list. The standard library's parser underneath may still
fail on input it was never meant for; the caller (`intake/services.py`) turns that into a
problem too. The caller stores the raw bytes before calling it, so a message nobody can read
is still kept, exactly as it came.

One message cannot exhaust the machine reading it (`MailLimits`, from settings). The standard
header parser grows quadratically with the encoded words of one header (50,000 of them, 850
KB, take over 20 GB), so header lines are counted as the parser splits them, before any is
parsed: the bytes of all of them, of each one, and their encoded words. A message over one
of those limits raises `MessageOverBudget` with its reason; the caller keeps it as a refused
record. HTML is read up to a size, and its conversion to text is linear.
"""

from __future__ import annotations

import email
import email.policy
import hashlib
import html
import io
import re
from dataclasses import dataclass, field
from email.headerregistry import Address
from email.message import EmailMessage, Message
from email.policy import EmailPolicy
from html.parser import HTMLParser
from typing import Any

from automation.conf import setting
from automation.schemas import SUBJECT_LIMIT
from core.codes import MailRefusal

# Text taken from one attachment; the whole event keeps within the intake contract's limits.
ATTACHMENT_TEXT_LIMIT = 8_000
BODY_LIMIT = 20_000
TEXT_TYPES = {"text/plain", "text/csv", "text/tab-separated-values", "text/markdown"}
MESSAGE_ID = re.compile(r"<([^<>\s]+)>")


@dataclass(frozen=True)
class MailLimits:
    """What reading one message may take: GATEHOUSE_MAX_HEADER_BLOCK_BYTES (every header line
    of the message, its parts' included), GATEHOUSE_MAX_HEADER_BYTES (one header, its folded
    lines together), GATEHOUSE_MAX_ENCODED_WORDS (`=?` in all header lines) and
    GATEHOUSE_MAX_HTML_BYTES (HTML converted to text; the rest is not read)."""

    header_block_bytes: int
    header_bytes: int
    encoded_words: int
    html_bytes: int

    @classmethod
    def from_settings(cls) -> MailLimits:
        return cls(
            header_block_bytes=setting("MAX_HEADER_BLOCK_BYTES"),
            header_bytes=setting("MAX_HEADER_BYTES"),
            encoded_words=setting("MAX_ENCODED_WORDS"),
            html_bytes=setting("MAX_HTML_BYTES"),
        )


class MessageOverBudget(ValueError):
    """A message over a reading limit: not read further. `code` says which limit."""

    def __init__(self, code: MailRefusal, message: str) -> None:
        super().__init__(message)
        self.code = code


# The headers read for their structure cost the standard parser more than linear time: a From
# of 500 addresses (4 KiB) takes it 0.4 s, parsed twice for a forwarded message; a 32 KiB one
# 4.5 s; a Content-Type of 3,000 parameters 0.2 s at each of the dozen reads of a part. Real
# ones are far shorter: these bounds are fixed, below GATEHOUSE_MAX_HEADER_BYTES.
ADDRESS_HEADERS = {"from", "sender", "reply-to"}
ADDRESS_HEADER_BYTES = 512
# '@', ',' and '(' in one of them: an address tried parses its comments anew.
ADDRESSES = 10
MIME_HEADER_BYTES = 4 * 1024  # Content-*
MIME_PARAMETERS = 50  # ';' in one of them
# Attachments read (the event keeps as many): a forwarded message is parsed again to be kept.
ATTACHMENT_COUNT = 50
# PDFs whose text is read, pages of each, and what pypdf may decompress and parse for one
# (pypdf.Configuration; its defaults allow 75 MB a stream and 300 MB of decoding work).
PDF_FILES = 5
PDF_PAGES = 20
PDF_BUDGET = {
    "zlib_maximum_output_length": 8_000_000,
    "lzw_maximum_output_length": 8_000_000,
    "run_length_maximum_output_length": 8_000_000,
    "brotli_maximum_output_length": 8_000_000,
    "array_based_stream_maximum_output_length": 8_000_000,
    "stream_decoding_work_maximum_length": 32_000_000,
    "stream_parsing_work_maximum_count": 500_000,
    "xform_maximum_invocations_per_extraction": 500,
}


class _HeaderBudget:
    """The header lines of one message counted against its limits, as they are split."""

    def __init__(self, limits: MailLimits) -> None:
        self.limits = limits
        self.block_bytes = 0
        self.encoded_words = 0

    def count(self, name: str, value: str) -> None:
        size = len(name) + len(value)
        self.block_bytes += size
        self.encoded_words += value.count("=?")
        limits = self.limits
        lower = name.lower()
        mime = lower.startswith("content-")
        limit = limits.header_bytes
        if lower in ADDRESS_HEADERS or mime:
            limit = min(limit, MIME_HEADER_BYTES if mime else ADDRESS_HEADER_BYTES)
        if size > limit:
            raise MessageOverBudget(
                MailRefusal.HEADER_TOO_LONG,
                f"has a {name[:100]!r} header of {size:,} bytes, over the limit of {limit:,} "
                "for one header",
            )
        if mime and value.count(";") > MIME_PARAMETERS:
            raise MessageOverBudget(
                MailRefusal.HEADER_TOO_LONG,
                f"has a {name[:100]!r} header of more than {MIME_PARAMETERS} parameters",
            )
        if lower in ADDRESS_HEADERS and sum(map(value.count, "@,(")) > ADDRESSES:
            raise MessageOverBudget(
                MailRefusal.HEADER_TOO_LONG,
                f"has a {name[:100]!r} header of more than {ADDRESSES} addresses and comments",
            )
        if self.block_bytes > limits.header_block_bytes:
            raise MessageOverBudget(
                MailRefusal.HEADERS_TOO_LONG,
                f"has more than {limits.header_block_bytes:,} bytes of header lines",
            )
        if self.encoded_words > limits.encoded_words:
            raise MessageOverBudget(
                MailRefusal.TOO_MANY_ENCODED_WORDS,
                f"has more than {limits.encoded_words:,} encoded words (=?...?=) in its headers",
            )


class _BoundedPolicy(EmailPolicy):
    """policy.default, with each header line counted against the message's budget when the
    parser has split it and before anything parses it (the parser calls header_source_parse
    once per header of every part, nested messages included, before it reads any of them)."""

    budget: _HeaderBudget | None = None

    def __init__(self, budget: _HeaderBudget) -> None:
        super().__init__()
        # A policy's attributes are read-only once made; EmailPolicy sets its own this way.
        object.__setattr__(self, "budget", budget)

    def header_source_parse(self, sourcelines: list[str]) -> tuple[str, str]:
        name, value = super().header_source_parse(sourcelines)
        if self.budget is not None:
            self.budget.count(name, value)
        return name, value


@dataclass
class Attachment:
    name: str
    content_type: str
    size: int
    sha256: str
    text: str = ""

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "name": self.name,
            "content_type": self.content_type,
            "size": self.size,
            "sha256": self.sha256,
        }
        if self.text:
            data["text"] = self.text
        return data


@dataclass
class ParsedMail:
    event_id: str
    message_id: str
    subject: str
    sender: str
    sender_name: str
    sent_at: str
    in_reply_to: str
    references: list[str]
    body: str
    body_format: str  # plain, html, none
    attachments: list[Attachment] = field(default_factory=list)
    problems: list[tuple[str, str]] = field(default_factory=list)  # (field, message)
    notes: list[str] = field(default_factory=list)  # defects worth showing, not fatal

    @property
    def reply_to_event_id(self) -> str:
        """The message this one answers: In-Reply-To, else the last of References."""
        if self.in_reply_to:
            return self.in_reply_to
        return self.references[-1] if self.references else ""

    def event(self) -> dict[str, Any]:
        """The intake event of an e-mail: what the pipeline validates and fingerprints."""
        return {
            "event_id": self.event_id,
            "source": "email",
            "subject": self.subject,
            "body": self.body,
            "sender": self.sender,
            "sender_name": self.sender_name,
            "sent_at": self.sent_at,
            "thread": [*self.references, *([self.in_reply_to] if self.in_reply_to else [])],
            "attachments": [a.as_dict() for a in self.attachments],
        }


def message_ids(value: str) -> list[str]:
    """'<a@x> <b@y>' -> ['a@x', 'b@y']; a bare id without brackets is taken whole."""
    found = MESSAGE_ID.findall(value or "")
    if not found and value and value.strip() and " " not in value.strip():
        found = [value.strip().strip("<>")]
    return found


class _TextFromHtml(HTMLParser):
    """HTML reduced to readable text: block elements end lines, scripts and styles vanish."""

    BLOCKS = {"p", "div", "br", "tr", "li", "h1", "h2", "h3", "h4", "h5", "h6", "table"}
    SKIP = {"script", "style", "head", "title"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skipping = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.SKIP:
            self.skipping += 1
        elif tag in self.BLOCKS:
            self.parts.append("\n")
        elif tag in {"td", "th"}:
            self.parts.append(" ")

    def handle_endtag(self, tag: str) -> None:
        if tag in self.SKIP:
            self.skipping = max(0, self.skipping - 1)
        elif tag in self.BLOCKS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self.skipping:
            self.parts.append(data)

    def close(self) -> None:
        # What feed() could not finish is an unterminated tag, comment or declaration ('<!--'
        # with no '-->', '<a ' with no '>'). CPython's close() before 3.11.13 (gh-135462)
        # re-scans it to the end from each '<' in it: quadratic, a minute for 400 KB of
        # '<!--'. At the end of input such a construct runs to the end and is no text (HTML5's
        # "EOF in tag" and "EOF in comment"), which is what CPython does since: dropped here.
        if self.rawdata.startswith("<"):
            self.rawdata = ""
        super().close()


def html_to_text(markup: str) -> str:
    """HTML as readable text, in time linear in its length."""
    parser = _TextFromHtml()
    parser.feed(markup)
    parser.close()
    text = html.unescape("".join(parser.parts))
    lines = (re.sub(r"[ \t\xa0]+", " ", line).strip() for line in text.splitlines())
    return "\n".join(line for line in lines if line)


def _decoded_text(part: Message, notes: list[str]) -> str:
    """A text part's content in its declared charset; undecodable bytes are replaced, noted."""
    payload = part.get_payload(decode=True)
    if not isinstance(payload, bytes):
        return ""
    charset = part.get_content_charset() or "us-ascii"
    try:
        return payload.decode(charset)
    except LookupError:
        notes.append(f"unknown charset {charset!r}: read as UTF-8 with replacements")
    except UnicodeDecodeError:
        notes.append(f"text is not valid {charset}: undecodable bytes replaced")
    try:
        return payload.decode("utf-8")
    except UnicodeDecodeError:
        return payload.decode("utf-8", errors="replace")


def _pdf_text(data: bytes, notes: list[str], name: str) -> str:
    # Here, not at the top: pypdf takes 60 ms to import, and only a message with a PDF
    # attachment needs it (every web and worker process imports this module).
    from pypdf import PdfReader, apply_configuration
    from pypdf.errors import PyPdfError

    text: list[str] = []
    # pypdf's own budget, tightened for text read from mail (its defaults are for documents
    # a person opens on purpose): what one PDF may decompress and parse.
    with apply_configuration(None, **PDF_BUDGET):
        try:
            for page in PdfReader(io.BytesIO(data)).pages[:PDF_PAGES]:
                text.append(page.extract_text() or "")
                if sum(map(len, text)) >= ATTACHMENT_TEXT_LIMIT:
                    break  # no more is kept
        except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
            # A PDF is the sender's to write: one pypdf cannot read, or one over its budget,
            # is a note on the run, never a message that cannot be taken.
            notes.append(f"attachment {name!r}: PDF text could not be read ({exc})")
            return ""
    return "\n".join(text).strip()


def _is_pdf(content_type: str, name: str) -> bool:
    return content_type == "application/pdf" or name.lower().endswith(".pdf")


def _attachment(
    part: Message, notes: list[str], number: int, limits: MailLimits, *, read_pdf: bool = True
) -> Attachment:
    content_type = part.get_content_type()
    name = part.get_filename() or f"part-{number}"
    if content_type == "message/rfc822":
        inner = part.get_payload()
        inner_message = inner[0] if isinstance(inner, list) and inner else None
        data = inner_message.as_bytes() if isinstance(inner_message, Message) else b""
        text = ""
        if isinstance(inner_message, Message):
            text = _forwarded_text(inner_message, notes, limits)
            name = part.get_filename() or f"{inner_message.get('subject', 'message')}.eml"
    else:
        payload = part.get_payload(decode=True)
        data = payload if isinstance(payload, bytes) else b""
        text = ""
        if content_type in TEXT_TYPES:
            text = _decoded_text(part, notes)
        elif _is_pdf(content_type, name) and read_pdf:
            text = _pdf_text(data, notes, name)
        elif _is_pdf(content_type, name):
            notes.append(f"attachment {name!r}: only the first {PDF_FILES} PDFs' text is read")
    return Attachment(
        name=str(name)[:200],
        content_type=content_type,
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        text=text.strip()[:ATTACHMENT_TEXT_LIMIT],
    )


def _forwarded_text(inner: Message, notes: list[str], limits: MailLimits) -> str:
    body, _ = _bodies(inner, notes, [], limits)
    values = ((name, _header(inner, name, notes)) for name in ("From", "Date", "Subject"))
    header = "\n".join(f"{name}: {value}" for name, value in values if value)
    return f"{header}\n\n{body}".strip()


def _header(message: Message, name: str, notes: list[str]) -> str:
    """A header's decoded text. One whose encoded words cannot be decoded (a UTF-7 word that
    spells a lone surrogate, say) is read as empty, with a note, instead of raising."""
    try:
        return str(message.get(name, "") or "")
    except (ValueError, IndexError):  # UnicodeError is a ValueError
        notes.append(f"the {name} header could not be decoded")
        return ""


def _leaves(part: Message) -> Any:
    """The leaf parts in order; a forwarded message is one leaf (an attachment), not opened."""
    if part.get_content_type() == "message/rfc822" or not part.is_multipart():
        yield part
        return
    for sub in part.get_payload():
        if isinstance(sub, Message):
            yield from _leaves(sub)


def _bodies(
    message: Message, notes: list[str], attachments: list[Attachment], limits: MailLimits
) -> tuple[str, str]:
    """(body text, format). Prefers text/plain; falls back to HTML reduced to text."""
    plain: list[str] = []
    markup: list[str] = []
    skipped = 0
    for number, part in enumerate(_leaves(message), start=1):
        content_type = part.get_content_type()
        if part.get_content_disposition() == "attachment" or (
            content_type not in {"text/plain", "text/html"} and part is not message
        ):
            if len(attachments) < ATTACHMENT_COUNT:
                pdfs = sum(_is_pdf(a.content_type, a.name) for a in attachments)
                read_pdf = pdfs < PDF_FILES
                attachments.append(_attachment(part, notes, number, limits, read_pdf=read_pdf))
            else:
                skipped += 1
        elif content_type == "text/html":
            markup.append(_decoded_text(part, notes))
        elif content_type == "text/plain":
            plain.append(_decoded_text(part, notes))
    if skipped:
        notes.append(f"{skipped} attachments past the first {ATTACHMENT_COUNT} were not read")
    if plain:
        return "\n\n".join(p.strip() for p in plain if p.strip()), "plain"
    if markup:
        return html_to_text(_within(markup, limits.html_bytes, notes)), "html"
    return "", "none"


def _within(markup: list[str], limit: int, notes: list[str]) -> str:
    """The HTML parts, joined, up to `limit` characters: the text body keeps only its first
    BODY_LIMIT characters, so what lies past that much markup is never read."""
    joined = "\n\n".join(markup)
    if len(joined) <= limit:
        return joined
    notes.append(f"the HTML is {len(joined):,} characters: only its first {limit:,} were read")
    return joined[:limit]


def _sender(message: EmailMessage, problems: list[tuple[str, str]]) -> tuple[str, str]:
    try:
        header = message.get("From")
    except (ValueError, IndexError):  # see _header
        problems.append(("sender", "the From header could not be decoded"))
        return "", ""
    if header is None:
        problems.append(("sender", "the message has no From header: nobody to answer"))
        return "", ""
    try:
        addresses: tuple[Address, ...] = header.addresses
    except (AttributeError, IndexError, ValueError):
        addresses = ()
    if not addresses or not addresses[0].addr_spec or "@" not in addresses[0].addr_spec:
        problems.append(("sender", f"the From header {str(header)[:100]!r} has no address"))
        return "", ""
    return addresses[0].addr_spec.lower(), addresses[0].display_name


def parse_message(raw: bytes, limits: MailLimits | None = None) -> ParsedMail:
    """Everything Gatehouse reads from one message. What is wrong with it is listed as problems;
    a message over a reading limit (`limits`, else the settings') raises MessageOverBudget,
    and only a failure of the standard library's parser itself raises otherwise."""
    limits = limits or MailLimits.from_settings()
    problems: list[tuple[str, str]] = []
    notes: list[str] = []
    raw_hash = hashlib.sha256(raw).hexdigest()
    message = email.message_from_bytes(raw, policy=_BoundedPolicy(_HeaderBudget(limits)))
    assert isinstance(message, EmailMessage)  # noqa: S101 - guaranteed by an EmailPolicy
    if not message.keys():
        problems.append(("message", "has no header lines: this is not an e-mail message"))
    for defect in message.defects:
        notes.append(f"{type(defect).__name__}: {defect}")
    declared = message_ids(_header(message, "Message-ID", notes))
    message_id = declared[0] if declared else ""
    if not message_id:
        notes.append("no Message-ID: the event id is derived from the message's bytes")
    event_id = message_id[:200] if message_id else f"sha256:{raw_hash}"
    sender, sender_name = _sender(message, problems) if message.keys() else ("", "")
    subject = _header(message, "Subject", notes)
    attachments: list[Attachment] = []
    body, body_format = _bodies(message, notes, attachments, limits)
    if not body.strip() and not subject.strip() and not any(a.text for a in attachments):
        problems.append(("body", "has no text to read: no subject, body or readable attachment"))
    in_reply_to = next(iter(message_ids(_header(message, "In-Reply-To", notes))), "")
    references = message_ids(_header(message, "References", notes))
    return ParsedMail(
        event_id=event_id,
        message_id=message_id,
        subject=subject.strip()[:SUBJECT_LIMIT] or "(no subject)",
        sender=sender,
        sender_name=sender_name,
        sent_at=_header(message, "Date", notes)[:100],
        in_reply_to=in_reply_to[:200],
        references=[ref[:200] for ref in references][-20:],
        body=body.strip()[:BODY_LIMIT] or "(no text body)",
        body_format=body_format,
        attachments=attachments,
        problems=problems,
        notes=notes[:20],
    )
