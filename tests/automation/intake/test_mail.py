"""E-mail intake: the sample set in tests/data/mail goes through the real command and pipeline."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import mailbox
import os
import tracemalloc
from email.message import EmailMessage
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from accounts.roles import roles_ensure
from audit.models import AuditEvent
from automation.intake.customers import customers_load
from automation.intake.services import api_token_create, channel_get_or_create, intake_submit
from automation.mail import html_to_text, parse_message
from automation.models import (
    MAIL_SCOPE,
    Effect,
    EffectStatus,
    IntakeChannel,
    IntakeRecord,
    Outcome,
    Run,
    State,
    Task,
)
from automation.recovery.services import CorrectionInvalid, run_correct, run_replay
from automation.runs.payloads import effect_key
from policy.models import PolicyVersion
from tests.conftest import Pipeline

MAIL = Path(__file__).resolve().parents[2] / "data" / "mail"
LABELS = list(csv.DictReader((MAIL / "labels.csv").open(encoding="utf-8")))
BY_FILE = {row["file"]: row for row in LABELS}


def sample(name: str) -> bytes:
    return (MAIL / name).read_bytes()


# --- reading one message --------------------------------------------------------------------


def test_the_label_file_names_every_sample_once() -> None:
    assert sorted(BY_FILE) == sorted(p.name for p in MAIL.glob("*.eml"))
    assert len(BY_FILE) >= 30


def test_encoded_headers_and_latin1_bodies_are_decoded() -> None:
    german = parse_message(sample("02-angebot-lizenzen-brightwater.eml"))
    assert "Angebot" in german.subject
    assert "=?" not in german.subject + german.sender_name
    spanish = parse_message(sample("13-reembolso-cobro-duplicado-costaserena.eml"))
    assert spanish.sender_name == "José García"
    assert "\ufffd" not in spanish.body


def test_windows_1252_keeps_the_euro_sign() -> None:
    french = parse_message(sample("03-demande-de-devis-atelier-lumiere.eml"))
    assert "€" in french.body or "«" in french.body
    assert "\ufffd" not in french.body


def test_html_only_mail_is_reduced_to_text() -> None:
    parsed = parse_message(sample("14-complaint-export-timeouts-kestrel.eml"))
    assert parsed.body_format == "html"
    assert "<" not in parsed.body and "&amp;" not in parsed.body
    assert "{" not in parsed.body  # the <style> block is gone


def test_html_reduction_keeps_lines_and_entities() -> None:
    text = html_to_text(
        "<html><head><style>p{color:red}</style></head><body><p>Total &euro;1,250.00</p>"
        "<table><tr><td>Seats</td><td>60</td></tr></table><script>x()</script></body></html>"
    )
    assert text.splitlines() == ["Total €1,250.00", "Seats 60"]


def test_multipart_alternative_prefers_the_plain_text() -> None:
    parsed = parse_message(sample("04-pricing-sixty-seats-juniper-ridge.eml"))
    assert parsed.body_format == "plain"
    assert "$4,500" in parsed.body


def test_attachments_are_listed_with_name_type_size_hash_and_text() -> None:
    parsed = parse_message(sample("08-invoice-line-items-fjordvik.eml"))
    (csv_file,) = parsed.attachments
    assert csv_file.content_type == "text/csv"
    assert csv_file.name.endswith(".csv")
    decoded = _decoded_attachment(sample("08-invoice-line-items-fjordvik.eml"), csv_file.name)
    assert (csv_file.size, csv_file.sha256) == (len(decoded), hashlib.sha256(decoded).hexdigest())
    assert csv_file.text.splitlines()[0] == decoded.decode().splitlines()[0]


def _decoded_attachment(raw: bytes, name: str) -> bytes:
    import email
    import email.policy

    message = email.message_from_bytes(raw, policy=email.policy.default)
    for part in message.walk():
        if part.get_filename() == name:
            payload = part.get_payload(decode=True)
            assert isinstance(payload, bytes)
            return payload
    raise AssertionError(f"no attachment {name}")


def test_text_is_read_from_a_pdf_attachment() -> None:
    parsed = parse_message(sample("09-invoice-pdf-payment-reminder-brightwater.eml"))
    (pdf,) = parsed.attachments
    assert pdf.content_type == "application/pdf"
    assert "INV-20417" in pdf.text and "1,240.00 EUR" in pdf.text


def test_a_forwarded_message_is_one_attachment_with_its_text() -> None:
    parsed = parse_message(sample("18-fwd-phishing-credentials-entered-kestrel.eml"))
    forwarded = [a for a in parsed.attachments if a.content_type == "message/rfc822"]
    assert len(forwarded) == 1
    assert forwarded[0].text.startswith("From:")
    assert forwarded[0].size > 0


@pytest.mark.parametrize(
    ("name", "note"),
    [
        ("23-export-umlaute-bad-bytes-brightwater.eml", "not valid utf-8"),
        ("24-presupuesto-charset-desconocido-costaserena.eml", "unknown charset"),
    ],
)
def test_broken_encodings_are_read_with_a_note(name: str, note: str) -> None:
    parsed = parse_message(sample(name))
    assert parsed.problems == []
    assert any(note in n for n in parsed.notes)
    assert len(parsed.body) > 50


def test_a_message_without_message_id_gets_an_id_from_its_bytes() -> None:
    raw = sample("25-webhooks-failing-no-message-id-juniper-ridge.eml")
    parsed = parse_message(raw)
    assert parsed.event_id == f"sha256:{hashlib.sha256(raw).hexdigest()}"
    assert parse_message(raw + b"\n").event_id != parsed.event_id


@pytest.mark.parametrize(
    ("name", "field", "words"),
    [
        ("34-not-an-email.eml", "message", "not an e-mail message"),
        ("35-no-from-empty-body.eml", "sender", "no From header"),
    ],
)
def test_malformed_messages_name_their_problem(name: str, field: str, words: str) -> None:
    problems = parse_message(sample(name)).problems
    assert problems and problems[0][0] == field and words in problems[0][1]


def test_reply_headers_are_read_in_thread_order() -> None:
    parsed = parse_message(sample("06-re-re-quote-request-northwind.eml"))
    first = parse_message(sample("01-quote-request-northwind.eml")).event_id
    second = parse_message(sample("05-re-quote-request-northwind.eml")).event_id
    assert parsed.references == [first, second]
    assert parsed.reply_to_event_id == second
    assert parsed.event()["thread"][-1] == second


# --- the command over the whole sample set --------------------------------------------------


@pytest.fixture
def mail_channel(policy: None) -> IntakeChannel:
    roles_ensure()
    customers_load(path=MAIL / "customers.csv")
    return channel_get_or_create(name="email")


@pytest.fixture
def mail_pipeline(mail_channel: IntakeChannel) -> Pipeline:
    return Pipeline(mail_channel)


def intake_mail(pipeline: Pipeline, *args: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    with pipeline.capture():
        call_command("intake_mail", *args, stdout=out, stderr=err)
    pipeline.drain()
    return out.getvalue(), err.getvalue()


def page_as(user: object, view: str, pk: int) -> str:
    client = Client()
    client.force_login(user)  # type: ignore[arg-type]
    return client.get(reverse(view, args=[pk])).content.decode()


def expected_summary(runs: int | None = None, replays: int | None = None) -> str:
    kinds = [row["expected_intake"] for row in LABELS]
    return (
        f"read {len(LABELS)}: {kinds.count('new') if runs is None else runs} new runs, "
        f"{kinds.count('replay') if replays is None else replays} replays, 0 conflicts, "
        f"{kinds.count('invalid')} invalid, 0 unreadable"
    )


def test_the_whole_sample_set_is_taken_in_and_the_summary_matches(
    mail_pipeline: Pipeline,
) -> None:
    out, _ = intake_mail(mail_pipeline, str(MAIL))

    assert out.splitlines()[-1] == expected_summary()
    # Every file is stored exactly as read, and has a run (its own, or the one it replays).
    records = {r.source.removeprefix("file:"): r for r in IntakeRecord.objects.all()}
    assert len(records) == len(LABELS)
    for name, row in BY_FILE.items():
        record = records[str(MAIL / name)]
        assert bytes(record.raw) == sample(name)
        assert record.content_type == "message/rfc822"
        runs = list(record.runs.all())
        if row["expected_intake"] == "replay":
            assert runs == []
            continue
        (run,) = runs
        if row["expected_intake"] == "invalid":
            assert (run.state, run.outcome) == (State.FAILED, Outcome.INVALID_EVENT), name
        else:
            assert run.state != State.FAILED, name
            assert run.normalized["source"] == "email"


def test_taking_the_set_in_again_takes_in_nothing(mail_pipeline: Pipeline) -> None:
    intake_mail(mail_pipeline, str(MAIL))
    counts = [model.objects.count() for model in (Run, IntakeRecord, AuditEvent)]

    out, _ = intake_mail(mail_pipeline, str(MAIL))

    assert out.splitlines()[-1] == (
        f"read {len(LABELS)}: 0 new runs, 0 replays, 0 conflicts, 0 invalid, 0 unreadable, "
        f"{len(LABELS)} taken in before"
    )
    # Not even the two messages that cannot be read fail once more.
    assert [model.objects.count() for model in (Run, IntakeRecord, AuditEvent)] == counts


def test_each_extraction_problem_reaches_the_correction_queue_with_its_field(
    mail_pipeline: Pipeline,
) -> None:
    intake_mail(mail_pipeline, str(MAIL))

    expected = {row["file"]: row["extraction_problem"] for row in LABELS}
    bad = {name: problem for name, problem in expected.items() if problem}
    assert set(bad.values()) == {"amount", "date", "customer_reference"}
    for name, problem in bad.items():
        run = Run.objects.get(intake__source=f"file:{MAIL / name}")
        assert (run.state, run.outcome, run.queue) == (
            State.NEEDS_REVIEW,
            Outcome.EXTRACTION_INVALID,
            "extraction_invalid",
        ), name
        assert run.failure_field == f"fields.{problem}", name
        # The fields are attached for correction: the reading that failed is kept.
        fields = run.classifications.last().raw_output["fields"]  # type: ignore[union-attr]
        assert problem in fields
    held = Run.objects.filter(outcome=Outcome.EXTRACTION_INVALID).count()
    assert held == len(bad)


def test_replies_are_linked_to_their_thread_in_either_order(mail_pipeline: Pipeline) -> None:
    intake_mail(mail_pipeline, str(MAIL))

    replies = {row["file"]: row["thread_parent"] for row in LABELS if row["thread_parent"]}
    assert len(replies) >= 3
    for reply, parent in replies.items():
        reply_run = Run.objects.get(intake__source=f"file:{MAIL / reply}")
        parent_run = Run.objects.get(intake__source=f"file:{MAIL / parent}")
        assert reply_run.thread_parent_id == parent_run.pk, reply
    # One reply sorts before the message it answers: it is linked when that one arrives.
    assert any(reply < parent for reply, parent in replies.items())


def test_both_run_pages_show_the_thread(mail_pipeline: Pipeline, ops_lead: object) -> None:
    intake_mail(mail_pipeline, str(MAIL))
    reply = Run.objects.get(intake__source=f"file:{MAIL / '05-re-quote-request-northwind.eml'}")
    assert reply.thread_parent is not None

    reply_page = page_as(ops_lead, "runs:run", reply.pk)
    parent_page = page_as(ops_lead, "runs:run", reply.thread_parent.pk)

    assert f'href="/runs/{reply.thread_parent.pk}/"' in reply_page
    assert "In reply to" in reply_page
    assert f'href="/runs/{reply.pk}/"' in parent_page
    assert "Replies to this message" in parent_page


def test_the_run_page_lists_attachments_and_the_message(
    mail_pipeline: Pipeline, ops_lead: object
) -> None:
    intake_mail(mail_pipeline, str(MAIL / "08-invoice-line-items-fjordvik.eml"))
    run = Run.objects.get()

    page = page_as(ops_lead, "runs:run", run.pk)

    attachment = run.normalized["attachments"][0]
    assert attachment["name"] in page and attachment["sha256"] in page
    assert run.normalized["sender"] in page


def test_a_customer_is_found_by_reference_or_sender_domain(mail_pipeline: Pipeline) -> None:
    intake_mail(mail_pipeline, str(MAIL))

    for name, row in BY_FILE.items():
        if row["expected_intake"] != "new" or row["extraction_problem"] == "customer_reference":
            continue
        run = Run.objects.get(intake__source=f"file:{MAIL / name}")
        customer = run.enrichment.get("customer") or {}
        assert customer.get("reference", "") == row["customer_reference"], name


def test_the_account_tier_of_a_mail_is_its_customers(mail_pipeline: Pipeline) -> None:
    intake_mail(mail_pipeline, str(MAIL / "01-quote-request-northwind.eml"))
    run = Run.objects.get()
    tiers = {
        row["reference"]: row["account_tier"]
        for row in csv.DictReader((MAIL / "customers.csv").open())
    }
    assert run.enrichment["account_tier"] == tiers["CUST-10001"]
    assert run.rules[0]["rule_id"] == "allowlist.unstated"


def test_a_maildir_and_an_unreadable_file_do_not_stop_the_batch(
    mail_pipeline: Pipeline, tmp_path: Path
) -> None:
    box = mailbox.Maildir(tmp_path / "inbox")
    for name in ("01-quote-request-northwind.eml", "17-suspicious-signins-northwind.eml"):
        box.add(sample(name))
    loose = tmp_path / "loose"
    loose.mkdir()
    (loose / "gone.eml").symlink_to(tmp_path / "missing.eml")
    (loose / "ok.eml").write_bytes(sample("15-sso-login-error-500-oakmoor.eml"))

    out, err = intake_mail(mail_pipeline, str(tmp_path / "inbox"), str(loose), "--progress=always")

    assert out.splitlines()[-1] == (
        "read 3: 3 new runs, 0 replays, 0 conflicts, 0 invalid, 1 unreadable"
    )
    assert "gone.eml: could not be read" in out
    assert err.rstrip().endswith("[##############################] 4/4 messages")
    assert Run.objects.count() == 3


# --- one size limit, whichever way a message comes ------------------------------------------


def write_large_message(path: Path, size: int) -> None:
    """An e-mail of about `size` bytes: a short text and a large base64 attachment."""
    head = (
        b"From: Ana <ana@northwind-traders.test>\r\nTo: requests@gatehouse.test\r\n"
        b"Subject: Scans of every invoice\r\nMessage-ID: <large@northwind-traders.test>\r\n"
        b'MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary="b"\r\n\r\n'
        b"--b\r\nContent-Type: text/plain\r\n\r\nAll scans attached. CUST-10001\r\n"
        b"--b\r\nContent-Type: application/pdf\r\nContent-Transfer-Encoding: base64\r\n"
        b'Content-Disposition: attachment; filename="scans.pdf"\r\n\r\n'
    )
    line = base64.b64encode(os.urandom(57)) + b"\r\n"
    with path.open("wb") as out:
        out.write(head)
        written = len(head)
        while written < size:
            out.write(line * 1000)
            written += len(line) * 1000
        out.write(b"--b--\r\n")


def test_a_28_mb_message_is_kept_as_a_refused_record_without_being_read_whole(
    mail_pipeline: Pipeline, tmp_path: Path
) -> None:
    path = tmp_path / "large.eml"
    write_large_message(path, 28_000_000)
    size = path.stat().st_size
    limit = 10 * 1024 * 1024
    assert size > 2 * limit

    tracemalloc.start()
    try:
        out, _ = intake_mail(mail_pipeline, str(path))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    # Read in chunks: never the whole file, at most the limit and a chunk of it at once.
    assert peak < limit + 6 * 1024 * 1024, f"peak {peak:,} bytes for a {size:,}-byte file"
    record = IntakeRecord.objects.get()
    assert (record.refused, record.size) == (True, size)
    assert record.raw_sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert bytes(record.raw) == path.read_bytes()[: 64 * 1024]  # its first bytes, no more
    run = record.runs.get()
    assert (run.state, run.outcome, run.failure_field) == (
        State.FAILED,
        Outcome.INVALID_EVENT,
        "message",
    )
    why = f"is 26.7 MiB ({size:,} bytes), over the limit of 10.0 MiB (10,485,760 bytes)"
    assert why in run.failure_detail
    assert "only its size, its SHA-256 and its first 64.0 KiB" in run.failure_detail
    assert (
        out.splitlines()[-1]
        == "read 1: 0 new runs, 0 replays, 0 conflicts, 1 invalid, 0 unreadable"
    )
    assert f"large.eml: message {why}" in out
    # Read again, the folder's file is known by the hash of all of it: not taken in twice.
    out, _ = intake_mail(mail_pipeline, str(path))
    assert out.splitlines()[-1].endswith("1 taken in before")
    assert IntakeRecord.objects.count() == 1


@pytest.mark.parametrize("way", ["file", "folder", "maildir"])
def test_every_way_in_refuses_a_message_over_the_limit_and_takes_the_rest(
    mail_pipeline: Pipeline, tmp_path: Path, settings: object, way: str
) -> None:
    small = sample("01-quote-request-northwind.eml")
    large = sample("09-invoice-pdf-payment-reminder-brightwater.eml")
    settings.GATEHOUSE = {**settings.GATEHOUSE, "MAX_MESSAGE_BYTES": len(small) + 1}  # type: ignore[attr-defined]
    assert len(large) > len(small) + 1
    if way == "maildir":
        box = mailbox.Maildir(tmp_path / "inbox")
        box.add(small)
        box.add(large)
        paths = [str(tmp_path / "inbox")]
    else:
        (tmp_path / "a.eml").write_bytes(small)
        (tmp_path / "b.eml").write_bytes(large)
        paths = (
            [str(tmp_path)]
            if way == "folder"
            else [str(tmp_path / "a.eml"), str(tmp_path / "b.eml")]
        )

    out, _ = intake_mail(mail_pipeline, *paths)

    assert (
        out.splitlines()[-1]
        == "read 2: 1 new runs, 0 replays, 0 conflicts, 1 invalid, 0 unreadable"
    )
    refused = IntakeRecord.objects.get(refused=True)
    assert (refused.size, refused.raw_sha256) == (len(large), hashlib.sha256(large).hexdigest())
    assert bytes(refused.raw) == large[: 64 * 1024]
    assert refused.runs.get().outcome == Outcome.INVALID_EVENT
    taken = IntakeRecord.objects.get(refused=False)
    assert (bytes(taken.raw), taken.size) == (small, len(small))


def test_the_raw_page_of_a_large_message_shows_a_bounded_preview_and_downloads_all_of_it(
    mail_pipeline: Pipeline, tmp_path: Path, ops_lead: User
) -> None:
    path = tmp_path / "large.eml"
    write_large_message(path, 3_000_000)
    raw = path.read_bytes()
    intake_mail(mail_pipeline, str(path))
    run = Run.objects.get()
    assert (run.intake.refused, run.intake.size) == (False, len(raw))  # within the limit
    client = Client()
    client.force_login(ops_lead)

    page = client.get(reverse("runs:raw", args=[run.pk]))

    assert page.status_code == 200
    assert page["Content-Type"].startswith("text/html")
    assert len(page.content) < 200_000  # a preview, not the 3 MB message
    html = page.content.decode()
    assert "Subject: Scans of every invoice" in html
    assert "&lt;ana@northwind-traders.test&gt;" in html  # text, escaped: never markup
    assert "Showing the first 64.0\xa0KB of 2.9\xa0MB stored" in html
    download = reverse("runs:raw_download", args=[run.pk])
    assert f'href="{download}"' in html

    response = client.get(download)

    assert response.status_code == 200
    assert response.content == raw
    assert response["Content-Type"] == "application/octet-stream"
    assert response["Content-Disposition"] == f'attachment; filename="intake-{run.intake_id}.eml"'
    assert response["X-Content-Type-Options"] == "nosniff"


def test_the_raw_page_of_a_refused_message_says_only_its_head_was_kept(
    mail_pipeline: Pipeline, tmp_path: Path, ops_lead: User, settings: object
) -> None:
    settings.GATEHOUSE = {**settings.GATEHOUSE, "MAX_MESSAGE_BYTES": 1_000_000}  # type: ignore[attr-defined]
    path = tmp_path / "large.eml"
    write_large_message(path, 2_000_000)
    intake_mail(mail_pipeline, str(path))
    run = Run.objects.get()
    client = Client()
    client.force_login(ops_lead)

    html = client.get(reverse("runs:raw", args=[run.pk])).content.decode()

    assert "Over the size limit: the request was not read" in html
    assert run.intake.raw_sha256 in html
    download = client.get(reverse("runs:raw_download", args=[run.pk]))
    assert download.content == path.read_bytes()[: 64 * 1024]


def test_a_request_over_the_limit_handed_to_intake_by_any_other_way_is_refused_too(
    mail_pipeline: Pipeline, settings: object
) -> None:
    settings.GATEHOUSE = {**settings.GATEHOUSE, "MAX_EVENT_BYTES": 100}  # type: ignore[attr-defined]
    raw = b'{"event_id": "evt-big", "body": "' + b"x" * 200 + b'"}'

    result = intake_submit(
        channel=mail_pipeline.channel, raw=raw, content_type="application/json", source="test"
    )

    assert result.code == Outcome.INVALID_EVENT
    assert (result.intake.refused, result.intake.size) == (True, len(raw))
    assert result.problems[0].field == "body"
    assert "over the limit of 100 bytes for a request" in result.problems[0].message


def test_a_missing_path_is_refused_before_anything_is_read(mail_pipeline: Pipeline) -> None:
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="no such file"):
        intake_mail(mail_pipeline, str(MAIL / "nope.eml"))
    assert IntakeRecord.objects.count() == 0


# --- the API accepts message/rfc822 ---------------------------------------------------------


@pytest.fixture
def mail_token(mail_channel: IntakeChannel) -> str:
    _, key = api_token_create(name="mail-gateway", channel=mail_channel)
    return key


def post_mail(client: Client, key: str, raw: bytes, content_type: str = "message/rfc822"):  # type: ignore[no-untyped-def]
    return client.post(
        "/api/v1/events", data=raw, content_type=content_type, HTTP_AUTHORIZATION=f"Bearer {key}"
    )


def test_the_api_takes_a_message_and_answers_like_for_events(
    mail_pipeline: Pipeline, mail_token: str
) -> None:
    client = Client()
    raw = sample("11-refund-double-charge-juniper-ridge.eml")
    with mail_pipeline.capture():
        first = post_mail(client, mail_token, raw)
        again = post_mail(client, mail_token, raw)
    mail_pipeline.drain()

    assert (first.status_code, first.json()["outcome"]) == (202, "accepted")
    assert (again.status_code, again.json()["outcome"]) == (200, "idempotent_replay")
    run = Run.objects.get(pk=first.json()["run"]["id"])
    assert run.event_id == parse_message(raw).event_id
    assert bytes(run.intake.raw) == raw


def test_the_api_answers_422_for_a_malformed_message_and_keeps_it(
    mail_pipeline: Pipeline, mail_token: str
) -> None:
    raw = sample("35-no-from-empty-body.eml")
    with mail_pipeline.capture():
        response = post_mail(Client(), mail_token, raw)

    assert response.status_code == 422
    assert response.json()["problems"][0]["field"] == "sender"
    run = Run.objects.get()
    assert (run.state, run.outcome, run.failure_field) == (
        State.FAILED,
        Outcome.INVALID_EVENT,
        "sender",
    )
    assert bytes(run.intake.raw) == raw


def test_the_api_refuses_other_types_and_oversized_messages(
    mail_pipeline: Pipeline, mail_token: str, settings: object
) -> None:
    client = Client()
    assert post_mail(client, mail_token, b"hello", "text/plain").status_code == 415
    settings.GATEHOUSE = {**settings.GATEHOUSE, "MAX_MESSAGE_BYTES": 100}  # type: ignore[attr-defined]
    too_big = post_mail(client, mail_token, sample("01-quote-request-northwind.eml"))
    assert too_big.status_code == 413
    assert IntakeRecord.objects.count() == 0


def test_a_changed_message_reusing_a_message_id_is_a_conflict(
    mail_pipeline: Pipeline, mail_token: str
) -> None:
    message = EmailMessage()
    message["From"] = "Ana <ana@northwind-traders.test>"
    message["To"] = "requests@gatehouse.test"
    message["Subject"] = "Quote for 10 seats"
    message["Message-ID"] = "<same-id@northwind-traders.test>"
    message.set_content("Please send a quote for 10 seats. CUST-10001")
    client = Client()
    with mail_pipeline.capture():
        first = post_mail(client, mail_token, message.as_bytes())
        message.replace_header("Subject", "Quote for 20 seats")
        second = post_mail(client, mail_token, message.as_bytes())

    assert (first.status_code, second.status_code) == (202, 409)
    assert Run.objects.filter(event_id="same-id@northwind-traders.test").count() == 1


# --- one message, one request, whichever path brings it -------------------------------------

QUOTE = "01-quote-request-northwind.eml"


@pytest.fixture
def api_key(mail_channel: IntakeChannel) -> str:
    """An integrator's token on the `api` channel (as `make demo` issues), not the mailbox's."""
    _, key = api_token_create(name="partner", channel=channel_get_or_create(name="api"))
    return key


def post_taken(pipeline: Pipeline, key: str, raw: bytes):  # type: ignore[no-untyped-def]
    with pipeline.capture():
        response = post_mail(Client(), key, raw)
    pipeline.drain()
    return response


def delivered_once() -> Effect:
    """The request's one effect, delivered, and the one follow-up it made."""
    effect = Effect.objects.get()
    assert effect.status == EffectStatus.DELIVERED
    assert Task.objects.get().idempotency_key == effect.idempotency_key
    return effect


def duplicate_recorded(source: str, code: str, run: Run) -> bool:
    """The second arrival's raw record is kept and the duplicate audited against it."""
    record = IntakeRecord.objects.get(source=source)
    return AuditEvent.objects.filter(
        intake=record, run__isnull=True, action=f"intake.{code}", data__existing_run=run.pk
    ).exists()


def test_a_message_the_mailbox_took_in_is_a_replay_when_posted_to_the_api(
    mail_pipeline: Pipeline, api_key: str
) -> None:
    intake_mail(mail_pipeline, str(MAIL / QUOTE))
    run = Run.objects.get()
    assert run.state == State.COMPLETED

    response = post_taken(mail_pipeline, api_key, sample(QUOTE))

    assert (response.status_code, response.json()["outcome"]) == (200, "idempotent_replay")
    # The run is named (the request is in hand), but it stays the mailbox's: no address to it.
    assert response.json()["run"] == {
        "id": run.pk,
        "event_id": run.event_id,
        "state": State.COMPLETED,
        "outcome": Outcome.COMPLETED,
    }
    assert Run.objects.get() == run
    delivered_once()
    assert duplicate_recorded("api:partner", Outcome.IDEMPOTENT_REPLAY, run)
    detail = Client().get(f"/api/v1/runs/{run.pk}", headers={"authorization": f"Bearer {api_key}"})
    assert detail.status_code == 404


def test_a_message_posted_to_the_api_first_is_a_replay_for_the_mailbox(
    mail_pipeline: Pipeline, api_key: str
) -> None:
    response = post_taken(mail_pipeline, api_key, sample(QUOTE))
    assert response.status_code == 202
    run = Run.objects.get()

    out, _ = intake_mail(mail_pipeline, str(MAIL / QUOTE))

    summary = "read 1: 0 new runs, 1 replays, 0 conflicts, 0 invalid, 0 unreadable"
    assert out.splitlines()[-1] == summary
    assert Run.objects.get() == run
    assert run.channel.name == "api"
    delivered_once()
    assert duplicate_recorded(f"file:{MAIL / QUOTE}", Outcome.IDEMPOTENT_REPLAY, run)


def quote_message(subject: str) -> bytes:
    message = EmailMessage()
    message["From"] = "Ana <ana@northwind-traders.test>"
    message["To"] = "requests@gatehouse.test"
    message["Subject"] = subject
    message["Message-ID"] = "<one-id@northwind-traders.test>"
    message.set_content("Please send a quote for the seats in the subject. CUST-10001")
    return message.as_bytes()


def test_a_changed_message_under_a_message_id_the_mailbox_took_is_a_conflict_for_the_api(
    mail_pipeline: Pipeline, api_key: str, tmp_path: Path
) -> None:
    (tmp_path / "quote.eml").write_bytes(quote_message("Quote for 10 seats"))
    intake_mail(mail_pipeline, str(tmp_path / "quote.eml"))
    run = Run.objects.get()

    response = post_taken(mail_pipeline, api_key, quote_message("Quote for 20 seats"))

    assert (response.status_code, response.json()["outcome"]) == (409, "idempotency_conflict")
    assert response.json()["problems"][0]["field"] == "event_id"
    assert "url" not in response.json()["run"]
    assert Run.objects.get() == run
    assert duplicate_recorded("api:partner", Outcome.IDEMPOTENCY_CONFLICT, run)


def test_a_changed_message_under_a_message_id_the_api_took_is_a_conflict_for_the_mailbox(
    mail_pipeline: Pipeline, api_key: str, tmp_path: Path
) -> None:
    first = post_taken(mail_pipeline, api_key, quote_message("Quote for 10 seats"))
    assert first.status_code == 202
    (tmp_path / "quote.eml").write_bytes(quote_message("Quote for 20 seats"))

    out, _ = intake_mail(mail_pipeline, str(tmp_path / "quote.eml"))

    assert "0 new runs, 0 replays, 1 conflicts" in out
    assert Run.objects.count() == 1


def test_replies_link_to_their_thread_across_paths_in_either_order(
    mail_pipeline: Pipeline, api_key: str
) -> None:
    # The original by the mailbox, its reply by the API: linked when the reply arrives.
    intake_mail(mail_pipeline, str(MAIL / QUOTE))
    post_taken(mail_pipeline, api_key, sample("05-re-quote-request-northwind.eml"))
    # A reply by the API before its original comes by the mailbox: linked when it comes.
    post_taken(mail_pipeline, api_key, sample("07-re-locked-out-harrow-pike.eml"))
    intake_mail(mail_pipeline, str(MAIL / "19-locked-out-harrow-pike.eml"))

    for reply, parent in [
        ("05-re-quote-request-northwind.eml", QUOTE),
        ("07-re-locked-out-harrow-pike.eml", "19-locked-out-harrow-pike.eml"),
    ]:
        reply_run = Run.objects.get(event_id=parse_message(sample(reply)).event_id)
        parent_run = Run.objects.get(event_id=parse_message(sample(parent)).event_id)
        assert reply_run.channel != parent_run.channel
        assert reply_run.thread_parent_id == parent_run.pk, reply


def test_a_replay_of_a_mail_run_reaches_the_effect_of_the_message(
    mail_pipeline: Pipeline, api_key: str, staff: User
) -> None:
    intake_mail(mail_pipeline, str(MAIL / QUOTE))
    original = Run.objects.get()
    effect = delivered_once()
    # Made of the one mail scope, not of the channel that took the message in: any run of this
    # message, by any path, replayed or not, reaches this key.
    assert effect.idempotency_key == effect_key(
        scope=MAIL_SCOPE, fingerprint=original.fingerprint, effect="create_follow_up"
    )

    with mail_pipeline.capture():
        replay = run_replay(run_id=original.pk, user=staff, reason="re-read")
    mail_pipeline.drain()

    replay.refresh_from_db()
    assert (replay.state, replay.identity_scope) == (State.COMPLETED, MAIL_SCOPE)
    assert delivered_once() == effect
    assert replay.stages.filter(stage="execute", outcome="already_delivered").exists()


def test_an_approver_sees_the_message_behind_a_request(
    mail_pipeline: Pipeline, approver: object
) -> None:
    from approvals.models import ApprovalRequest

    intake_mail(mail_pipeline, str(MAIL / "17-suspicious-signins-northwind.eml"))
    request = ApprovalRequest.objects.get()

    page = page_as(approver, "approvals:evidence", request.pk)

    run = request.run
    assert run.normalized["sender"] in page
    assert "CUST-10001" in page and "Northwind" in page
    assert 'data-testid="mail-meta"' in page


# --- the heuristic reads e-mail -------------------------------------------------------------


def mail_event(body: str, subject: str = "Invoice", **extra: object) -> dict[str, object]:
    return {
        "event_id": "m-1",
        "source": "email",
        "subject": subject,
        "body": body,
        "sender": "ap@northwind-traders.test",
        "sender_name": "Accounts Payable",
        "sent_at": "",
        "thread": [],
        "attachments": [],
        **extra,
    }


def test_the_heuristic_takes_the_total_over_the_first_amount(settings: object) -> None:
    from automation.classifiers.heuristic import read

    reading = read(
        mail_event("Line 1: EUR 100.00\nLine 2: 1.150,00 EUR\nTotal due: 1.250,00 EUR\nCUST-10001")
    )
    assert reading["fields"]["amount"]["value"] == "1250.00 EUR"
    assert reading["fields"]["amount"]["source"] == "Total due: 1.250,00 EUR"
    assert reading["fields"]["customer_reference"]["value"] == "CUST-10001"
    assert reading["fields"]["sender_name"]["value"] == "Accounts Payable"
    # An invoice states no action: billing mail most likely means "let finance know".
    assert (reading["category"], reading["requested_effect"]) == (
        "billing",
        "send_internal_notification",
    )


def test_the_heuristic_reports_the_date_that_is_no_date() -> None:
    from automation.classifiers.heuristic import read

    reading = read(mail_event("Pay on 2026-11-30 and on 31 February 2027, please. Invoice."))
    assert reading["fields"]["date"]["value"] == "31 February 2027"


def test_the_heuristic_reads_attachment_text() -> None:
    from automation.classifiers.heuristic import read

    attachment = {
        "name": "inv.csv",
        "content_type": "text/csv",
        "size": 10,
        "sha256": "0" * 64,
        "text": "item,amount\nseats,€980.00\nTotal,€980.00",
    }
    reading = read(mail_event("See attached.", subject="Documents", attachments=[attachment]))
    assert reading["fields"]["amount"]["value"] == "980.00 EUR"


def test_the_classifier_of_a_channel_comes_from_settings(policy: None, settings: object) -> None:
    from audit.models import AuditEvent

    settings.GATEHOUSE = {**settings.GATEHOUSE, "CHANNEL_CLASSIFIERS": {"email": "recorded"}}  # type: ignore[attr-defined]
    channel = channel_get_or_create(name="email")
    assert (channel.classifier, channel.classifier_version) == ("recorded", "recorded-classifier-1")
    assert channel_get_or_create(name="other").classifier == "heuristic"

    settings.GATEHOUSE = {**settings.GATEHOUSE, "CHANNEL_CLASSIFIERS": {"email": "heuristic"}}  # type: ignore[attr-defined]
    channel = channel_get_or_create(name="email")

    assert (channel.classifier, channel.classifier_version) == ("heuristic", "heuristic-3")
    changed = AuditEvent.objects.get(action="channel.classifier_changed")
    assert (changed.data["before"], changed.data["after"]) == (
        "recorded-classifier-1",
        "heuristic-3",
    )


def test_a_corrected_customer_reference_lets_the_mail_go_on(
    mail_pipeline: Pipeline, ops_lead: object
) -> None:
    intake_mail(mail_pipeline, str(MAIL / "29-quote-wrong-customer-ref-oakmoor.eml"))
    run = Run.objects.get()
    assert run.failure_field == "fields.customer_reference"
    reading = run.classifications.get().raw_output
    unknown = {**reading, "fields": {**reading["fields"]}}
    unknown["fields"]["customer_reference"] = {"value": "CUST-99999", "confidence": 1.0}

    with pytest.raises(CorrectionInvalid):
        run_correct(run_id=run.pk, user=ops_lead, corrected=unknown, reason="typo")  # type: ignore[arg-type]

    fixed = {**reading, "fields": {**reading["fields"]}}
    fixed["fields"]["customer_reference"] = {"value": "CUST-10009", "confidence": 1.0}
    with mail_pipeline.capture():
        run_correct(run_id=run.pk, user=ops_lead, corrected=fixed, reason="typo")  # type: ignore[arg-type]
    mail_pipeline.drain()

    run.refresh_from_db()
    assert (run.state, run.outcome) == (State.COMPLETED, Outcome.COMPLETED)
    assert run.effects.get().payload["customer_reference"] == "CUST-10009"


def test_a_stopped_batch_ends_between_messages(mail_channel: IntakeChannel) -> None:
    from automation.intake.mailbox import mail_intake, mail_sources

    sources = mail_sources([MAIL])
    asked: list[int] = []

    def stop() -> bool:
        asked.append(1)
        return len(asked) > 2  # stop before the third message

    batch = mail_intake(channel=mail_channel, sources=sources, stop=stop)

    assert (batch.read, batch.stopped) == (2, True)
    assert batch.summary().endswith("(stopped early)")
    assert IntakeRecord.objects.count() == Run.objects.count() == 2


def test_loading_customers_is_recorded(policy: None) -> None:
    from audit.models import AuditEvent

    customers_load(path=MAIL / "customers.csv")
    created, updated = customers_load(path=MAIL / "customers.csv")

    loads = list(AuditEvent.objects.filter(action="customers.loaded").order_by("pk"))
    assert [(e.data["created"], e.data["updated"]) for e in loads] == [
        (loads[0].data["created"], 0),
        (0, created + updated),
    ]
    assert loads[0].data["created"] == updated > 0


def test_with_no_active_policy_intake_mail_refuses_in_one_line_and_reads_nothing(
    mail_pipeline: Pipeline,
) -> None:
    PolicyVersion.objects.filter(is_active=True).update(is_active=False)

    with pytest.raises(CommandError, match=r"run `manage\.py load_policy` first"):
        intake_mail(mail_pipeline, str(MAIL))

    assert not IntakeRecord.objects.exists()


# --- hostile messages: a clear 422 naming the field, the bytes kept with a run ---------------


def hostile_mail(
    *,
    subject: bytes = b"Call me back",
    sender: bytes = b"Ana <ana@example.com>",
    message_id: bytes = b"<m-1@example.com>",
    in_reply_to: bytes = b"",
    body: bytes = b"Please call me back.",
    charset: bytes = b"utf-8",
    attachment: bytes | None = None,
) -> bytes:
    head = [
        b"From: " + sender,
        b"To: support@example.com",
        b"Subject: " + subject,
        b"Message-ID: " + message_id,
        b"Date: Mon, 30 Nov 2026 09:00:00 +0000",
        b"MIME-Version: 1.0",
        *([b"In-Reply-To: " + in_reply_to] if in_reply_to else []),
    ]
    text = [b"Content-Type: text/plain; charset=" + charset, b"", body]
    if attachment is None:
        return b"\r\n".join([*head, *text, b""])
    notes = [
        b"Content-Type: text/plain; charset=utf-8",
        b'Content-Disposition: attachment; filename="notes.txt"',
        b"",
        attachment,
    ]
    multipart = b'Content-Type: multipart/mixed; boundary="b-1"'
    return b"\r\n".join([*head, multipart, b"", b"--b-1", *text, b"--b-1", *notes, b"--b-1--", b""])


HOSTILE_MAIL = {
    "nul-in-subject": ({"subject": b"Call\x00me"}, "subject"),
    "nul-in-body": ({"body": b"Please\x00call"}, "body"),
    "nul-in-from": ({"sender": b"Ana <a\x00na@example.com>"}, "sender"),
    "nul-in-from-name": ({"sender": b"A\x00na <ana@example.com>"}, "sender_name"),
    "nul-in-message-id": ({"message_id": b"<m\x00-1@example.com>"}, "event_id"),
    "nul-in-in-reply-to": ({"in_reply_to": b"<prev\x00@example.com>"}, "thread.0"),
    "nul-in-attachment-text": ({"attachment": b"notes \x00 here"}, "attachments.0.text"),
    # UTF-7 spells lone surrogates: in a body, and in an encoded word of a header.
    "surrogate-in-body": ({"charset": b"utf-7", "body": b"Please +2AA- call"}, "body"),
    "surrogate-in-from": ({"sender": b"=?utf-7?q?A+2AA-na?= <ana@example.com>"}, "sender"),
}


@pytest.mark.parametrize(("parts", "field"), HOSTILE_MAIL.values(), ids=list(HOSTILE_MAIL))
def test_text_the_database_cannot_store_in_a_message_answers_422_naming_the_field(
    mail_pipeline: Pipeline, mail_token: str, parts: dict[str, bytes], field: str
) -> None:
    raw = hostile_mail(**parts)

    with mail_pipeline.capture():
        response = post_mail(Client(), mail_token, raw)

    assert response.status_code == 422, response.content
    assert field in [p["field"] for p in response.json()["problems"]]
    run = Run.objects.get()
    assert (run.state, run.outcome) == (State.FAILED, Outcome.INVALID_EVENT)
    assert bytes(run.intake.raw) == raw
    assert IntakeRecord.objects.get() == run.intake


def test_a_message_sent_with_a_clean_copy_of_the_same_fields_is_accepted(
    mail_pipeline: Pipeline, mail_token: str
) -> None:
    with mail_pipeline.capture():
        response = post_mail(Client(), mail_token, hostile_mail(attachment=b"notes here"))

    assert response.status_code == 202, response.content


def test_intake_mail_takes_hostile_files_and_names_the_same_way(
    mail_pipeline: Pipeline, tmp_path: Path
) -> None:
    (tmp_path / "nul.eml").write_bytes(hostile_mail(subject=b"Call\x00me"))
    # A file name that is not UTF-8, and a path longer than the record's source column.
    odd = Path(os.fsdecode(bytes(tmp_path) + b"/caf\xe9.eml"))
    odd.write_bytes(sample("01-quote-request-northwind.eml"))
    deep = tmp_path.joinpath(*["a-rather-long-directory-name"] * 8)
    deep.mkdir(parents=True)
    (deep / "deep.eml").write_bytes(sample("17-suspicious-signins-northwind.eml"))

    out, _ = intake_mail(mail_pipeline, str(tmp_path))

    assert out.splitlines()[-1] == (
        "read 3: 2 new runs, 0 replays, 0 conflicts, 1 invalid, 0 unreadable"
    )
    assert "nul.eml: subject " in out
    assert not IntakeRecord.objects.filter(runs__isnull=True).exists()
    sources = list(IntakeRecord.objects.values_list("source", flat=True))
    assert all(len(source) <= 200 for source in sources)
    assert any(source.endswith("caf\ufffd.eml") for source in sources)
    assert any(source.endswith("/deep.eml") for source in sources)


def test_a_long_subject_is_clipped_to_the_records_limit_and_delivered(
    mail_pipeline: Pipeline, mail_token: str
) -> None:
    with mail_pipeline.capture():
        response = post_mail(Client(), mail_token, hostile_mail(subject=b"Call me " * 100))
    mail_pipeline.drain()

    assert response.status_code == 202, response.content
    run = Run.objects.get()
    assert run.normalized is not None
    assert len(run.normalized["subject"]) == 500
    assert run.state != State.EXECUTING
