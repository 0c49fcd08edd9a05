"""Property-based fuzzing of every door input comes through.

The property, for the intake API (JSON and e-mail), the mail parser, the correction form,
the policy editor and the console's query parameters: the answer is a 2xx, 3xx or 4xx,
never a 5xx, and no intake record is left without a run or a stated reason (an audit row
naming it, as a duplicate's answer is).

Examples are derandomized and bounded so the suite stays fast and a red run can be
reproduced; GATEHOUSE_FUZZ_EXAMPLES raises the count for a longer hunt.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import pytest
from django.contrib.auth.models import Group, User
from django.db.models import Exists, OuterRef
from django.test import Client
from django.urls import reverse
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from accounts.roles import roles_ensure
from audit.models import AuditEvent
from automation.intake.services import MAIL_TYPE, api_token_create, intake_submit
from automation.mail import parse_message
from automation.models import IntakeChannel, IntakeRecord, Run, State
from policy.catalogue import reference_catalogue
from tests.conftest import TIMEOUT, Pipeline, make_event

EXAMPLES = int(os.environ.get("GATEHOUSE_FUZZ_EXAMPLES", "60"))
FUZZ = settings(
    max_examples=EXAMPLES,
    # No shrinking: it can take minutes; the falsifying example is printed as found.
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# --- hostile values ------------------------------------------------------------------------

# Every code point, lone surrogates and NUL included.
ANY_CHAR = st.characters(exclude_categories=())
HOSTILE_TEXT = st.one_of(
    st.text(ANY_CHAR, max_size=40),
    st.sampled_from(
        [
            "\x00",
            "a\x00b",
            "\ud800",
            "a\udfffb",
            "²",
            "٣",
            "9" * 23,
            "-1",
            "1e999",
            "NaN",
            "2026-02-30T10:00",
            "2026-13-45T00:00",
            "9999-12-31",
            "0001-01-01",
            '=HYPERLINK("http://x")',
            "x" * 600,
            "../..",
            "a/b",
            "%00",
            "' OR 1=1 --",
            "<script>alert(1)</script>",
        ]
    ),
)
JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    HOSTILE_TEXT,
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(HOSTILE_TEXT, inner, max_size=4)
    ),
    max_leaves=12,
)
EVENT_FIELDS = list(make_event().keys())


@st.composite
def json_bodies(draw: st.DrawFn) -> bytes:
    """A plausible event with hostile values, or a hostile document altogether."""
    kind = draw(st.sampled_from(["event", "deep", "number", "document", "bytes"]))
    if kind == "event":
        event: dict[str, Any] = make_event(event_id=f"fuzz-{draw(st.integers(0, 10**9))}")
        for name in draw(st.lists(st.sampled_from(EVENT_FIELDS), max_size=4, unique=True)):
            event[name] = draw(JSON_VALUES)
        event.update(draw(st.dictionaries(HOSTILE_TEXT, JSON_VALUES, max_size=2)))
        return _dumps(event)
    if kind == "deep":
        depth = draw(st.integers(min_value=1, max_value=5000))
        return b'{"event_id": ' + b"[" * depth + b"]" * depth + b"}"
    if kind == "number":  # past Python's 4,300-digit conversion limit, written by hand
        digits = b"9" * draw(st.integers(min_value=4000, max_value=6000))
        return b'{"event_id": "fuzz-number", "subject": ' + digits + b"}"
    if kind == "document":
        return _dumps(draw(JSON_VALUES))
    return draw(st.binary(max_size=300))


def _dumps(value: Any) -> bytes:
    # ensure_ascii writes a lone surrogate as its \\ud800 escape, as a careless client does.
    return json.dumps(value, ensure_ascii=True).encode("ascii")


@st.composite
def mail_bodies(draw: st.DrawFn) -> bytes:
    """An e-mail with hostile headers, body and attachment text, or hostile bytes.

    Written byte by byte, as a hostile sender's program would: raw UTF-8 (lone surrogates
    included) in headers and parts, no encoding rules obeyed."""
    if draw(st.booleans()):
        return draw(st.binary(max_size=400))
    lines = []
    for header in ("From", "To", "Subject", "Message-ID", "In-Reply-To", "References"):
        if draw(st.booleans()):
            lines.append(f"{header}: {_one_line(draw(HOSTILE_TEXT))}")
        else:
            lines.append(f"{header}: {MAIL_DEFAULTS[header]}")
    body = draw(HOSTILE_TEXT)
    if draw(st.booleans()):
        attachment = draw(HOSTILE_TEXT)
        lines += [
            "MIME-Version: 1.0",
            'Content-Type: multipart/mixed; boundary="b1"',
            "",
            "--b1",
            "Content-Type: text/plain; charset=utf-8",
            "",
            body,
            "--b1",
            'Content-Type: text/plain; charset=utf-8; name="note.txt"',
            'Content-Disposition: attachment; filename="note.txt"',
            "",
            attachment,
            "--b1--",
        ]
    else:
        lines += ["Content-Type: text/plain; charset=utf-8", "", body]
    return "\r\n".join(lines).encode("utf-8", "surrogatepass")


MAIL_DEFAULTS = {
    "From": "Ana <ana@example.com>",
    "To": "requests@example.com",
    "Subject": "Quote for 40 seats",
    "Message-ID": "<fuzz@example.com>",
    "In-Reply-To": "<earlier@example.com>",
    "References": "<earlier@example.com>",
}


def _one_line(text: str) -> str:
    return text.replace("\r", " ").replace("\n", " ")


# --- the invariant -------------------------------------------------------------------------


def assert_no_orphan_intake() -> None:
    """Every stored request has a run, an audit row that says what was answered (a
    duplicate's), or the reason no run was made."""
    orphans = IntakeRecord.objects.filter(
        ~Exists(Run.objects.filter(intake=OuterRef("pk"))),
        ~Exists(AuditEvent.objects.filter(intake=OuterRef("pk"))),
        admission_error="",
    )
    assert not orphans.exists(), [bytes(record.raw)[:200] for record in orphans[:3]]


def encoded(data: dict[str, str]) -> str:
    """Form or query encoding of hostile text as a raw client sends it (surrogates as bytes)."""
    return urlencode({key: value.encode("utf-8", "surrogatepass") for key, value in data.items()})


FORM = "application/x-www-form-urlencoded"


def assert_answered(response: Any, what: str) -> None:
    assert response.status_code < 500, f"{what}: {response.status_code}"


# --- fixtures ------------------------------------------------------------------------------


@pytest.fixture
def api(channel: IntakeChannel) -> Client:
    _, key = api_token_create(name="fuzz", channel=channel)
    return Client(HTTP_AUTHORIZATION=f"Bearer {key}")


@pytest.fixture
def lead(db: None) -> Iterator[Client]:
    roles_ensure()
    user = User.objects.create_user(username="fuzz-lead", is_staff=True)
    user.groups.add(Group.objects.get(name="ops-leads"))
    client = Client()
    client.force_login(user)
    yield client


# --- the intake API ------------------------------------------------------------------------


@FUZZ
@given(body=json_bodies())
def test_intake_api_json_never_answers_5xx(api: Client, body: bytes) -> None:
    response = api.post("/api/v1/events", data=body, content_type="application/json")
    assert_answered(response, f"POST {body[:80]!r}")
    assert_no_orphan_intake()


@FUZZ
@given(body=mail_bodies())
def test_intake_api_mail_never_answers_5xx(api: Client, body: bytes) -> None:
    response = api.post("/api/v1/events", data=body, content_type=MAIL_TYPE)
    assert_answered(response, f"POST {body[:80]!r}")
    assert_no_orphan_intake()


@FUZZ
@given(body=mail_bodies())
def test_the_mail_parser_reads_or_names_the_problem(channel: IntakeChannel, body: bytes) -> None:
    with contextlib.suppress(ValueError):  # a clear refusal: intake states it as a problem
        parse_message(body)
    result = intake_submit(channel=channel, raw=body, content_type=MAIL_TYPE, source="fuzz")
    assert result.run is not None or result.problems
    assert_no_orphan_intake()


# --- the console ---------------------------------------------------------------------------


@pytest.fixture
def held_run(pipeline: Pipeline) -> Run:
    event = make_event(event_id="fuzz-held")
    result = pipeline.submit(event, [TIMEOUT] * 5)  # retries exhausted: held for a person
    run = pipeline.run(result)
    assert run.state == State.NEEDS_REVIEW
    return run


REFERENCE = reference_catalogue()


@st.composite
def corrections(draw: st.DrawFn) -> dict[str, str]:
    """A well-formed correction with some of its values replaced by hostile ones."""
    data = {
        "category": draw(st.sampled_from(sorted(REFERENCE.request_types))),
        "recommended_route": draw(st.sampled_from(sorted(REFERENCE.routes))),
        "requested_effect": draw(st.sampled_from(sorted(REFERENCE.effects))),
        "reason_code": "fuzz",
        "reason": "checked by hand",
        "field_customer_reference": "CUST-12345",
    }
    for name in draw(st.lists(st.sampled_from(sorted(data)), max_size=3, unique=True)):
        data[name] = draw(HOSTILE_TEXT)
    return data


@FUZZ
@given(data=corrections())
def test_the_correction_form_never_answers_5xx(
    lead: Client, held_run: Run, data: dict[str, str]
) -> None:
    url = reverse("runs:correct", args=[held_run.pk])
    response = lead.post(url, data=encoded(data), content_type=FORM)
    assert_answered(response, f"correct {data!r}")


@st.composite
def policy_texts(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["text", "deep", "number", "yaml"]))
    if kind == "deep":
        depth = draw(st.integers(min_value=1, max_value=3000))
        return "version: fuzz-1\nrules: " + "[" * depth + "]" * depth
    if kind == "number":
        return "version: fuzz-1\napprovers: " + "9" * draw(st.integers(1, 6000))
    if kind == "yaml":
        keys = ["version", "rules", "limits", "approvers", "routes", "effects", "note"]
        doc = draw(st.dictionaries(st.sampled_from(keys), JSON_VALUES, max_size=5))
        return json.dumps(doc)  # JSON is YAML
    return draw(HOSTILE_TEXT)


@FUZZ
@given(text=policy_texts())
def test_the_policy_editor_never_answers_5xx(lead: Client, text: str) -> None:
    url = reverse("policy:new")
    response = lead.post(url, data=encoded({"document": text}), content_type=FORM)
    assert_answered(response, f"policy {text[:80]!r}")


CONSOLE_PAGES = [
    ("queues:list", []),
    ("queues:queue", ["low_confidence"]),
    ("reports:dashboard", []),
    ("reports:csv", ["straight-through"]),
    ("policy:list", []),
    ("admin:automation_run_changelist", []),
]
PARAMETERS = [
    "since",
    "until",
    "older_than_hours",
    "q",
    "route",
    "owner",
    "from",
    "to",
    "period",
    "state",
    "created_at__year",
    "created_at__month",
    "p",
    "o",
]


@FUZZ
@given(
    page=st.sampled_from(CONSOLE_PAGES),
    query=st.dictionaries(st.sampled_from(PARAMETERS), HOSTILE_TEXT, min_size=1, max_size=3),
)
def test_console_parameters_never_answer_5xx(
    lead: Client, page: tuple[str, list[str]], query: dict[str, str]
) -> None:
    name, args = page
    response = lead.get(f"{reverse(name, args=args)}?{encoded(query)}")
    assert_answered(response, f"GET {name} {query!r}")
