"""The broker's table: an index for taking each queue's oldest messages, and a wake-up.

django-q2's ORM broker table has no index but its primary key; the workers take messages
with WHERE key = %s AND lock < now ORDER BY id (worker.broker), which this index serves.
On PostgreSQL a statement trigger notifies `gatehouse_q` when messages are written: the
notification is delivered when the writing transaction commits, and wakes idle workers.
"""

from django.db import migrations

CREATE = [
    "CREATE INDEX IF NOT EXISTS gatehouse_ormq_key_id ON django_q_ormq (key, id)",
    """
    CREATE OR REPLACE FUNCTION gatehouse_q_notify() RETURNS trigger AS $$
    BEGIN
        PERFORM pg_notify('gatehouse_q', '');
        RETURN NULL;
    END;
    $$ LANGUAGE plpgsql
    """,
    "DROP TRIGGER IF EXISTS gatehouse_q_notify ON django_q_ormq",
    """
    CREATE TRIGGER gatehouse_q_notify AFTER INSERT ON django_q_ormq
    FOR EACH STATEMENT EXECUTE FUNCTION gatehouse_q_notify()
    """,
]
DROP = [
    "DROP TRIGGER IF EXISTS gatehouse_q_notify ON django_q_ormq",
    "DROP FUNCTION IF EXISTS gatehouse_q_notify()",
    "DROP INDEX IF EXISTS gatehouse_ormq_key_id",
]


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for statement in CREATE:
            schema_editor.execute(statement)
    else:
        schema_editor.execute(
            "CREATE INDEX IF NOT EXISTS gatehouse_ormq_key_id ON django_q_ormq (key, id)"
        )


def drop(apps, schema_editor):
    statements = DROP if schema_editor.connection.vendor == "postgresql" else DROP[-1:]
    for statement in statements:
        schema_editor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [
        ("automation", "0011_dispatch_marks"),
        ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more"),
    ]

    operations = [migrations.RunPython(create, drop)]
