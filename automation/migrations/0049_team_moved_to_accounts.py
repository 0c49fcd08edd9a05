# Team now belongs to accounts (accounts 0001): out of automation's state only, its table
# (automation_team) and its rows stay.

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0001_initial'),
        ('automation', '0048_classifier_statuses_through_transitions'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name='Team')],
            database_operations=[],
        ),
    ]
