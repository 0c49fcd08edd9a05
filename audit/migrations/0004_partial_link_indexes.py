"""Links most rows do not have (a replay, a mail reply, an owner; an approval, an actor) are
indexed only where they are set: a new run or audit row, and each update of a run, write
fewer index entries. Every lookup by such a link still has its index."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('approvals', '0003_approval_pending_idx'),
        ('audit', '0003_hand_action_index'),
        ('automation', '0027_partial_link_indexes'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterField(
            model_name='auditevent',
            name='actor',
            field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.PROTECT, to=settings.AUTH_USER_MODEL),
        ),
        migrations.AlterField(
            model_name='auditevent',
            name='approval',
            field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='audit_events', to='approvals.approvalrequest'),
        ),
        migrations.AddIndex(
            model_name='auditevent',
            index=models.Index(condition=models.Q(('approval__isnull', False)), fields=['approval'], name='audit_approval_idx'),
        ),
        migrations.AddIndex(
            model_name='auditevent',
            index=models.Index(condition=models.Q(('actor__isnull', False)), fields=['actor'], name='audit_actor_idx'),
        ),
    ]
