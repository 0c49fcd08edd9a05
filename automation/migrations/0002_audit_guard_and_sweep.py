"""Refuse UPDATE/DELETE on audit rows in PostgreSQL, and schedule the worker sweep."""

from django.db import migrations

AUDIT_GUARD = """
CREATE OR REPLACE FUNCTION gatehouse_audit_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION USING MESSAGE = 'automation_auditevent is append-only: ' || TG_OP || ' refused';
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER automation_auditevent_append_only
    BEFORE UPDATE OR DELETE ON automation_auditevent
    FOR EACH ROW EXECUTE FUNCTION gatehouse_audit_append_only();
"""
DROP_GUARD = """
DROP TRIGGER IF EXISTS automation_auditevent_append_only ON automation_auditevent;
DROP FUNCTION IF EXISTS gatehouse_audit_append_only();
"""


def add_guard(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(AUDIT_GUARD)


def drop_guard(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP_GUARD)


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
        migrations.RunPython(add_guard, drop_guard),
        migrations.RunPython(add_sweep, drop_sweep),
    ]
