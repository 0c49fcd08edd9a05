# The content types of Team and CompanyIdentity follow them to accounts: their permissions
# (manage_teams above all) hang on the content type, so every group and person holding one
# keeps it, now as accounts.<codename>.
#
# A database migrated before this has the old app's row. If the new app's row exists too
# (made by a `migrate` run that reached accounts 0001 and stopped, or by tests), the old
# row's permissions are merged into the new row's and the old row goes.

from django.db import migrations

MOVED = {'team': 'automation', 'companyidentity': 'console'}


def _move(apps, schema_editor, *, backwards):
    ContentType = apps.get_model('contenttypes', 'ContentType')
    Permission = apps.get_model('auth', 'Permission')
    db = schema_editor.connection.alias
    for model, old_app in MOVED.items():
        source, target = ('accounts', old_app) if backwards else (old_app, 'accounts')
        old = ContentType.objects.using(db).filter(app_label=source, model=model).first()
        if old is None:
            continue
        new = ContentType.objects.using(db).filter(app_label=target, model=model).first()
        if new is None:
            old.app_label = target
            old.save(update_fields=['app_label'])
            continue
        for permission in Permission.objects.using(db).filter(content_type=old):
            kept = Permission.objects.using(db).filter(
                content_type=new, codename=permission.codename
            ).first()
            if kept is None:
                permission.content_type = new
                permission.save(update_fields=['content_type'])
                continue
            kept.group_set.add(*permission.group_set.all())
            kept.user_set.add(*permission.user_set.all())
            permission.delete()
        old.delete()


def forwards(apps, schema_editor):
    _move(apps, schema_editor, backwards=False)


def backwards(apps, schema_editor):
    _move(apps, schema_editor, backwards=True)


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0001_initial'),
        ('automation', '0049_team_moved_to_accounts'),
        ('console', '0002_company_identity_moved_to_accounts'),
        ('contenttypes', '0002_remove_content_type_name'),
        ('auth', '0012_alter_user_first_name_max_length'),
    ]

    operations = [migrations.RunPython(forwards, backwards)]
