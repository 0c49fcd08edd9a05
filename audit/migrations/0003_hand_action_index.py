"""The runs each person acted on by hand, for separation of duties: the inbox filters every
pending request by them, and an approver's own decisions can be most of their audit rows.
Built CONCURRENTLY on PostgreSQL: the audit trail keeps taking rows meanwhile."""

from django.conf import settings
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY cannot run inside a transaction

    dependencies = [
        ("audit", "0002_append_only_trigger"),
        ("automation", "0016_run_held_queue_idx"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="auditevent",
            index=models.Index(
                condition=models.Q(
                    ("actor__isnull", False),
                    ("run__isnull", False),
                    models.Q(("action__startswith", "approval."), _negated=True),
                ),
                fields=["actor", "run"],
                name="audit_hand_action_idx",
            ),
        ),
    ]
