"""The held-runs index carries each run's state too, so /metrics' queue figures (the oldest
run still held, state = needs_review) are an index-only scan like the queue pages'. Swapped
online: the new index is built CONCURRENTLY beside the old one, which is then dropped, and
the new one takes its name."""

from django.contrib.postgres.operations import AddIndexConcurrently, RemoveIndexConcurrently
from django.db import migrations, models

INDEX = "run_held_queue_idx"
BUILDING = "run_held_queue_idx_next"


class Migration(migrations.Migration):
    atomic = False  # CREATE / DROP INDEX CONCURRENTLY cannot run inside a transaction

    dependencies = [("automation", "0016_run_held_queue_idx")]

    operations = [
        AddIndexConcurrently(
            model_name="run",
            index=models.Index(
                condition=models.Q(("queue", ""), _negated=True),
                fields=["queue", "queued_at", "id"],
                include=("owner", "state"),
                name=BUILDING,
            ),
        ),
        RemoveIndexConcurrently(model_name="run", name=INDEX),
        migrations.RenameIndex(model_name="run", new_name=INDEX, old_name=BUILDING),
    ]
