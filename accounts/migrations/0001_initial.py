# Team (from automation) and CompanyIdentity (from console) move to accounts: their tables stay
# as they are (db_table keeps each one's name); only Django's record of which app holds them
# changes. automation 0049 and console 0002 take them out of their old apps' state.

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('auth', '0012_alter_user_first_name_max_length'),
        ('automation', '0048_classifier_statuses_through_transitions'),
        ('console', '0001_company_identity'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
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
                migrations.CreateModel(
                    name='CompanyIdentity',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('issuer', models.CharField(max_length=255)),
                        ('subject', models.CharField(max_length=255)),
                        ('created_at', models.DateTimeField()),
                        ('user', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, related_name='company_identity', to=settings.AUTH_USER_MODEL)),
                    ],
                    options={
                        'db_table': 'console_companyidentity',
                        'verbose_name_plural': 'company identities',
                        'constraints': [models.UniqueConstraint(fields=('issuer', 'subject'), name='company_identity_one_account')],
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
