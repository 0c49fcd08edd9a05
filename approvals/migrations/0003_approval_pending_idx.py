# The inbox's keyset pages walk pending requests in (created_at, id) order.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('approvals', '0002_decided_index'),
    ]

    operations = [
        migrations.AddIndex(
            model_name='approvalrequest',
            index=models.Index(condition=models.Q(('status', 'pending')), fields=['created_at', 'id'], name='approval_pending_idx'),
        ),
    ]
