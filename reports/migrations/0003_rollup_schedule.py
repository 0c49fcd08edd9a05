"""Schedule the job that folds new and changed runs into the report rollups, every minute."""

from django.db import migrations


def add_schedule(apps, schema_editor):
    Schedule = apps.get_model("django_q", "Schedule")
    Schedule.objects.update_or_create(
        name="gatehouse-rollups",
        defaults={"func": "reports.tasks.refresh_rollups", "schedule_type": "I", "minutes": 1,
                  "repeats": -1},
    )


def drop_schedule(apps, schema_editor):
    apps.get_model("django_q", "Schedule").objects.filter(name="gatehouse-rollups").delete()


class Migration(migrations.Migration):
    dependencies = [
        ("reports", "0002_run_hour_rollups"),
        ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more"),
    ]

    operations = [
        migrations.RunPython(add_schedule, drop_schedule),
    ]
