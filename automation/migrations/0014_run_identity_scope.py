"""Event identity per scope instead of per channel: one scope for all e-mail.

An e-mail's Message-ID names one request whichever path brought it (the mailbox, the API), so
the unique index moves from (channel, event_id) to (identity_scope, event_id), and the effect
key is made of the scope instead of the channel's name.

Existing rows are backfilled so that every run's effect key stays what its scope makes it:
- A JSON event's scope is its channel's name: exactly what its effect keys were made of, so
  no JSON key changes.
- An e-mail run moves to the shared mail scope with its replays, and the keys of its effects
  are made again from that scope (with the local records that carry them), except:
  - a later copy of a message another path already took in (the duplicate this migration
    ends): only one run may own the identity, the earliest does; the copy keeps its channel's
    scope, its effect key and its history;
  - a message whose effect is between attempts (tried, neither delivered nor rejected): a
    receiver may be holding that key for a delivery it performed, so neither the key nor the
    scope it is made of changes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from typing import Any

from django.conf import settings
from django.db import migrations, models
from django.db.models import OuterRef, Subquery

# As of this migration: automation.models.MAIL_SCOPE and automation.services.intake.MAIL_TYPE.
MAIL_SCOPE = "@mail"
MAIL_TYPE = "message/rfc822"
# An effect in one of these states, or never tried, is not in a receiver's hands under its key.
SETTLED = ("delivered", "rejected")
LOCAL_RECORDS = ("FollowUp", "AccountReview", "InternalNotification")
BATCH = 1000


def effect_key(scope: str, fingerprint: str, effect: str) -> str:
    """automation.services.records.effect_key, as of this migration."""
    return hashlib.sha256(f"{scope}\n{fingerprint}\n{effect}".encode()).hexdigest()


def chunks(ids: Iterable[int]) -> Iterator[list[int]]:
    batch: list[int] = []
    for pk in ids:
        batch.append(pk)
        if len(batch) == BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def mail_runs_that_move(apps: Any) -> set[int]:
    """The e-mail runs that take the shared mail scope (see the module's docstring)."""
    Run = apps.get_model("automation", "Run")
    Effect = apps.get_model("automation", "Effect")
    rows = list(
        Run.objects.filter(intake__content_type=MAIL_TYPE)
        .order_by("pk")
        .values_list("pk", "event_id", "claims_identity", "replay_of_id")
    )
    # Each run's first run: a replay is always made after the run it replays (a higher pk).
    origin: dict[int, int] = {}
    for pk, _, _, replay_of in rows:
        origin[pk] = origin.get(replay_of, replay_of) if replay_of else pk
    in_flight = (
        Effect.objects.filter(run__intake__content_type=MAIL_TYPE, attempts__gt=0)
        .exclude(status__in=SETTLED)
        .values_list("run_id", flat=True)
    )
    held = {origin[run_id] for run_id in in_flight}
    taken: set[str] = set()
    moved: set[int] = set()
    for pk, event_id, claims_identity, _ in rows:
        first = origin[pk]
        if first != pk:
            if first in moved:
                moved.add(pk)
            continue
        if first in held or (claims_identity and event_id in taken):
            continue
        if claims_identity:
            taken.add(event_id)
        moved.add(pk)
    return moved


def rekey_effects(apps: Any, run_ids: set[int], *, to_mail: bool) -> None:
    """Make the keys of these runs' effects again from the other scope; their local records
    (follow-ups, reviews, notifications) carry the key too and follow it."""
    Effect = apps.get_model("automation", "Effect")
    records = [apps.get_model("automation", name) for name in LOCAL_RECORDS]
    for batch in chunks(sorted(run_ids)):
        effects = Effect.objects.filter(run_id__in=batch).values_list(
            "pk", "idempotency_key", "name", "run__fingerprint", "run__channel__name"
        )
        for pk, key, name, fingerprint, channel in list(effects):
            before, after = effect_key(channel, fingerprint, name), effect_key(
                MAIL_SCOPE, fingerprint, name
            )
            if not to_mail:
                before, after = after, before
            # A key made some other way is left as it is; so is one whose new key is taken.
            if key != before or Effect.objects.filter(idempotency_key=after).exists():
                continue
            Effect.objects.filter(pk=pk).update(idempotency_key=after)
            for record in records:
                record.objects.filter(idempotency_key=before).update(idempotency_key=after)


def backfill_scopes(apps: Any, schema_editor: Any) -> None:
    Run = apps.get_model("automation", "Run")
    IntakeChannel = apps.get_model("automation", "IntakeChannel")
    name = IntakeChannel.objects.filter(pk=OuterRef("channel_id")).values("name")[:1]
    Run.objects.update(identity_scope=Subquery(name))
    moved = mail_runs_that_move(apps)
    for batch in chunks(sorted(moved)):
        Run.objects.filter(pk__in=batch).update(identity_scope=MAIL_SCOPE)
    rekey_effects(apps, moved, to_mail=True)
    check_now(schema_editor)


def restore_channel_keys(apps: Any, schema_editor: Any) -> None:
    Run = apps.get_model("automation", "Run")
    mail = set(Run.objects.filter(identity_scope=MAIL_SCOPE).values_list("pk", flat=True))
    rekey_effects(apps, mail, to_mail=False)
    check_now(schema_editor)


def check_now(schema_editor: Any) -> None:
    """The updated rows' deferred foreign key checks run now: PostgreSQL builds no index on a
    table with checks still pending in the transaction (the unique index comes next)."""
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("SET CONSTRAINTS ALL IMMEDIATE")


class Migration(migrations.Migration):
    dependencies = [
        ("automation", "0013_open_run_indexes"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="intakechannel",
            name="shares_mail_identity",
            field=models.BooleanField(default=True),
        ),
        migrations.AddField(
            model_name="run",
            name="identity_scope",
            field=models.CharField(default="", max_length=100),
            preserve_default=False,
        ),
        migrations.RemoveConstraint(
            model_name="run",
            name="run_unique_event_per_channel",
        ),
        migrations.RunPython(backfill_scopes, restore_channel_keys),
        migrations.AddConstraint(
            model_name="run",
            constraint=models.UniqueConstraint(
                condition=models.Q(("claims_identity", True), ("replay_of__isnull", True)),
                fields=("identity_scope", "event_id"),
                name="run_unique_event_per_scope",
            ),
        ),
    ]
