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
