"""Every retry of a held effect now leaves a RecoveryAction. Before, one started from the
admin page or the `effects retry-held` command left only its audit row (`run.retry_effect`),
and the reports looked for that row as well. This writes the missing RecoveryActions for
those older retries, dated as their audit rows, so the reports read RecoveryAction alone
and count every run as before."""

from django.db import migrations

# RecoveryKind values that mean a person had a hand in the run (reports.rollups).
TOUCHING = ("correct", "retry", "resume", "replay", "resolve", "abandon")
MARK = "from_audit_event"


def backfill(apps, schema_editor):
    AuditEvent = apps.get_model("audit", "AuditEvent")
    RecoveryAction = apps.get_model("automation", "RecoveryAction")
    touched = RecoveryAction.objects.filter(action__in=TOUCHING).values("run_id")
    retries = (
        AuditEvent.objects.filter(
            action="run.retry_effect", actor__isnull=False, run__isnull=False
        )
        .exclude(run_id__in=touched)
        .order_by("pk")
    )
    for event in retries.iterator():
        action = RecoveryAction.objects.create(
            run_id=event.run_id,
            action="retry",
            actor_id=event.actor_id,
            reason=(event.data or {}).get("reason", ""),
            result=event.to_state,
            data={"held_for": event.from_state, MARK: event.pk},
        )
        # auto_now_add dated it now: it happened when its audit row was written.
        RecoveryAction.objects.filter(pk=action.pk).update(created_at=event.created_at)


def remove(apps, schema_editor):
    RecoveryAction = apps.get_model("automation", "RecoveryAction")
    RecoveryAction.objects.filter(data__has_key=MARK).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("automation", "0020_run_signals_reviewed"),
        ("audit", "0003_hand_action_index"),
    ]

    operations = [migrations.RunPython(backfill, remove)]
