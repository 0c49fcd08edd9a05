"""Retire gatehouse_receive_event: an accepted event is written by the ORM alone.

The function (migration 0030) wrote an accepted API event's five rows beside the ORM's way;
intake no longer calls it. Reversed, it is created again as 0030 made it, so a rollback to
code that calls it finds it.
"""

from importlib import import_module

from django.db import migrations

RECEIVE = import_module("automation.migrations.0030_receive_event_function")


class Migration(migrations.Migration):
    dependencies = [
        ("automation", "0043_labelled_sets_and_evaluations"),
    ]

    operations = [migrations.RunSQL(RECEIVE.DROP, RECEIVE.CREATE)]
