"""Schedule the worker sweep that nudges due retries and work whose message was lost."""

from django.db import migrations


def add_sweep(apps, schema_editor):
    Schedule = apps.get_model("django_q", "Schedule")
    Schedule.objects.update_or_create(
        name="gatehouse-sweep",
        defaults={"func": "automation.tasks.sweep", "schedule_type": "I", "minutes": 1,
                  "repeats": -1},
    )


def drop_sweep(apps, schema_editor):
    apps.get_model("django_q", "Schedule").objects.filter(name="gatehouse-sweep").delete()


class Migration(migrations.Migration):
    dependencies = [
        ("automation", "0001_initial"),
        ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more"),
    ]

    operations = [
        migrations.RunPython(add_sweep, drop_sweep),
    ]
