"""The scheduled job that folds new and changed runs into the report rollups."""

from __future__ import annotations

from reports.rollups import rollups_refresh


def refresh_rollups() -> int:
    return rollups_refresh()
