"""Each intake record's SHA-256, so a folder read again knows which files it took in."""

import hashlib
from typing import Any

from django.db import migrations, models


def digest_existing(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            "UPDATE automation_intakerecord SET raw_sha256 = encode(sha256(raw), 'hex')"
        )
        return
    record = apps.get_model("automation", "IntakeRecord")
    for pk, raw in record.objects.values_list("pk", "raw").iterator():
        digest = hashlib.sha256(bytes(raw)).hexdigest()
        record.objects.filter(pk=pk).update(raw_sha256=digest)


class Migration(migrations.Migration):
    dependencies = [
        ("automation", "0025_batch_preview"),
    ]

    operations = [
        migrations.AddField(
            model_name="intakerecord",
            name="raw_sha256",
            field=models.CharField(blank=True, editable=False, max_length=64),
        ),
        migrations.RunPython(digest_existing, migrations.RunPython.noop),
        migrations.AddIndex(
            model_name="intakerecord",
            index=models.Index(fields=["raw_sha256"], name="intake_raw_sha256_idx"),
        ),
    ]
