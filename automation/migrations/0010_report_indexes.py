# Indexes behind the reports dashboard (reports/selectors.py).

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("automation", "0009_mail_intake"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="run",
            index=models.Index(fields=["created_at"], name="run_created_idx"),
        ),
        migrations.AddIndex(
            model_name="stagerecord",
            index=models.Index(fields=["started_at"], name="stage_started_idx"),
        ),
    ]
