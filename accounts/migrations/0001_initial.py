# Team moves from automation to accounts: its table stays as it is (db_table keeps its name);
# only Django's record of which app holds it changes. automation 0044 takes it out of
# automation's state.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('auth', '0012_alter_user_first_name_max_length'),
        ('automation', '0043_labelled_sets_and_evaluations'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='Team',
                    fields=[
                        ('group', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, primary_key=True, related_name='team', serialize=False, to='auth.group')),
                        ('description', models.TextField(blank=True)),
                        ('roles', models.JSONField(blank=True, default=list)),
                        ('provider_groups', models.JSONField(blank=True, default=list)),
                    ],
                    options={
                        'db_table': 'automation_team',
                        'permissions': [('manage_teams', 'Make teams, give them roles and add people')],
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
