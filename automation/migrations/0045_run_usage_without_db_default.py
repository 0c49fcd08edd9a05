"""The usage and waiting columns of a run lose their database defaults: only the retired
receive function (0030, dropped by 0044) wrote runs without naming them; the ORM writes
every column of a run it saves (the field defaults stay)."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('automation', '0044_drop_receive_event_function'),
    ]

    operations = [
        migrations.AlterField(
            model_name='run',
            name='completion_tokens',
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AlterField(
            model_name='run',
            name='model_cost',
            field=models.DecimalField(decimal_places=8, default=0, max_digits=14),
        ),
        migrations.AlterField(
            model_name='run',
            name='prompt_tokens',
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AlterField(
            model_name='run',
            name='waiting_for',
            field=models.CharField(blank=True, default='', max_length=20),
        ),
    ]
