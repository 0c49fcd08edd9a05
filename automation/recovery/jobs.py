"""What every progress job (a recovery batch, a policy simulation) does the same way."""

from __future__ import annotations

from django.utils import timezone

from automation.recovery.models import BatchStatus, ProgressJob


def job_settled(job: ProgressJob) -> bool:
    """Whether every run of the job is done; the first time it is, it is marked finished.

    The caller holds the job's row lock (a duplicated message finds it finished).
    """
    if job.done < job.total:
        return False
    if job.status != BatchStatus.FINISHED:
        job.finish(now=timezone.now())
        job.save(update_fields=["status", "finished_at"])
    return True
