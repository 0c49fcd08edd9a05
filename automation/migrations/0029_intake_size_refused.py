"""Each intake record's size, and whether it was refused for its size (then only its first
bytes are kept)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("automation", "0028_simulation_baseline"),
    ]

    operations = [
        migrations.AddField(
            model_name="intakerecord",
            name="size",
            field=models.PositiveBigIntegerField(editable=False, null=True),
        ),
        migrations.RunSQL(
            "UPDATE automation_intakerecord SET size = octet_length(raw)",
            migrations.RunSQL.noop,
        ),
        migrations.AlterField(
            model_name="intakerecord",
            name="size",
            field=models.PositiveBigIntegerField(editable=False),
        ),
        migrations.AddField(
            model_name="intakerecord",
            name="refused",
            field=models.BooleanField(default=False, editable=False),
        ),
    ]
