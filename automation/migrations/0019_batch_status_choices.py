"""A batch's status names its choices (BatchStatus): queued, running, finished. The stored
values are the ones written before; only the field's declaration changes."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("automation", "0018_effect_due_idx_covering"),
    ]

    operations = [
        migrations.AlterField(
            model_name="recoverybatch",
            name="status",
            field=models.CharField(
                choices=[("queued", "Queued"), ("running", "Running"), ("finished", "Finished")],
                default="queued",
                max_length=20,
            ),
        ),
        migrations.AlterField(
            model_name="simulation",
            name="status",
            field=models.CharField(
                choices=[("queued", "Queued"), ("running", "Running"), ("finished", "Finished")],
                default="queued",
                max_length=20,
            ),
        ),
    ]
