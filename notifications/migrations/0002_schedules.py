"""Schedule the notifications: found and sent every minute; the digests each morning."""

from datetime import datetime, time, timedelta

from django.db import migrations
from django.utils import timezone


def add_schedules(apps, schema_editor):
    Schedule = apps.get_model("django_q", "Schedule")
    Schedule.objects.update_or_create(
        name="gatehouse-notify",
        defaults={"func": "notifications.tasks.notify", "schedule_type": "I", "minutes": 1,
                  "repeats": -1},
    )
    tomorrow = timezone.localdate() + timedelta(days=1)
    morning = timezone.make_aware(datetime.combine(tomorrow, time(7, 0)))
    Schedule.objects.update_or_create(
        name="gatehouse-digest",
        defaults={"func": "notifications.tasks.digest", "schedule_type": "D", "repeats": -1,
                  "next_run": morning},
    )


def drop_schedules(apps, schema_editor):
    apps.get_model("django_q", "Schedule").objects.filter(
        name__in=["gatehouse-notify", "gatehouse-digest"]
    ).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("notifications", "0001_initial"),
        ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more"),
    ]

    operations = [
        migrations.RunPython(add_schedules, drop_schedules),
    ]
