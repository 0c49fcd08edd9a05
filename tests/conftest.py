"""Shared test setup: named users per role, a test intake channel, and an inline pipeline.

Follow-up work is enqueued on commit and collected in an inline queue, which the tests drain
by calling the same task functions workers run. Most tests run inside one rolled-back test
transaction (fast); there `capture()` releases the on-commit callbacks each step registered,
exactly as a real commit would. Tests about real commits, locks and races ask for
`transaction=True`.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import sys
from collections import deque
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import Group, User
from django.db import transaction
from django.test import TestCase

from accounts.roles import roles_ensure
from automation.intake.services import IntakeResult, intake_submit
from automation.models import IntakeChannel, IntakeRecord, RecordedOutcome, Run, State
from automation.pipeline.services import run_advance
from core import embedded_db
from policy import selectors
from policy.services import policy_ensure_defaults
from tests.catalogues import TEST_SECRETS
from worker.dispatch import Message, inline


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """A thread that is not a daemon and never ends keeps the interpreter from exiting: the
    suite would print its summary and then hang until CI's time ran out. Two minutes after
    the tests, a process still here prints every thread's stack and exits with an error."""
    faulthandler.dump_traceback_later(120, exit=True, file=sys.__stderr__)


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix: None) -> None:
    """On the embedded server every test run has a database of its own, named for its
    process: two runs at once never drop each other's. One left by a run that died (its
    process is gone) is dropped before this run creates its own."""
    if settings.GATEHOUSE_EMBEDDED_DATABASE:
        settings.DATABASES["default"].setdefault("TEST", {})["NAME"] = embedded_db.test_database()


@pytest.fixture(scope="session", autouse=True)
def effect_secrets_of_the_tests() -> None:
    """The variables the tests' catalogues name as secrets are declared for effects, in this
    process and in every server or worker a test starts (they read the environment)."""
    names = sorted(settings.GATEHOUSE_EFFECT_SECRETS | TEST_SECRETS)
    os.environ["GATEHOUSE_EFFECT_SECRETS"] = ",".join(names)
    settings.GATEHOUSE_EFFECT_SECRETS = frozenset(names)


def make_event(**overrides: Any) -> dict[str, Any]:
    event = {
        "event_id": "evt-100",
        "source": "web_form",
        "request_type": "support",
        "subject": "Access question",
        "body": "Please create a follow-up for this request.",
        "account_tier": "standard",
        "requested_action": "create_follow_up",
    }
    event.update(overrides)
    return event


ROUTES = {
    "support": "service_desk",
    "billing": "finance",
    "sales": "commercial",
    "security": "security_review",
}


def decision_for(event: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    """A classifier decision that agrees with the event (what policy-1 executes)."""
    value = {
        "category": event["request_type"],
        "recommended_route": ROUTES[event["request_type"]],
        "requested_effect": event["requested_action"],
        "reason_code": f"{event['request_type']}_request",
    }
    value.update(overrides)
    return {"type": "decision", "value": value}


TIMEOUT = {"type": "timeout"}


@contextlib.contextmanager
def rolled_back() -> Iterator[None]:
    """A transaction that is rolled back when the block ends: test data for several tests, or
    one request's writes. Like a TestCase's own transaction (Django marks those the same way)
    it may hold the services' durable transactions, which refuse any other outer block."""
    atomic = transaction.atomic()
    atomic._from_testcase = True  # type: ignore[attr-defined]
    with atomic:
        yield
        transaction.set_rollback(True)


class Pipeline:
    """Submits events to a channel and drains the resulting work inline."""

    def __init__(self, channel: IntakeChannel) -> None:
        self.channel = channel
        self.queue: deque[Message] = deque()

    def record(self, event_id: str, outcomes: list[dict[str, Any]]) -> None:
        for attempt, outcome in enumerate(outcomes, start=1):
            RecordedOutcome.objects.update_or_create(
                channel=self.channel,
                event_id=event_id,
                attempt=attempt,
                defaults={"outcome": outcome},
            )

    def submit(
        self,
        event: dict[str, Any],
        outcomes: list[dict[str, Any]] | None = None,
        *,
        drain: bool = True,
    ) -> IntakeResult:
        if outcomes is not None:
            self.record(str(event.get("event_id")), outcomes)
        with self.capture():
            result = intake_submit(
                channel=self.channel,
                raw=json.dumps(event).encode(),
                content_type="application/json",
                source="test",
            )
        if drain:
            self.drain()
        return result

    @contextlib.contextmanager
    def capture(self) -> Iterator[None]:
        """Collect the work a view or service enqueues, to be drained like the rest."""
        with inline() as queue, TestCase.captureOnCommitCallbacks(execute=True):
            yield
        self.queue.extend(queue)

    def drain(self, *, fast_forward: bool = True) -> None:
        """Run queued work; with fast_forward, let classifier backoffs run out."""
        for _ in range(500):
            with self.capture():
                if self.queue:
                    self.queue.popleft().run()
                elif fast_forward and (run := self._waiting_run()) is not None:
                    run_advance(run_id=run.pk, now=run.next_attempt_at)
                else:
                    return
        raise AssertionError("pipeline did not settle")

    def _waiting_run(self) -> Run | None:
        return Run.objects.filter(
            channel=self.channel, state=State.ENRICHED, next_attempt_at__isnull=False
        ).first()

    def run(self, result: IntakeResult) -> Run:
        assert result.run is not None
        return Run.objects.get(pk=result.run.pk)


@pytest.fixture(autouse=True)
def stored_versions_read_afresh() -> None:
    """Each test reads the stored versions' catalogues afresh (policy.selectors): those of
    the test before were rolled back with it."""
    selectors.forget()


@pytest.fixture
def policy(db: None) -> None:
    policy_ensure_defaults()


@pytest.fixture
def channel(policy: None) -> IntakeChannel:
    return IntakeChannel.objects.create(
        name="test",
        classifier="recorded",
        classifier_version="recorded-classifier-1",
        workflow_version="workflow-1",
        prompt_version="prompt-1",
        max_classifier_attempts=2,
    )


@pytest.fixture
def bare_run(db: None) -> Run:
    """A run with its channel and intake record and nothing else: the row a model's own
    transitions are tested on, without the pipeline."""
    channel = IntakeChannel.objects.create(
        name="bare", workflow_version="workflow-1", prompt_version="prompt-1"
    )
    intake = IntakeRecord.objects.create(
        channel=channel, raw=b"{}", content_type="application/json", source="test"
    )
    return Run.objects.create(
        channel=channel,
        intake=intake,
        event_id="evt-1",
        workflow_version="workflow-1",
        classifier_version="recorded-classifier-1",
        prompt_version="prompt-1",
    )


@pytest.fixture
def pipeline(db: None, channel: IntakeChannel) -> Iterator[Pipeline]:
    yield Pipeline(channel)


def _user(username: str, *groups: str, **extra: Any) -> User:
    """A person in these sample teams, which hold their roles' permissions (roles_ensure):
    deciding an approval takes the approver role's, as it does in production."""
    roles_ensure()
    user = User.objects.create_user(username=username, password="pw-" + username, **extra)
    for name in groups:
        user.groups.add(Group.objects.get_or_create(name=name)[0])
    return user


@pytest.fixture
def approver(db: None) -> User:
    return _user("approver", "security-approvers")


@pytest.fixture
def second_approver(db: None) -> User:
    return _user("approver2", "security-approvers")


@pytest.fixture
def ops_lead(db: None) -> User:
    return _user("opslead", "ops-leads", is_staff=True)


@pytest.fixture
def staff(db: None) -> User:
    return _user("staff", "recovery-staff", is_staff=True)


@pytest.fixture
def outsider(db: None) -> User:
    return _user("outsider", "finance-approvers")


@pytest.fixture
def recoverer(db: None) -> User:
    """Recovery staff, with the roles' real permissions (no password: hashing is slow)."""
    roles_ensure()
    user = User.objects.create_user(username="recoverer")
    user.groups.add(Group.objects.get(name="recovery-staff"))
    return user


def assert_retry_scheduled(run: Run, before: datetime, after: datetime) -> None:
    """A retry is scheduled within the full-jitter backoff window of the step that failed,
    which began between `before` and `after`: never immediate, never beyond the cap."""
    gatehouse = settings.GATEHOUSE
    attempt = run.classify_attempts - run.classify_attempts_spent
    cap = min(
        gatehouse["RETRY_BACKOFF_CAP_SECONDS"], gatehouse["RETRY_BACKOFF_BASE_SECONDS"] * 2**attempt
    )
    assert run.next_attempt_at is not None
    assert before <= run.next_attempt_at <= after + timedelta(seconds=cap)
