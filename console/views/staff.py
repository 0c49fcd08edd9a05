"""Who works on runs, as the pages of the home, queues and runs sections all ask it: the
permission that lets a person read runs, and the people a queued run can be given to (on a
queue's page and on the run's own page)."""

from __future__ import annotations

from django.contrib.auth.models import User

VIEW_RUNS = "automation.view_run"


def assignees() -> list[User]:
    """Who a queue item can be given to."""
    return list(
        User.objects.filter(is_active=True, groups__name__in=["ops-leads", "recovery-staff"])
        .distinct()
        .order_by("username")[:200]
    )
