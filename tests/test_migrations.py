from __future__ import annotations

import hashlib
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor


@pytest.mark.django_db
def test_models_and_migrations_agree() -> None:
    out = StringIO()
    call_command("makemigrations", "--check", "--dry-run", stdout=out)
    assert "No changes detected" in out.getvalue()


# --- 0014: event identity per scope, one scope for all e-mail ------------------------------

BEFORE = [("automation", "0013_open_run_indexes")]
AFTER = [("automation", "0014_run_identity_scope")]
MAIL = "message/rfc822"


def key(scope: str, fingerprint: str, effect: str = "create_follow_up") -> str:
    return hashlib.sha256(f"{scope}\n{fingerprint}\n{effect}".encode()).hexdigest()


class Legacy:
    """Rows as the code before 0014 wrote them, through the models of that state."""

    def __init__(self, apps: Any) -> None:
        self.apps = apps
        self.channels: dict[str, Any] = {}

    def model(self, name: str) -> Any:
        return self.apps.get_model("automation", name)

    def channel(self, name: str) -> Any:
        if name not in self.channels:
            self.channels[name] = self.model("IntakeChannel").objects.create(
                name=name, workflow_version="workflow-1", prompt_version="prompt-1"
            )
        return self.channels[name]

    def run(self, channel: str, event_id: str, content_type: str, **extra: Any) -> Any:
        intake = self.model("IntakeRecord").objects.create(
            channel=self.channel(channel), raw=b"raw", content_type=content_type, source="test"
        )
        fields = {"claims_identity": True, "fingerprint": f"fp-{event_id}", **extra}
        return self.model("Run").objects.create(
            channel=self.channel(channel),
            intake=intake,
            event_id=event_id,
            workflow_version="workflow-1",
            classifier_version="recorded-classifier-1",
            prompt_version="prompt-1",
            **fields,
        )

    def effect(self, run: Any, status: str = "delivered", attempts: int = 1) -> str:
        """The effect and its follow-up under the key the run's channel made; returns it."""
        made = key(run.channel.name, run.fingerprint)
        self.model("Effect").objects.create(
            run=run,
            name="create_follow_up",
            idempotency_key=made,
            payload={},
            authorization={},
            status=status,
            attempts=attempts,
        )
        self.model("FollowUp").objects.create(
            idempotency_key=made, run=run, payload={}, route="commercial", subject="quote"
        )
        return made


def migrate(targets: list[tuple[str, str]]) -> Any:
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


def effect_keys(apps: Any, run_id: int) -> tuple[str, str]:
    effect = apps.get_model("automation", "Effect").objects.get(run_id=run_id)
    follow_up = apps.get_model("automation", "FollowUp").objects.get(run_id=run_id)
    return effect.idempotency_key, follow_up.idempotency_key


@pytest.mark.django_db(transaction=True)
def test_identity_scopes_are_backfilled_and_mail_effect_keys_follow_their_scope() -> None:
    executor = MigrationExecutor(connection)
    latest = executor.loader.graph.leaf_nodes()
    try:
        legacy = Legacy(migrate(BEFORE))
        json_runs = [legacy.run(name, "evt-1", "application/json") for name in ("api", "partner")]
        for run in json_runs:
            legacy.effect(run)
        mail = legacy.run("email", "m1@x.test", MAIL)
        legacy.effect(mail)
        replay = legacy.run("email", "m1@x.test", MAIL, claims_identity=False, replay_of=mail)
        # Taken in twice before identity was shared: the later copy keeps its channel's scope.
        copy = legacy.run("api", "m1@x.test", MAIL)
        copy_key = legacy.effect(copy)
        # Between attempts: a receiver may hold its key, so neither key nor scope changes.
        busy = legacy.run("api", "m2@x.test", MAIL)
        busy_key = legacy.effect(busy, status="retry_wait")
        invalid = legacy.run("email", "sha256:00", MAIL, claims_identity=False, fingerprint="")

        apps = migrate(AFTER)

        runs = apps.get_model("automation", "Run").objects
        scopes = dict(runs.values_list("pk", "identity_scope"))
        assert [scopes[run.pk] for run in json_runs] == ["api", "partner"]
        for run in json_runs:
            assert effect_keys(apps, run.pk) == (key(run.channel.name, run.fingerprint),) * 2
        assert [scopes[run.pk] for run in (mail, replay, invalid)] == ["@mail"] * 3
        assert effect_keys(apps, mail.pk) == (key("@mail", mail.fingerprint),) * 2
        assert (scopes[copy.pk], effect_keys(apps, copy.pk)) == ("api", (copy_key,) * 2)
        assert (scopes[busy.pk], effect_keys(apps, busy.pk)) == ("api", (busy_key,) * 2)
        with connection.cursor() as cursor:
            constraints = connection.introspection.get_constraints(cursor, "automation_run")
        assert "run_unique_event_per_scope" in constraints
        assert "run_unique_event_per_channel" not in constraints

        apps = migrate(BEFORE)

        assert effect_keys(apps, mail.pk) == (key("email", mail.fingerprint),) * 2
    finally:
        migrate(latest)


# --- 0021: a RecoveryAction for every retry of a held effect --------------------------------

BEFORE_0021 = [("automation", "0020_run_signals_reviewed"), ("audit", "0003_hand_action_index")]
AFTER_0021 = [("automation", "0021_recovery_actions_for_effect_retries")]


@pytest.mark.django_db(transaction=True)
def test_effect_retries_that_left_only_an_audit_row_get_their_recovery_action() -> None:
    executor = MigrationExecutor(connection)
    latest = executor.loader.graph.leaf_nodes()
    try:
        legacy = Legacy(migrate(BEFORE_0021))
        person = legacy.apps.get_model("auth", "User").objects.create(username="lead")
        events = legacy.apps.get_model("audit", "AuditEvent").objects
        actions = legacy.model("RecoveryAction").objects
        retried, recorded, by_system = (
            legacy.run("api", f"evt-{n}", "application/json") for n in range(3)
        )
        for run in (retried, recorded):
            events.create(
                run=run,
                actor=person,
                action="run.retry_effect",
                from_state="needs_review",
                to_state="executing",
                data={"reason": "outage over"},
            )
        actions.create(run=recorded, action="retry", actor=person, result="executing")
        events.create(run=by_system, action="run.retry_effect", to_state="executing")

        apps = migrate(AFTER_0021)

        rows = apps.get_model("automation", "RecoveryAction").objects
        assert set(rows.values_list("run_id", "action", "actor_id", "reason", "result")) == {
            (retried.pk, "retry", person.pk, "outage over", "executing"),
            (recorded.pk, "retry", person.pk, "", "executing"),
        }

        apps = migrate(BEFORE_0021)

        assert list(
            apps.get_model("automation", "RecoveryAction").objects.values_list("run_id")
        ) == [(recorded.pk,)]
    finally:
        migrate(latest)
