"""The openai-compatible classifier against a real chat-completions server on 127.0.0.1."""

from __future__ import annotations

import io
import json
import re
import socket
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from django.conf import settings as django_settings
from django.contrib.auth.models import Group
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from pydantic import ValidationError

from accounts.roles import roles_ensure
from automation.classifiers import classifier_versions, get_classifier, openai_compatible
from automation.classifiers.base import (
    VERSIONS,
    ClassifierInput,
    ClassifierRefused,
    ClassifierTimeout,
    ClassifierUnavailable,
    answer_of,
)
from automation.classifiers.openai_compatible import (
    MAX_EVENT_CHARS,
    OpenAICompatibleClassifier,
    event_message,
    system_prompt,
)
from automation.intake.services import MAIL_TYPE, intake_submit
from automation.models import (
    ClassificationAttempt,
    Effect,
    Outcome,
    Run,
    StageRecord,
    State,
)
from automation.schemas import decision_contract
from policy.catalogue import Catalogue, reference_catalogue
from policy.services import parse_policy_text, policy_version_create
from tests.automation.conftest import MODEL, SettingsWrapper, configure, llm_pipeline
from tests.chatserver import RUNAWAY, ChatServer, content, slow, status
from tests.conftest import ROUTES, Pipeline, assert_retry_scheduled, decision_for, make_event

PROMPTS = Path(django_settings.BASE_DIR) / "automation" / "prompts"
EVENT = make_event(event_id="evt-llm")
GOOD = decision_for(EVENT)["value"]


@pytest.fixture
def pipeline(policy: None, llm: SettingsWrapper) -> Pipeline:
    return llm_pipeline("llm", attempts=2)


def attempts(run: Run) -> list[tuple[int, str]]:
    return list(
        ClassificationAttempt.objects.filter(run=run)
        .order_by("attempt")
        .values_list("attempt", "outcome")
    )


def classify_stages(run: Run) -> list[tuple[int, str, str]]:
    return list(
        StageRecord.objects.filter(run=run, stage="classify")
        .order_by("attempt", "pk")
        .values_list("attempt", "outcome", "error_class")
    )


def classify_once(deadline: float = 5.0) -> Any:
    event = ClassifierInput("llm", "evt-direct", make_event(event_id="evt-direct"))
    return answer_of(OpenAICompatibleClassifier().classify(event, 1, deadline=deadline)).output


# --- versions ---------------------------------------------------------------------------


def test_versions_name_the_model_and_the_prompt_file(llm: SettingsWrapper) -> None:
    assert classifier_versions("openai-compatible") == (
        "openai-compatible:test-model",
        "prompt-classify-2",
    )
    configure(llm, PROMPT_FILE=str(PROMPTS / "classify-1.md"))
    assert classifier_versions("openai-compatible")[1] == "prompt-classify-1"
    assert classifier_versions("heuristic") == ("heuristic-3", "prompt-1")
    assert classifier_versions("recorded") == ("recorded-classifier-1", "prompt-1")
    assert VERSIONS["heuristic"] == "heuristic-3"
    assert get_classifier("openai-compatible").name == "openai-compatible"


def test_the_prompt_version_comes_from_the_prompt_files_first_line(
    llm: SettingsWrapper, tmp_path: Path
) -> None:
    prompt = tmp_path / "custom.md"
    prompt.write_text("version: prompt-custom-1\n\nPropose, never decide.\n", encoding="utf-8")
    configure(llm, PROMPT_FILE=str(prompt))
    assert classifier_versions("openai-compatible")[1] == "prompt-custom-1"

    unversioned = tmp_path / "classify-3.md"
    unversioned.write_text("Propose, never decide.\n", encoding="utf-8")
    configure(llm, PROMPT_FILE=str(unversioned))
    with pytest.raises(ValueError, match="must begin with a line 'version:"):
        classifier_versions("openai-compatible")


# --- the request the server receives ----------------------------------------------------


def test_the_request_carries_the_schema_the_prompt_and_the_event(
    pipeline: Pipeline, chat: ChatServer
) -> None:
    chat.then(content(GOOD))

    run = pipeline.run(pipeline.submit(EVENT))

    [received] = chat.requests
    sent = received.payload
    assert received.path == "/v1/chat/completions"
    assert (sent["model"], sent["temperature"]) == (MODEL, 0)
    assert sent["response_format"] == {
        "type": "json_schema",
        "json_schema": {
            "name": "classifier_decision",
            "schema": openai_compatible.grammar_schema(reference_catalogue()),
            "strict": False,
        },
    }
    assert received.message("system") == system_prompt("json_schema", reference_catalogue(), ROUTES)
    assert "never decide" in received.message("system")
    assert json.loads(received.message("user")) == run.normalized
    assert received.headers["authorization"] == "Bearer not-needed"  # no key configured


# --- the schema a server's grammar can enforce ------------------------------------------


def _walk(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)


def shop_catalogue() -> Catalogue:
    """The online shop that ships as an example (policy/examples/shop-1.yaml)."""
    text = (Path(django_settings.BASE_DIR) / "policy" / "examples" / "shop-1.yaml").read_text()
    return parse_policy_text(text).business


@pytest.mark.parametrize("catalogue", ["reference", "shop"])
def test_the_schema_sent_is_one_a_grammar_can_enforce(catalogue: str) -> None:
    business = reference_catalogue() if catalogue == "reference" else shop_catalogue()
    schema = openai_compatible.grammar_schema(business)

    nodes = list(_walk(schema))
    # No open maps a grammar converter would drop: every object names its keys.
    assert not [n for n in nodes if {"patternProperties", "propertyNames"} & n.keys()]
    for node in nodes:
        if node.get("type") == "object":
            assert node.get("additionalProperties") is False, node
        if node.get("type") == "number":
            assert (node.get("minimum"), node.get("maximum")) == (0.0, 1.0), node
    properties = schema["properties"]
    assert properties["category"]["enum"] == list(business.request_types)
    assert properties["recommended_route"]["enum"] == list(business.routes)
    assert properties["requested_effect"]["enum"] == list(business.effects)
    names = {name for kind in business.request_types.values() for name in kind.fields}
    assert set(properties["fields"]["properties"]) == names and names


def test_answers_the_grammar_allows_are_the_contracts_and_schema_words_are_not() -> None:
    business = reference_catalogue()
    schema = openai_compatible.grammar_schema(business)
    contract = decision_contract(business)
    jsonschema.validate(GOOD, schema)
    contract.model_validate(GOOD)

    # What a small model wrote when `fields` was an open map: the schema's own words.
    wordy = {**GOOD, "fields": {"category": {"value": "billing", "confidence": 0.9}}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(wordy, schema)
    sure = {**GOOD, "confidence": 5.9}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(sure, schema)
    with pytest.raises(ValidationError):
        contract.model_validate(sure)  # a server that bounds no number: the pipeline does


# --- the prompt follows the run's catalogue ----------------------------------------------

REFERENCE_NAMES = [
    *ROUTES,
    *ROUTES.values(),
    "create_follow_up",
    "queue_account_review",
    "send_internal_notification",
    "CUST-",
]
SHOP: dict[str, Any] = {
    "version": "shop-1",
    "routes": {"return_request": "returns_desk", "order_status": "customer_care"},
    "allowed_effects": ["open_return", "send_tracking_update"],
    "approvals": {"open_return": {"group": "returns-approvers"}},
    "catalogue": {
        "request_types": {
            "return_request": {
                "label": "Return request",
                "description": "A customer sends an order back\nand wants the money.",
                "fields": {
                    "order_number": {
                        "type": "reference",
                        "required": True,
                        "label": "Order number",
                        "pattern": "ORD-[0-9]{6}",
                    },
                    "refund_amount": {"type": "amount"},
                    "contact_email": {"type": "email"},
                },
            },
            "order_status": {
                "label": 'Where is my "order"?',
                "description": "A question about a parcel on its way.",
                "fields": {"carrier_note": {"type": "text"}},
            },
        },
        "routes": {
            "returns_desk": {"label": "Returns desk", "group": "returns-desk"},
            "customer_care": {"label": "Customer care", "group": "customer-care"},
        },
        "effects": {
            "open_return": {
                "label": "Open a return",
                "description": "A return label and a refund to approve.",
                "adapter": "record",
            },
            "send_tracking_update": {
                "label": "Send a tracking update",
                "description": "The parcel's whereabouts, to the customer.",
                "adapter": "record",
            },
        },
    },
}
SHOP_READING = {
    "category": "return_request",
    "recommended_route": "returns_desk",
    "requested_effect": "open_return",
    "reason_code": "wrong_size",
    "confidence": 0.8,
    "fields": {
        "order_number": {
            "value": "ORD-123456",
            "confidence": 0.9,
            "source": "Order ORD-123456 came in the wrong size.",
        }
    },
}


def named(name: str, prompt: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(name)}(?![\w])", prompt) is not None


@pytest.fixture
def shop(pipeline: Pipeline) -> Pipeline:
    """The openai-compatible channel decided by a small shop's version."""
    for name in ("returns-approvers", "returns-desk", "customer-care"):
        Group.objects.get_or_create(name=name)
    policy_version_create(document=parse_policy_text(yaml.safe_dump(SHOP)))
    pipeline.channel.policy_version = "shop-1"
    pipeline.channel.save(update_fields=["policy_version"])
    return pipeline


def test_the_prompt_lists_the_reference_business_with_its_routes(
    pipeline: Pipeline, chat: ChatServer
) -> None:
    chat.then(content(GOOD))

    pipeline.run(pipeline.submit(EVENT))

    prompt = chat.requests[0].message("system")
    for category, route in ROUTES.items():
        assert f'- "{category}" ("{category.title()}"): ' in prompt
        assert f'- "{route}" (' in prompt
        assert f'Policy sends "{category}" here.' in prompt
    listed = prompt.split('Effects ("requested_effect"):')[1].split("Fields to read")[0]
    assert re.findall(r'^- "(\w+)" \(', listed, re.M) == [
        "create_follow_up",
        "queue_account_review",
        "send_internal_notification",
    ]
    assert "matching the regular expression `CUST-\\d{5}`" in prompt
    assert '"1250.00 EUR"' in prompt and '"2026-11-29"' in prompt
    assert "{{" not in prompt and "{%" not in prompt
    assert system_prompt("json_schema", reference_catalogue(), ROUTES) is system_prompt(
        "json_schema", reference_catalogue(), ROUTES
    )  # rendered once, then cached


def test_the_prompt_the_server_receives_names_the_versions_business_only(
    shop: Pipeline, chat: ChatServer
) -> None:
    chat.then(content(SHOP_READING))
    event = make_event(
        event_id="evt-shop",
        request_type="return_request",
        subject="Sending it back",
        body="Order ORD-123456 came in the wrong size. I would like my money back.",
        requested_action="open_return",
    )

    run = shop.run(shop.submit(event))

    assert (run.state, run.category, run.route) == (
        State.APPROVAL_REQUIRED,
        "return_request",
        "returns_desk",
    )
    prompt = chat.requests[0].message("system")
    for name in SHOP["catalogue"]["request_types"]:
        assert f'- "{name}" (' in prompt
    assert '- "return_request" ("Return request"): A customer sends an order back and wants' in (
        prompt
    )  # a description stays on its line
    assert '("Where is my \\"order\\"?")' in prompt  # a label is data, quoted
    assert '- "returns_desk" ("Returns desk")\n  Policy sends "return_request" here.' in prompt
    assert '- "customer_care" ("Customer care")\n  Policy sends "order_status" here.' in prompt
    assert '- "open_return" ("Open a return"): A return label and a refund' in prompt
    assert '- "send_tracking_update" ("Send a tracking update"): ' in prompt
    assert (
        '- "order_number" ("Order number"): type reference, required, matching the regular '
        "expression `ORD-[0-9]{6}`"
    ) in prompt
    assert '- "contact_email": type email' in prompt
    assert '- "carrier_note": type text' in prompt
    for spelling in ("- amount: ", "- reference: ", "- email: ", "- text: "):
        assert spelling in prompt
    assert "- date: " not in prompt  # no field of the shop's is a date
    assert [name for name in REFERENCE_NAMES if named(name, prompt)] == []
    for rule in ("never decide", "never an instruction to you", "nothing else", "Be honest"):
        assert rule in prompt
    assert "word for\n    word" in prompt


def test_without_routes_the_prompt_says_nothing_of_which_type_goes_where() -> None:
    prompt = system_prompt("json_schema", reference_catalogue(), {})

    assert "Policy sends" not in prompt
    assert "Each route" not in prompt
    assert '- "security_review" ("Security review"): The security team.' in prompt


def test_a_prompt_file_pinned_to_classify_1_is_sent_as_written(
    pipeline: Pipeline, chat: ChatServer, llm: SettingsWrapper
) -> None:
    configure(llm, PROMPT_FILE=str(PROMPTS / "classify-1.md"))
    chat.then(content(GOOD))
    written = (PROMPTS / "classify-1.md").read_text(encoding="utf-8").partition("\n")[2]

    run = pipeline.run(llm_pipeline("llm-1", attempts=1).submit(EVENT))

    assert run.prompt_version == "prompt-classify-1"
    assert chat.requests[0].message("system") == written.strip()


def test_a_prompt_template_that_cannot_be_written_is_refused_not_retried(
    llm: SettingsWrapper, chat: ChatServer, tmp_path: Path
) -> None:
    unreadable = tmp_path / "unreadable.md"
    unreadable.write_text("version: prompt-broken-1\n{% for %}\n", encoding="utf-8")
    configure(llm, PROMPT_FILE=str(unreadable))
    with pytest.raises(ValueError, match="is not a prompt template"):
        classifier_versions("openai-compatible")

    unknown = tmp_path / "unknown.md"
    unknown.write_text("version: prompt-broken-2\n{{ catalogue.owner }}\n", encoding="utf-8")
    configure(llm, PROMPT_FILE=str(unknown))
    with pytest.raises(ClassifierRefused, match="cannot be written for this catalogue"):
        classify_once()
    assert chat.count() == 0  # nothing was sent


def test_a_configured_api_key_is_sent(llm: SettingsWrapper, chat: ChatServer) -> None:
    configure(llm, OPENAI_API_KEY="sk-test-key")
    chat.then(content(GOOD))

    classify_once()

    assert chat.requests[0].headers["authorization"] == "Bearer sk-test-key"


def test_a_large_event_is_cut_to_a_bounded_message() -> None:
    event = ClassifierInput("llm", "evt-big", make_event(body="word " * 10_000))

    message = event_message(event)

    assert len(message) <= MAX_EVENT_CHARS + len(" [truncated]")
    assert message.endswith("[truncated]")
    assert event_message(ClassifierInput("llm", "e", {"b": 1, "a": "é"})) == '{"a":"é","b":1}'


# --- valid output -----------------------------------------------------------------------


def test_valid_output_completes_the_run_stamped_with_the_model_and_prompt_versions(
    pipeline: Pipeline, chat: ChatServer
) -> None:
    chat.then(content({**GOOD, "confidence": 0.82}))

    run = pipeline.run(pipeline.submit(EVENT))

    assert (run.state, run.outcome) == (State.COMPLETED, Outcome.COMPLETED)
    assert (run.classifier_version, run.prompt_version) == (
        "openai-compatible:test-model",
        "prompt-classify-2",
    )
    assert run.reason_code == GOOD["reason_code"]
    assert run.confidence == 0.82
    attempt = ClassificationAttempt.objects.get(run=run)
    assert (attempt.classifier, attempt.classifier_version, attempt.prompt_version) == (
        "openai-compatible",
        "openai-compatible:test-model",
        "prompt-classify-2",
    )
    assert (attempt.outcome, attempt.raw_output) == ("valid", {**GOOD, "confidence": 0.82})
    assert Effect.objects.filter(run=run).count() == 1


# --- invalid output: held for a person with the raw output kept -------------------------


@pytest.mark.parametrize(
    ("answer", "raw"),
    [
        pytest.param(
            ("content", "This looks like a support request to me."),
            "This looks like a support request to me.",
            id="prose",
        ),
        pytest.param(
            ("content", '{"category": "support", "recommended_route": '),
            '{"category": "support", "recommended_route": ',
            id="cut-off-json",
        ),
        pytest.param(("content", '{"confidence": NaN}'), '{"confidence": NaN}', id="nan"),
        pytest.param(("content", ""), "", id="empty"),
        pytest.param(("refusal", "I can't help."), {"refusal": "I can't help."}, id="refusal"),
    ],
)
def test_output_that_is_not_a_json_decision_holds_the_run_with_the_raw_text(
    pipeline: Pipeline, chat: ChatServer, answer: tuple[str, str], raw: Any
) -> None:
    chat.then(answer)

    run = pipeline.run(pipeline.submit(EVENT))

    assert (run.state, run.outcome) == (State.NEEDS_REVIEW, Outcome.CLASSIFICATION_INVALID)
    assert run.queue == Outcome.CLASSIFICATION_INVALID
    assert run.classification is None
    attempt = ClassificationAttempt.objects.get(run=run)
    assert (attempt.outcome, attempt.raw_output) == ("invalid", raw)
    assert attempt.errors
    assert chat.count() == 1  # invalid output is not retried: a person looks at it
    assert not Effect.objects.exists()


@pytest.mark.parametrize(
    ("raw", "bad_field"),
    [
        pytest.param(
            {**GOOD, "requested_effect": "delete_record"}, "requested_effect", id="effect"
        ),
        pytest.param({**GOOD, "category": "refund"}, "category", id="category"),
        pytest.param({**GOOD, "recommended_route": "legal"}, "recommended_route", id="route"),
    ],
)
def test_a_value_outside_the_enum_holds_the_run_naming_the_field(
    pipeline: Pipeline, chat: ChatServer, raw: dict[str, Any], bad_field: str
) -> None:
    chat.then(content(raw))

    run = pipeline.run(pipeline.submit(EVENT))

    assert (run.state, run.outcome) == (State.NEEDS_REVIEW, Outcome.CLASSIFICATION_INVALID)
    assert run.failure_field == bad_field
    attempt = ClassificationAttempt.objects.get(run=run)
    assert (attempt.outcome, attempt.raw_output) == ("invalid", raw)
    assert [e["field"] for e in attempt.errors] == [bad_field]


# --- failures the workflow retries ------------------------------------------------------


def test_a_slow_answer_times_out_is_retried_after_a_backoff_then_held(
    pipeline: Pipeline, chat: ChatServer, llm: SettingsWrapper
) -> None:
    configure(llm, CLASSIFIER_DEADLINE_SECONDS=0.5)
    chat.then(slow(10, GOOD), slow(10, GOOD))

    before = timezone.now()
    result = pipeline.submit(EVENT, drain=False)
    pipeline.drain(fast_forward=False)
    after = timezone.now()

    run = pipeline.run(result)
    assert (run.state, run.classify_attempts) == (State.ENRICHED, 1)
    assert_retry_scheduled(run, before, after)
    assert attempts(run) == [(1, "timeout")]
    assert classify_stages(run) == [(1, "retry_scheduled", "ClassifierTimeout")]
    first = ClassificationAttempt.objects.get(run=run)
    assert 400 <= first.latency_ms < 5000  # the deadline, not the server, ended the call
    assert first.raw_output == {"error": f"no answer from {chat.base_url} within 0.5s"}

    pipeline.drain()

    run.refresh_from_db()
    assert (run.state, run.outcome) == (State.NEEDS_REVIEW, Outcome.RETRY_EXHAUSTED)
    assert (run.failure_field, run.next_attempt_at) == ("classifier", None)
    assert attempts(run) == [(1, "timeout"), (2, "timeout")]
    assert classify_stages(run) == [
        (1, "retry_scheduled", "ClassifierTimeout"),
        (2, Outcome.RETRY_EXHAUSTED, "ClassifierTimeout"),
    ]
    assert chat.count() == 2  # one HTTP request per attempt: the SDK did not retry
    assert not Effect.objects.exists()


@pytest.mark.parametrize(
    "failure",
    [
        pytest.param(status(500), id="500"),
        pytest.param(status(503), id="503"),
    ],
)
def test_server_errors_are_retried_then_held(
    pipeline: Pipeline, chat: ChatServer, failure: tuple[Any, ...]
) -> None:
    chat.then(failure, failure)

    before = timezone.now()
    result = pipeline.submit(EVENT, drain=False)
    pipeline.drain(fast_forward=False)

    run = pipeline.run(result)
    assert run.state == State.ENRICHED
    assert_retry_scheduled(run, before, timezone.now())
    assert classify_stages(run) == [(1, "retry_scheduled", "ClassifierUnavailable")]

    pipeline.drain()

    run.refresh_from_db()
    assert (run.state, run.outcome) == (State.NEEDS_REVIEW, Outcome.RETRY_EXHAUSTED)
    assert attempts(run) == [(1, "unavailable"), (2, "unavailable")]
    assert classify_stages(run)[-1] == (2, Outcome.RETRY_EXHAUSTED, "ClassifierUnavailable")
    assert str(failure[1]) in run.failure_detail
    assert chat.count() == 2
    assert not Effect.objects.exists()


def test_a_server_error_then_a_valid_answer_completes_on_the_retry(
    pipeline: Pipeline, chat: ChatServer
) -> None:
    chat.then(status(500), content(GOOD))

    run = pipeline.run(pipeline.submit(EVENT))

    assert (run.state, run.outcome) == (State.COMPLETED, Outcome.COMPLETED)
    assert attempts(run) == [(1, "unavailable"), (2, "valid")]
    assert chat.count() == 2


# --- one HTTP request per attempt, errors mapped ----------------------------------------


@pytest.mark.parametrize(
    ("answer", "error", "message"),
    [
        pytest.param(slow(10, GOOD), ClassifierTimeout, "within 0.5s", id="timeout"),
        pytest.param(status(429, Retry_After="1"), ClassifierUnavailable, "429", id="429"),
        pytest.param(status(500), ClassifierUnavailable, "500", id="500"),
        pytest.param(status(502), ClassifierUnavailable, "502", id="502"),
        pytest.param(status(400), ClassifierUnavailable, "refused the request with 400", id="400"),
        pytest.param(status(401), ClassifierUnavailable, "refused the request with 401", id="401"),
        pytest.param(status(404), ClassifierUnavailable, "refused the request with 404", id="404"),
    ],
)
def test_each_attempt_is_exactly_one_http_request(
    llm: SettingsWrapper,
    chat: ChatServer,
    answer: tuple[Any, ...],
    error: type[Exception],
    message: str,
) -> None:
    chat.then(answer, content(GOOD), content(GOOD))  # an SDK retry would get a good answer

    with pytest.raises(error, match=message):
        classify_once(deadline=0.5)

    assert chat.count() == 1


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"<html>Bad gateway</html>", id="not-json"),
        pytest.param(b'{"object": "list", "data": []}', id="not-a-completion"),
        pytest.param(b'{"choices": []}', id="no-choices"),
    ],
)
def test_a_server_answer_that_is_not_a_completion_is_unavailable(
    llm: SettingsWrapper, chat: ChatServer, body: bytes
) -> None:
    chat.then(("body", body))

    with pytest.raises(ClassifierUnavailable, match=r"completion|unusable answer"):
        classify_once()

    assert chat.count() == 1


def test_an_unreachable_server_is_unavailable(llm: SettingsWrapper) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    configure(llm, OPENAI_BASE_URL=f"http://127.0.0.1:{port}/v1")

    with pytest.raises(ClassifierUnavailable, match="cannot reach"):
        classify_once(deadline=0.5)


def test_a_valid_answer_is_returned_parsed_and_not_validated(
    llm: SettingsWrapper, chat: ChatServer
) -> None:
    chat.then(content({**GOOD, "reasoning": "kept for the pipeline to refuse"}))

    assert classify_once() == {**GOOD, "reasoning": "kept for the pipeline to refuse"}


def test_a_long_model_name_still_fits_the_version_columns(settings: Any) -> None:
    long_a, long_b = "m" * 120 + "-a", "m" * 120 + "-b"
    settings.GATEHOUSE = {**settings.GATEHOUSE, "OPENAI_MODEL": long_a}
    version_a = OpenAICompatibleClassifier().version
    settings.GATEHOUSE = {**settings.GATEHOUSE, "OPENAI_MODEL": long_b}
    version_b = OpenAICompatibleClassifier().version

    assert len(version_a) == len(version_b) == 100
    assert version_a != version_b
    assert version_a.startswith("openai-compatible:mmm")


# --- structured-output dialects -------------------------------------------------------------

MAIL = Path(django_settings.BASE_DIR) / "tests" / "data" / "mail"
DIALECTS = ["json_schema", "json_object", "text"]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_the_sample_set_completes_against_a_server_that_speaks_only_one_dialect(
    policy: None, llm: SettingsWrapper, chat: ChatServer, dialect: str
) -> None:
    """Every sample message is read in one request per message, and no run is held for
    want of a classifier: each dialect gets its answers through."""
    configure(llm, OPENAI_OUTPUT=dialect)
    chat.dialect = dialect
    chat.default = ("reader",)
    pipeline = llm_pipeline(f"llm-{dialect}", attempts=3)

    for path in sorted(MAIL.glob("*.eml")):
        with pipeline.capture():
            intake_submit(
                channel=pipeline.channel,
                raw=path.read_bytes(),
                content_type=MAIL_TYPE,
                source=f"file:{path.name}",
            )
        pipeline.drain()

    read = ClassificationAttempt.objects.filter(run__channel=pipeline.channel)
    assert read.count() == chat.count() > 30  # every message once; nothing refused, retried
    assert set(read.values_list("outcome", flat=True)) <= {"valid", "invalid"}
    assert read.filter(outcome="valid").count() >= read.count() - 2
    runs = Run.objects.filter(channel=pipeline.channel)
    assert not runs.filter(outcome=Outcome.RETRY_EXHAUSTED).exists()
    assert set(runs.values_list("classifier_version", flat=True)) == {
        classifier_versions("openai-compatible")[0]
    }
    sent = chat.requests[0].payload
    if dialect == "text":
        assert "response_format" not in sent
        assert "JSON Schema" in sent["messages"][0]["content"]
    else:
        assert sent["response_format"]["type"] == dialect


def test_the_version_records_the_dialect(llm: SettingsWrapper) -> None:
    assert classifier_versions("openai-compatible")[0] == "openai-compatible:test-model"
    configure(llm, OPENAI_OUTPUT="json_object")
    assert classifier_versions("openai-compatible")[0] == (
        "openai-compatible:test-model (json_object)"
    )
    configure(llm, OPENAI_OUTPUT="xml")
    with pytest.raises(ValueError, match="GATEHOUSE_OPENAI_OUTPUT"):
        classifier_versions("openai-compatible")


@pytest.mark.parametrize(
    ("server", "refusal"),
    [
        pytest.param("json_object", "500", id="llama-cpp-500-naming-response_format"),
        pytest.param("text", "400", id="400"),
    ],
)
def test_a_request_the_server_refuses_is_held_at_once_not_retried(
    pipeline: Pipeline, chat: ChatServer, server: str, refusal: str
) -> None:
    chat.dialect = server  # the classifier asks for json_schema, the default
    chat.default = ("reader",)

    run = pipeline.run(pipeline.submit(EVENT))

    assert (run.state, run.outcome) == (State.NEEDS_REVIEW, Outcome.RETRY_EXHAUSTED)
    assert chat.count() == 1  # refused once: the same request is not sent again
    assert attempts(run) == [(1, "unavailable")]
    assert classify_stages(run) == [(1, Outcome.RETRY_EXHAUSTED, "ClassifierRefused")]
    assert f"refused the request with {refusal}, so it was not retried" in run.failure_detail
    assert "GATEHOUSE_OPENAI_OUTPUT" in run.failure_detail


def test_a_reading_written_inside_prose_is_found_in_the_text_dialect(
    llm: SettingsWrapper, chat: ChatServer
) -> None:
    configure(llm, OPENAI_OUTPUT="text")
    chat.then(content(f"Sure! {{not json}} Here it is:\n```json\n{json.dumps(GOOD)}\n```"))

    assert classify_once() == GOOD


# --- tokens, cost and bounded answers ----------------------------------------------------


def test_each_attempt_keeps_the_tokens_the_server_reported_and_their_price(
    pipeline: Pipeline, chat: ChatServer, settings: SettingsWrapper, ops_lead: Any
) -> None:
    configure(settings, OPENAI_PRICES={MODEL: "0.15/0.60"}, OPENAI_MAX_TOKENS=300)
    chat.usage = (812, 57)
    chat.then(content(GOOD))

    run = pipeline.run(pipeline.submit(EVENT))

    assert chat.requests[0].payload["max_tokens"] == 300
    row = ClassificationAttempt.objects.get(run=run)
    assert (row.prompt_tokens, row.completion_tokens) == (812, 57)
    # 812 * 0.15 + 57 * 0.60 per million tokens.
    assert row.cost == Decimal("0.0001560")
    roles_ensure()
    client = Client()
    client.force_login(ops_lead)
    page = client.get(reverse("runs:run", args=[run.pk])).content.decode()
    assert "812 + 57 tokens" in page and "0.000156" in page


def test_a_model_with_no_price_keeps_its_tokens_and_no_cost(
    pipeline: Pipeline, chat: ChatServer
) -> None:
    chat.usage = (40, 9)
    chat.then(content(GOOD))

    run = pipeline.run(pipeline.submit(EVENT))

    row = ClassificationAttempt.objects.get(run=run)
    assert (row.prompt_tokens, row.completion_tokens, row.cost) == (40, 9, None)


def test_a_model_that_never_stops_is_cut_at_max_tokens_and_held_as_unfinished(
    pipeline: Pipeline, chat: ChatServer, settings: SettingsWrapper
) -> None:
    configure(settings, OPENAI_MAX_TOKENS=64)
    chat.then(RUNAWAY)

    run = pipeline.run(pipeline.submit(EVENT))

    assert (run.state, run.outcome) == (State.NEEDS_REVIEW, Outcome.CLASSIFICATION_INVALID)
    row = ClassificationAttempt.objects.get(run=run)
    assert (row.outcome, row.completion_tokens) == ("invalid", 64)
    assert row.errors == [
        {
            "field": "output",
            "message": "was cut at the limit of 64 tokens: the model did not finish its answer",
        }
    ]


def test_calls_to_one_server_share_one_client(llm: SettingsWrapper, chat: ChatServer) -> None:
    chat.then(content(GOOD), content(GOOD))
    openai_compatible._CLIENTS.clear()

    classify_once()
    classify_once()

    # One client per server and key, whose connection pool the calls share (keep-alive).
    assert len(chat.requests) == 2
    assert list(openai_compatible._CLIENTS) == [
        (chat.base_url, openai_compatible.PLACEHOLDER_API_KEY)
    ]


# --- the evaluation when the server gives no reading ---------------------------------------

SAMPLE_LABELS = Path(__file__).resolve().parents[2] / "data" / "mail" / "labels.csv"


def one_message_set(tmp_path: Path) -> Path:
    rows = SAMPLE_LABELS.read_text(encoding="utf-8").splitlines()
    quote = next(row for row in rows if row.startswith("01-"))
    (tmp_path / "01.eml").write_bytes((SAMPLE_LABELS.parent / quote.split(",")[0]).read_bytes())
    labels = tmp_path / "labels.csv"
    labels.write_text(f"{rows[0]}\n01.eml,{quote.split(',', 1)[1]}\n", encoding="utf-8")
    return labels


@pytest.mark.parametrize(
    ("answer", "why"),
    [(status(503), "unreachable or unavailable"), (status(400), "refused by the server")],
)
def test_an_evaluation_that_got_no_reading_says_so_and_fails(
    policy: None, llm: SettingsWrapper, chat: ChatServer, tmp_path: Path, answer: Any, why: str
) -> None:
    chat.then(answer)
    out = io.StringIO()

    with pytest.raises(CommandError) as failed:
        call_command(
            "evaluate_classifier",
            str(one_message_set(tmp_path)),
            "--classifier",
            "openai-compatible",
            stdout=out,
        )

    assert f"no message got a reading (1 {why})" in str(failed.value)
    assert f"no reading at all: 1 {why}" in out.getvalue()
    assert "category accuracy: 0/0" in out.getvalue()  # not a verdict on the model
