"""A simulation keeps the version active when it started: its impact is measured against it."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('automation', '0027_partial_link_indexes'),
    ]

    operations = [
        migrations.AddField(
            model_name='simulation',
            name='baseline_version',
            field=models.CharField(blank=True, max_length=100),
        ),
    ]
