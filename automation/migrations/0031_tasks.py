"""Task: the one row a `record` effect keeps, for any catalogue's effects.

The three tables of the reference business's local effects (follow-ups, account reviews,
internal notifications) become task rows with the same keys, runs, payloads and times, and
are dropped. The effect names below are the codes those rows were written under: history,
fixed in this migration as it was.
"""

import django.db.models.deletion
from django.db import migrations, models

# The table each old record came from, and the effect its rows were written for.
OLD_TABLES = {
    "followup": "create_follow_up",
    "accountreview": "queue_account_review",
    "internalnotification": "send_internal_notification",
}


def copy_records(apps, schema_editor):
    Task = apps.get_model("automation", "Task")
    for model_name, effect in OLD_TABLES.items():
        Old = apps.get_model("automation", model_name)
        for old in Old.objects.order_by("pk").iterator(chunk_size=2000):
            subject = getattr(old, "subject", "") or getattr(old, "message", "")
            task = Task.objects.create(
                idempotency_key=old.idempotency_key,
                run_id=old.run_id,
                effect=effect,
                route=getattr(old, "route", ""),
                subject=subject[:500],
                payload=old.payload,
            )
            # created_at is auto_now_add: the task keeps the record's own time.
            Task.objects.filter(pk=task.pk).update(created_at=old.created_at)


class Migration(migrations.Migration):
    dependencies = [
        ("automation", "0030_receive_event_function"),
    ]

    operations = [
        migrations.CreateModel(
            name="Task",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("idempotency_key", models.CharField(max_length=64, unique=True)),
                ("effect", models.CharField(max_length=50)),
                ("group", models.CharField(blank=True, max_length=150)),
                ("route", models.CharField(blank=True, max_length=50)),
                ("subject", models.CharField(blank=True, max_length=500)),
                ("payload", models.JSONField()),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                (
                    "run",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT, to="automation.run"
                    ),
                ),
            ],
        ),
        migrations.AddIndex(
            model_name="task",
            index=models.Index(fields=["effect", "created_at"], name="task_effect_created_idx"),
        ),
        migrations.RunPython(copy_records, migrations.RunPython.noop),
        migrations.DeleteModel(name="AccountReview"),
        migrations.DeleteModel(name="FollowUp"),
        migrations.DeleteModel(name="InternalNotification"),
    ]
