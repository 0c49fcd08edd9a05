"""One message cannot exhaust the machine reading it: headers are bounded before they are
parsed, HTML is converted in linear time, and a message over a limit is kept as a refused
record (its hash and head, the reason as a code) on every way in, the rest going on.

The attacks themselves run in a process of their own under a memory and CPU limit
(resource.setrlimit), so that on code without the bounds they fail the test instead of the
machine."""

from __future__ import annotations

import email.policy
import hashlib
import os
import subprocess
import sys
import zlib
from email.message import EmailMessage
from pathlib import Path

import pytest
from django.test import Client

from automation.intake.services import (
    MAIL_TYPE,
    api_token_create,
    channel_get_or_create,
    intake_submit_in_transaction,
)
from automation.mail import MailLimits, MessageOverBudget, html_to_text, parse_message
from automation.models import IntakeChannel, IntakeRecord, Outcome, Run
from core.codes import MailRefusal
from tests.database import database_url

ROOT = Path(__file__).resolve().parents[3]
MEMORY_LIMIT = 512 * 1024 * 1024
# 850 KB: a Subject of 50,000 encoded words, which took CPython's header parser over 20 GB.
ENCODED_WORDS_SUBJECT = b"=?utf-8?b?YQ==?= " * 50_000


def bomb(n: int = 1) -> bytes:
    return (
        b"From: Mallory <mallory@example.net>\r\n"
        b"To: support@shop.example\r\n"
        + f"Message-ID: <bomb-{n}@example.net>\r\n".encode()
        + b"Subject: "
        + ENCODED_WORDS_SUBJECT
        + b"\r\n\r\nHello.\r\n"
    )


def ordinary(n: int = 1, *, html: str = "") -> bytes:
    message = EmailMessage()
    message["From"] = f"Ana Ruiz <ana{n}@northwind.example>"
    message["To"] = ", ".join(f"Person {i} <p{i}@northwind.example>" for i in range(300))
    message["Subject"] = "Presupuesto para 60 licencias, pedido número " + str(n)
    message["Message-ID"] = f"<ordinary-{n}@northwind.example>"
    message["References"] = " ".join(f"<thread-{i}@northwind.example>" for i in range(150))
    if html:
        message.set_content(html, subtype="html")
    else:
        message.set_content(f"Hello,\n\nplease send a quote for {n + 10} seats.\n")
    return message.as_bytes(policy=email.policy.SMTP)


def limited(script: str, *, cpu_seconds: int, env: dict[str, str] | None = None) -> int:
    """Run `script` in a Python of its own, under MEMORY_LIMIT and `cpu_seconds` of CPU: its
    exit status (killed by the limit: negative)."""
    prelude = (
        "import resource\n"
        f"resource.setrlimit(resource.RLIMIT_AS, ({MEMORY_LIMIT}, {MEMORY_LIMIT}))\n"
        f"resource.setrlimit(resource.RLIMIT_CPU, ({cpu_seconds}, {cpu_seconds}))\n"
        "import django; django.setup()\n"
    )
    full_env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", **(env or {})}
    done = subprocess.run(  # noqa: S603 - our own interpreter, fixed arguments
        [sys.executable, "-c", prelude + script], cwd=ROOT, env=full_env, timeout=120
    )
    return done.returncode


def refusal(record: IntakeRecord) -> str:
    run = record.runs.get()
    assert run.outcome == Outcome.INVALID_EVENT
    return str(run.checkpoints.order_by("sequence").last().data["refused"])


# --- reading one message --------------------------------------------------------------------


def test_html_of_400_kb_of_unclosed_comments_converts_within_a_cpu_budget() -> None:
    # It took 63-71 s of CPU: HTMLParser.close() re-scanned the unclosed comment from each '<'.
    script = (
        "from automation.mail import html_to_text\n"
        "for start in ('<!--', '<a ', '<a b=\"', '<p>x<!-- ', '<script></script '):\n"
        "    html_to_text(start * (400_000 // len(start)))\n"
        "    html_to_text(start * (400_000 // len(start)) + '>')\n"
    )
    assert limited(script, cpu_seconds=10) == 0


def test_html_ending_inside_a_comment_or_tag_reads_as_a_browser_shows_it() -> None:
    assert html_to_text("<p>Hello</p><p>World<!-- never closed <b>bold</b>") == "Hello\nWorld"
    assert html_to_text("<p>Hello</p><p>World<a href='x") == "Hello\nWorld"
    assert html_to_text("<p>Tom &amp; Jerry</p>") == "Tom & Jerry"


def test_html_past_its_limit_is_not_read_and_a_note_says_so() -> None:
    raw = ordinary(html="<p>" + "word " * 1_000 + "</p><p>the end</p>")
    limits = MailLimits(
        header_block_bytes=256 * 1024, header_bytes=16 * 1024, encoded_words=1000, html_bytes=1000
    )
    parsed = parse_message(raw, limits)
    assert "the end" not in parsed.body and parsed.body.startswith("word word")
    assert any("only its first 1,000 were read" in note for note in parsed.notes)
    assert "the end" in parse_message(raw).body


def test_the_850_kb_subject_is_refused_before_the_header_parser_sees_it() -> None:
    script = (
        "import sys\n"
        "from automation.mail import parse_message, MessageOverBudget\n"
        "from tests.automation.intake.test_mail_budget import bomb\n"
        "raw = bomb()\n"
        "try:\n"
        "    parse_message(raw)\n"
        "except MessageOverBudget as exc:\n"
        "    sys.exit(0 if exc.code == 'header_too_long' else 3)\n"
        "sys.exit(4)\n"
    )
    assert limited(script, cpu_seconds=10) == 0


@pytest.mark.parametrize(
    ("headers", "code"),
    [
        # under the per-header limit each, over the encoded words of a message together
        (
            [b"Subject: " + b"=?utf-8?q?a?= " * 700, b"Comments: " + b"=?utf-8?q?a?= " * 700],
            MailRefusal.TOO_MANY_ENCODED_WORDS,
        ),
        ([b"X-Long: " + b"a" * 20_000], MailRefusal.HEADER_TOO_LONG),
        ([b"From: " + b"a@b.example, " * 400], MailRefusal.HEADER_TOO_LONG),
        ([b"From: " + b"a@b.example, " * 11], MailRefusal.HEADER_TOO_LONG),
        ([b"Content-Type: text/plain; " + b"a=b; " * 60], MailRefusal.HEADER_TOO_LONG),
        ([b"X-Trace-%d: " % i + b"a" * 10_000 for i in range(30)], MailRefusal.HEADERS_TOO_LONG),
    ],
)
def test_each_header_limit_refuses_with_its_code(headers: list[bytes], code: str) -> None:
    raw = b"From: a@b.example\r\n" + b"\r\n".join(headers) + b"\r\n\r\nbody\r\n"
    with pytest.raises(MessageOverBudget) as refused:
        parse_message(raw)
    assert refused.value.code == code


def test_the_headers_of_parts_and_forwarded_messages_count_too() -> None:
    raw = (
        b"From: c@d.example\r\nSubject: " + b"=?utf-8?q?b?= " * 200 + b"\r\n"
        b"Content-Type: multipart/mixed; boundary=XX\r\n\r\n"
        b"--XX\r\nContent-Type: text/plain\r\n\r\nsee attached\r\n"
        b"--XX\r\nContent-Type: message/rfc822\r\n\r\n"
        b"From: a@b.example\r\nSubject: " + b"=?utf-8?q?a?= " * 900 + b"\r\n\r\nforwarded\r\n"
        b"--XX--\r\n"
    )
    with pytest.raises(MessageOverBudget) as refused:
        parse_message(raw)
    assert refused.value.code == MailRefusal.TOO_MANY_ENCODED_WORDS


def test_only_the_first_fifty_attachments_are_read() -> None:
    message = EmailMessage()
    message["From"] = "a@b.example"
    message["Subject"] = "Sixty files"
    message.set_content("see attached")
    for n in range(60):
        message.add_attachment(b"%d" % n, maintype="application", subtype="octet-stream")
    parsed = parse_message(message.as_bytes())
    assert len(parsed.attachments) == 50
    assert "10 attachments past the first 50 were not read" in parsed.notes


def pdf(content: bytes) -> bytes:
    """A one-page PDF whose page draws `content` (its content stream, Flate-compressed)."""
    stream = zlib.compress(content, 9)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R"
        b" /Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


def with_pdfs(*files: bytes) -> bytes:
    message = EmailMessage()
    message["From"] = "Claims <claims@harbour-insurance.example>"
    message["Subject"] = "Claim documents"
    message.set_content("The documents are attached.")
    for n, data in enumerate(files):
        message.add_attachment(data, maintype="application", subtype="pdf", filename=f"d{n}.pdf")
    return message.as_bytes()


# 60 MB of drawing operators in 88 KB: under pypdf's own limit of 75 MB a stream, which
# decompressed it and parsed it for 6.6 s of CPU and 385 MB until its token limit raised an
# error no one caught, and the message could not be read at all.
PDF_BOMB = pdf(b"BT /F1 12 Tf 72 712 Td (Claim) Tj ET\n" + b"0 0 m\n" * 10_000_000)


def test_a_pdf_decompressing_to_60_mb_is_a_note_within_a_cpu_and_memory_budget() -> None:
    script = (
        "from tests.automation.intake.test_mail_budget import PDF_BOMB, with_pdfs\n"
        "from automation.mail import parse_message\n"
        "parsed = parse_message(with_pdfs(PDF_BOMB))\n"
        "(attachment,) = parsed.attachments\n"
        "assert attachment.text == '', attachment.text[:80]\n"
        "assert any('PDF text could not be read' in note for note in parsed.notes), parsed.notes\n"
    )
    assert limited(script, cpu_seconds=20) == 0


def test_the_text_of_the_first_five_pdfs_is_read_and_the_rest_noted() -> None:
    files = [pdf(b"BT /F1 12 Tf 72 712 Td (Invoice %d) Tj ET" % n) for n in range(7)]
    parsed = parse_message(with_pdfs(*files))
    assert [a.text for a in parsed.attachments] == [f"Invoice {n}" for n in range(5)] + ["", ""]
    assert "attachment 'd6.pdf': only the first 5 PDFs' text is read" in parsed.notes


def test_a_long_but_normal_message_reads_as_before() -> None:
    parsed = parse_message(ordinary(html="<h1>Quote</h1><p>Sixty seats &amp; support.</p>"))
    assert parsed.problems == []
    assert parsed.subject == "Presupuesto para 60 licencias, pedido número 1"
    assert parsed.sender == "ana1@northwind.example"
    assert parsed.references[-1] == "thread-149@northwind.example"
    assert (parsed.body, parsed.body_format) == ("Quote\nSixty seats & support.", "html")


# --- every way in -----------------------------------------------------------------------------

# Over the encoded words of a message, yet small enough for the old parser to read whole.
OVER_WORDS = (
    b"From: Mallory <mallory@example.net>\r\nMessage-ID: <words@example.net>\r\n"
    b"Subject: " + b"=?utf-8?q?a?= " * 700 + b"\r\nComments: " + b"=?utf-8?q?a?= " * 700
) + b"\r\n\r\nHello.\r\n"


@pytest.fixture
def mail_channel(policy: None) -> IntakeChannel:
    return channel_get_or_create(name="email")


def assert_refused(raw: bytes, code: str) -> IntakeRecord:
    record = IntakeRecord.objects.get(raw_sha256=hashlib.sha256(raw).hexdigest())
    assert (record.refused, record.size) == (True, len(raw))
    assert bytes(record.raw) == raw[: 64 * 1024]
    assert refusal(record) == code
    return record


def test_the_api_keeps_a_message_over_a_header_limit_as_a_refused_record(
    mail_channel: IntakeChannel,
) -> None:
    _, key = api_token_create(name="gateway", channel=mail_channel)
    client = Client()

    def post(raw: bytes):  # type: ignore[no-untyped-def]
        return client.post(
            "/api/v1/events", data=raw, content_type=MAIL_TYPE, HTTP_AUTHORIZATION=f"Bearer {key}"
        )

    refused = post(OVER_WORDS)
    taken = post(ordinary())

    assert (refused.status_code, refused.json()["outcome"]) == (422, "invalid_event")
    assert "encoded words" in refused.json()["problems"][0]["message"]
    assert_refused(OVER_WORDS, MailRefusal.TOO_MANY_ENCODED_WORDS)
    assert taken.status_code == 202


def test_a_dry_run_intake_keeps_a_message_over_a_header_limit_as_refused(
    mail_channel: IntakeChannel,
) -> None:
    result = intake_submit_in_transaction(
        channel=mail_channel, raw=OVER_WORDS, content_type=MAIL_TYPE, source="evaluation"
    )
    assert result.code == Outcome.INVALID_EVENT
    assert_refused(OVER_WORDS, MailRefusal.TOO_MANY_ENCODED_WORDS)


@pytest.mark.django_db(transaction=True)
def test_intake_mail_refuses_the_850_kb_message_within_512_mb_and_goes_on(
    mail_channel: IntakeChannel, tmp_path: Path
) -> None:
    (tmp_path / "1-bomb.eml").write_bytes(bomb())
    (tmp_path / "2-ordinary.eml").write_bytes(ordinary())
    script = (
        "from django.core.management import call_command\n"
        f"call_command('intake_mail', {str(tmp_path)!r})\n"
    )

    status = limited(script, cpu_seconds=30, env={"DATABASE_URL": database_url()})

    assert status == 0
    assert_refused(bomb(), MailRefusal.HEADER_TOO_LONG)
    assert Run.objects.filter(event_id="ordinary-1@northwind.example").exists()
    # Read again (a schedule over the folder): the refused file is known, not read again.
    assert limited(script, cpu_seconds=30, env={"DATABASE_URL": database_url()}) == 0
    assert IntakeRecord.objects.count() == 2
