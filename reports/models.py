"""Reports read the run records; this app owns only the permission to see them."""

from __future__ import annotations

from django.db import models


class ReportAccess(models.Model):
    """No table: the anchor of the `reports.view_reports` permission."""

    class Meta:
        managed = False
        default_permissions = ()
        permissions = [("view_reports", "Can view the reports dashboard and the metrics")]

    def __str__(self) -> str:
        return "reports access"


class RunCounts(models.Model):
    """How many runs stand in each (route, state, outcome) and whether a person had a hand in
    them: what a run rollup row holds for its hour or day."""

    route = models.CharField(max_length=50, blank=True)
    state = models.CharField(max_length=40)
    outcome = models.CharField(max_length=40, blank=True)
    # An approval request, a touching recovery action or a person's move on the audit trail.
    touched = models.BooleanField()
    asked_approval = models.BooleanField()
    # The reader stamped on the runs (their channel's classifier version when received).
    classifier_version = models.CharField(max_length=100, blank=True, default="")
    runs = models.PositiveIntegerField()
    # What the runs' classifier calls cost: the sums of Run.prompt_tokens, completion_tokens
    # and model_cost.
    prompt_tokens = models.BigIntegerField(default=0)
    completion_tokens = models.BigIntegerField(default=0)
    cost = models.DecimalField(max_digits=20, decimal_places=8, default=0)

    KIND = ("route", "state", "outcome", "touched", "asked_approval", "classifier_version")

    class Meta:
        abstract = True
        default_permissions = ()


class RunHour(RunCounts):
    """The runs received in one hour, by kind: the rows the dashboard and /metrics sum instead
    of the runs.

    Written only by `reports.rollups` (rebuilt from the runs, never edited by hand).
    """

    hour = models.DateTimeField()

    class Meta(RunCounts.Meta):
        constraints = [
            models.UniqueConstraint(fields=["hour", *RunCounts.KIND], name="run_hour_unique")
        ]
        # The panels: WHERE hour >= ... AND hour < ... (served by the unique index's prefix).

    def __str__(self) -> str:
        return f"{self.hour:%Y-%m-%d %H}:00 {self.route or '-'} {self.state}: {self.runs}"


class RunDay(RunCounts):
    """The runs received in one UTC day, by kind: the sums of the day's `RunHour` rows, kept
    by the same job. The panels read whole days here and only the hours at a period's edges
    from `RunHour` (twelve weeks are 84 day rows of each kind where they were 2,016 hours)."""

    day = models.DateTimeField()

    class Meta(RunCounts.Meta):
        constraints = [
            models.UniqueConstraint(fields=["day", *RunCounts.KIND], name="run_day_unique")
        ]

    def __str__(self) -> str:
        return f"{self.day:%Y-%m-%d} {self.route or '-'} {self.state}: {self.runs}"


class RollupMark(models.Model):
    """How far the rollups have read each table that can change a run's figures (by id).

    One row. A row with an id above a mark may not be folded in yet: the readers recompute
    the hours of the runs it concerns from the raw rows, so the figures are never stale.
    """

    run_id = models.BigIntegerField(default=0)
    audit_id = models.BigIntegerField(default=0)
    approval_id = models.BigIntegerField(default=0)
    recovery_id = models.BigIntegerField(default=0)
    attempt_id = models.BigIntegerField(default=0)
    # The histograms' marks: null until they are first built (everything is then read raw).
    stage_id = models.BigIntegerField(null=True, blank=True)
    decision_id = models.BigIntegerField(null=True, blank=True)
    built_at = models.DateTimeField()

    class Meta:
        default_permissions = ()

    def __str__(self) -> str:
        return f"rollups as of {self.built_at:%Y-%m-%d %H:%M}"


class DeliveryTotal(models.Model):
    """Effect delivery attempts by result, up to `RollupMark.attempt_id` (attempt rows are
    written once with their result and never change, so a running total is exact)."""

    outcome = models.CharField(max_length=20, unique=True)
    attempts = models.PositiveBigIntegerField()

    class Meta:
        default_permissions = ()

    def __str__(self) -> str:
        return f"{self.outcome}: {self.attempts}"


class RunTotal(models.Model):
    """Runs of all time by state and outcome: the sum of the `RunHour` rows, kept with them
    by the same job so that /metrics reads a few dozen rows, not every hour of the history."""

    state = models.CharField(max_length=40)
    outcome = models.CharField(max_length=40, blank=True)
    runs = models.BigIntegerField()
    prompt_tokens = models.BigIntegerField(default=0)
    completion_tokens = models.BigIntegerField(default=0)
    cost = models.DecimalField(max_digits=20, decimal_places=8, default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["state", "outcome"], name="run_total_unique")
        ]
        default_permissions = ()

    def __str__(self) -> str:
        return f"{self.state} {self.outcome or '-'}: {self.runs}"


# --- histograms: stage durations and hand-offs, approval waits --------------------------------
#
# Written only by `reports.histograms` (rebuilt from the raw rows, never edited by hand). Each
# row counts the rows of one kind whose value rounds down to `bucket` (three significant
# digits, so a bucket is within 1% of every value in it). Hour rows answer the edges of a
# period, day rows (the sums of their hours) its other whole days, and week rows (the sums of
# their days, an ISO week from Monday 00:00 UTC) the whole weeks in between: a month's
# durations are about 9,000 week rows where they were 70,000 day rows.


class StageRollup(models.Model):
    """Stage attempts that started in one hour, day or week, by stage, outcome and duration."""

    start = models.DateTimeField()
    stage = models.CharField(max_length=40)
    outcome = models.CharField(max_length=40)
    bucket = models.PositiveIntegerField(help_text="duration in ms, to three digits")
    total = models.PositiveIntegerField(help_text="attempts")

    class Meta:
        abstract = True
        constraints = [
            models.UniqueConstraint(
                fields=["start", "stage", "outcome", "bucket"], name="%(class)s_unique"
            )
        ]
        default_permissions = ()

    def __str__(self) -> str:
        kind = f"{self.stage} {self.outcome}"
        return f"{self.start:%Y-%m-%d %H}:00 {kind} ~{self.bucket} ms: {self.total}"


class StageHour(StageRollup):
    class Meta(StageRollup.Meta):
        pass


class StageDay(StageRollup):
    class Meta(StageRollup.Meta):
        pass


class StageWeek(StageRollup):
    class Meta(StageRollup.Meta):
        pass


class WaitRollup(models.Model):
    """Approval requests a person decided in one hour, day or week, by group and time waited."""

    start = models.DateTimeField()
    group = models.CharField(max_length=100)
    bucket = models.PositiveIntegerField(help_text="seconds waited, to three digits")
    total = models.PositiveIntegerField(help_text="requests decided")

    class Meta:
        abstract = True
        constraints = [
            models.UniqueConstraint(fields=["start", "group", "bucket"], name="%(class)s_unique")
        ]
        default_permissions = ()

    def __str__(self) -> str:
        return f"{self.start:%Y-%m-%d %H}:00 {self.group} ~{self.bucket} s: {self.total}"


class WaitHour(WaitRollup):
    class Meta(WaitRollup.Meta):
        pass


class WaitDay(WaitRollup):
    class Meta(WaitRollup.Meta):
        pass


class WaitWeek(WaitRollup):
    class Meta(WaitRollup.Meta):
        pass
