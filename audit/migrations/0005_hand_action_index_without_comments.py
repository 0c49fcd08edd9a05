"""A comment on a run is not acting on it (audit.models.NOT_A_HAND): the hand-action index,
which separation of duties reads, leaves comments out as it leaves decisions out. Rebuilt
CONCURRENTLY on PostgreSQL: the audit trail keeps taking rows meanwhile; until the new index
is built, the inbox's check reads the table instead (slower, still right)."""

from django.conf import settings
from django.contrib.postgres.operations import AddIndexConcurrently, RemoveIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY cannot run inside a transaction

    dependencies = [
        ("audit", "0004_partial_link_indexes"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        RemoveIndexConcurrently(model_name="auditevent", name="audit_hand_action_idx"),
        AddIndexConcurrently(
            model_name="auditevent",
            index=models.Index(
                condition=models.Q(
                    ("actor__isnull", False),
                    ("run__isnull", False),
                    models.Q(("action__startswith", "approval."), _negated=True),
                    models.Q(("action", "run.commented"), _negated=True),
                ),
                fields=["actor", "run"],
                name="audit_hand_action_idx",
            ),
        ),
    ]
