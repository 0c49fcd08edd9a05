"""Indexes for pages that stay fast at a million runs: held runs by queue, fingerprint and
customer reference searches. Built CONCURRENTLY so intake keeps writing runs meanwhile."""

import django.db.models.fields.json
from django.conf import settings
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models

# Runs held before queued_at existed (0007) have none: their age in the queue is taken from
# their last change, so every held run has a place in the queue's (queued_at, id) order.
BACKFILL_QUEUED_AT = (
    "UPDATE automation_run SET queued_at = updated_at "
    "WHERE queue <> '' AND queued_at IS NULL"
)


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY cannot run inside a transaction

    dependencies = [
        ("automation", "0015_intake_admission_error"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RunSQL(BACKFILL_QUEUED_AT, migrations.RunSQL.noop),
        AddIndexConcurrently(
            model_name="run",
            index=models.Index(
                condition=models.Q(("queue", ""), _negated=True),
                fields=["queue", "queued_at", "id"],
                include=("owner",),
                name="run_held_queue_idx",
            ),
        ),
        AddIndexConcurrently(
            model_name="run",
            index=models.Index(fields=["fingerprint"], name="run_fingerprint_idx"),
        ),
        AddIndexConcurrently(
            model_name="run",
            index=models.Index(
                django.db.models.fields.json.KeyTransform(
                    "reference", django.db.models.fields.json.KeyTransform("customer", "enrichment")
                ),
                name="run_customer_ref_idx",
            ),
        ),
    ]
