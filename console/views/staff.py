"""Who works on runs, as the pages of the home, queues and runs sections all ask it: the
permission that lets a person read runs, and the people a queued run can be given to (on a
queue's page and on the run's own page)."""

from __future__ import annotations

from django.contrib.auth.models import User

VIEW_RUNS = "automation.view_run"


def assignees() -> list[User]:
    """Who a queue item can be given to: the people of every team whose roles work the
    queues (ops lead, recovery staff), whatever the team is called."""
    return list(
        User.objects.filter(
            is_active=True,
            groups__permissions__codename="work_queue",
            groups__permissions__content_type__app_label="automation",
        )
        .distinct()
        .order_by("username")[:200]
    )
