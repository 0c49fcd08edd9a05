"""Links most rows do not have (a replay, a mail reply, an owner; an approval, an actor) are
indexed only where they are set: a new run or audit row, and each update of a run, write
fewer index entries. Every lookup by such a link still has its index."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('automation', '0026_intake_raw_sha256'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterField(
            model_name='run',
            name='owner',
            field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, to=settings.AUTH_USER_MODEL),
        ),
        migrations.AlterField(
            model_name='run',
            name='replay_of',
            field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='replays', to='automation.run'),
        ),
        migrations.AlterField(
            model_name='run',
            name='reply_to_event_id',
            field=models.CharField(blank=True, max_length=200),
        ),
        migrations.AlterField(
            model_name='run',
            name='thread_parent',
            field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='thread_replies', to='automation.run'),
        ),
        migrations.AddIndex(
            model_name='run',
            index=models.Index(condition=models.Q(('replay_of__isnull', False)), fields=['replay_of'], name='run_replay_of_idx'),
        ),
        migrations.AddIndex(
            model_name='run',
            index=models.Index(condition=models.Q(('thread_parent__isnull', False)), fields=['thread_parent'], name='run_thread_parent_idx'),
        ),
        migrations.AddIndex(
            model_name='run',
            index=models.Index(condition=models.Q(('reply_to_event_id', ''), _negated=True), fields=['reply_to_event_id'], name='run_reply_to_idx'),
        ),
        migrations.AddIndex(
            model_name='run',
            index=models.Index(condition=models.Q(('owner__isnull', False)), fields=['owner'], name='run_owner_idx'),
        ),
    ]
