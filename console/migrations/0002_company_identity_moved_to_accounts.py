# CompanyIdentity now belongs to accounts (accounts 0001): out of the console's state only,
# its table (console_companyidentity) and its rows stay.

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0001_initial'),
        ('console', '0001_company_identity'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name='CompanyIdentity')],
            database_operations=[],
        ),
    ]
