from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

SEED = Path(__file__).resolve().parents[1] / "data" / "seed_cases.json"

EXPECTED_OUTPUT = """\
case-01 completed
case-02 idempotent_replay
case-03 idempotency_conflict
case-04 completed
case-05 classification_invalid
case-06 policy_block
case-07 completed
case-08 approval_stale
case-09 completed
case-10 unsupported_request
case-11 state_conflict
cases=11
completed=4
approval_required=2
policy_blocks=1
idempotent_replays=1
idempotency_conflicts=1
bounded_retries=1
checkpoint_resumes=2
controlled_failures=4
authorized_effects=4
unauthorized_effects=0
"""


def run_fixture(*args: str) -> str:
    out = StringIO()
    call_command("run_fixture", *args, stdout=out)
    return out.getvalue()


@pytest.mark.django_db(transaction=True)
def test_reference_set_reproduces_outcomes_and_counters_twice_on_one_database() -> None:
    assert run_fixture(str(SEED)) == EXPECTED_OUTPUT
    assert run_fixture(str(SEED)) == EXPECTED_OUTPUT


@pytest.mark.django_db(transaction=True)
def test_json_output_lists_cases_and_counters() -> None:
    report = json.loads(run_fixture(str(SEED), "--json"))
    assert [c["outcome"] for c in report["cases"]] == [c["expected"] for c in report["cases"]]
    assert report["counters"]["authorized_effects"] == 4
    assert next(iter(report["counters"])) == "cases"


def _case_set(tmp_path: Path, cases: list[dict]) -> Path:
    seed = json.loads(SEED.read_text())
    seed["cases"] = cases
    path = tmp_path / "cases.json"
    path.write_text(json.dumps(seed))
    return path


def _event(event_id: str, **overrides: str) -> dict:
    event = {
        "event_id": event_id,
        "source": "web_form",
        "request_type": "billing",
        "subject": "Unseen case",
        "body": "A request this runner has never seen.",
        "account_tier": "standard",
        "requested_action": "send_internal_notification",
    }
    event.update(overrides)
    return event


GOOD = {
    "category": "billing",
    "recommended_route": "finance",
    "requested_effect": "send_internal_notification",
    "reason_code": "billing_request",
}


@pytest.mark.django_db(transaction=True)
def test_unseen_case_set_outcomes_come_from_the_pipeline(tmp_path: Path) -> None:
    cases = [
        {
            "id": "x-1",
            "event": _event("x-1"),
            "expected": "retry_exhausted",
            "classifier": [{"type": "timeout"}, {"type": "timeout"}],
        },
        {"id": "x-2", "event": _event("x-2", body="   "), "expected": "invalid_event"},
        {"id": "x-3", "event": {**_event("x-3"), "extra": "key"}, "expected": "invalid_event"},
        {"id": "x-4", "event": _event("x-4", source="fax"), "expected": "invalid_event"},
        {
            "id": "x-5",
            "event": _event("x-5"),
            "expected": "classification_invalid",
            "resume_decision": {**GOOD, "unexpected": True},
        },
        {
            "id": "x-6",
            "event": _event("x-6"),
            "expected": "classification_invalid",
            "classifier": [
                {"type": "decision", "value": {k: v for k, v in GOOD.items() if k != "reason_code"}}
            ],
        },
        {
            "id": "x-7",
            "event": _event("x-7"),
            "expected": "completed",
            "classifier": [{"type": "decision", "value": GOOD}],
        },
        {"id": "x-8", "event": _event("x-7"), "expected": "idempotent_replay"},
        {
            "id": "x-9",
            "event": _event(
                "x-9", request_type="security", requested_action="queue_account_review"
            ),
            "classifier": [
                {
                    "type": "decision",
                    "value": {
                        "category": "security",
                        "recommended_route": "security_review",
                        "requested_effect": "queue_account_review",
                        "reason_code": "security_sensitive",
                    },
                }
            ],
            "approval": {
                "workflow_version": "workflow-1",
                "policy_version": "policy-0",
                "effect": "queue_account_review",
            },
            "expected": "approval_stale",
        },
    ]
    report = json.loads(run_fixture(str(_case_set(tmp_path, cases)), "--json"))
    outcomes = {c["id"]: c["outcome"] for c in report["cases"]}
    assert outcomes == {c["id"]: c["expected"] for c in cases}
    counters = report["counters"]
    assert counters["controlled_failures"] == 7
    assert counters["bounded_retries"] == 1  # the second timeout had no attempt after it
    assert counters["approval_required"] == 1
    assert counters["checkpoint_resumes"] == 0
    assert counters["authorized_effects"] == 1
    assert counters["unauthorized_effects"] == 0


@pytest.mark.django_db(transaction=True)
def test_a_case_ending_differently_from_expected_fails_the_command(tmp_path: Path) -> None:
    cases = [
        {
            "id": "y-1",
            "event": _event("y-1"),
            "expected": "completed",
            "classifier": [
                {
                    "type": "decision",
                    "value": {**GOOD, "category": "sales", "recommended_route": "commercial"},
                }
            ],
        }
    ]
    with pytest.raises(CommandError, match="1 case"):
        run_fixture(str(_case_set(tmp_path, cases)))
