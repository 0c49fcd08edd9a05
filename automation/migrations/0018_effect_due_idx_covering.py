"""The effect sweep's index carries each effect's name and attempts, so the outbox figures of
the queues page and /metrics are an index-only scan instead of a heap read per waiting
effect. Swapped online, as the held-runs index was (0017)."""

from django.contrib.postgres.operations import AddIndexConcurrently, RemoveIndexConcurrently
from django.db import migrations, models

INDEX = "effect_due_idx"
BUILDING = "effect_due_idx_next"


class Migration(migrations.Migration):
    atomic = False  # CREATE / DROP INDEX CONCURRENTLY cannot run inside a transaction

    dependencies = [("automation", "0017_run_held_queue_idx_state")]

    operations = [
        AddIndexConcurrently(
            model_name="effect",
            index=models.Index(
                fields=["status", "next_attempt_at"],
                include=("name", "attempts"),
                name=BUILDING,
            ),
        ),
        RemoveIndexConcurrently(model_name="effect", name=INDEX),
        migrations.RenameIndex(model_name="effect", new_name=INDEX, old_name=BUILDING),
    ]
