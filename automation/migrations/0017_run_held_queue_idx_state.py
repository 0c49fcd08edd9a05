"""The held-runs index carries each run's state too, so /metrics' queue figures (the oldest
run still held, state = needs_review) are an index-only scan like the queue pages'. Swapped
online: the new index is built CONCURRENTLY beside the old one, which is then dropped, and
the new one takes its name."""

from importlib import import_module

from django.contrib.postgres.operations import RemoveIndexConcurrently
from django.db import migrations, models

# The online AddIndex of the migration before (its module name starts with a digit).
AddIndexOnline = import_module("automation.migrations.0016_run_held_queue_idx").AddIndexOnline

INDEX = "run_held_queue_idx"
BUILDING = "run_held_queue_idx_next"


class RemoveIndexOnline(RemoveIndexConcurrently):
    """CONCURRENTLY on PostgreSQL; a plain DROP INDEX on the one-machine SQLite trial."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):  # type: ignore[no-untyped-def]
        if schema_editor.connection.vendor == "postgresql":
            return super().database_forwards(app_label, schema_editor, from_state, to_state)
        return migrations.RemoveIndex.database_forwards(
            self, app_label, schema_editor, from_state, to_state
        )

    def database_backwards(self, app_label, schema_editor, from_state, to_state):  # type: ignore[no-untyped-def]
        if schema_editor.connection.vendor == "postgresql":
            return super().database_backwards(app_label, schema_editor, from_state, to_state)
        return migrations.RemoveIndex.database_backwards(
            self, app_label, schema_editor, from_state, to_state
        )


class Migration(migrations.Migration):
    atomic = False  # CREATE / DROP INDEX CONCURRENTLY cannot run inside a transaction

    dependencies = [("automation", "0016_run_held_queue_idx")]

    operations = [
        AddIndexOnline(
            model_name="run",
            index=models.Index(
                condition=models.Q(("queue", ""), _negated=True),
                fields=["queue", "queued_at", "id"],
                include=("owner", "state"),
                name=BUILDING,
            ),
        ),
        RemoveIndexOnline(model_name="run", name=INDEX),
        migrations.RenameIndex(model_name="run", new_name=INDEX, old_name=BUILDING),
    ]
