"""The Django admin: pages people see, so they sit in the console with the other pages.

The domain apps keep their records and services and show none of them; every ModelAdmin
over their models is here, one module per app, and automation's one per concern (runs,
recovery, intake, effects, classifiers). Django's admin autodiscovery imports this package,
`console.admin`, and not its modules, so importing them here registers every ModelAdmin on
the site (config.admin_site).
"""

from __future__ import annotations

from console.admin import (
    approvals,
    audit,
    classifiers,
    effects,
    intake,
    policy,
    recovery,
    runs,
)

__all__ = [
    "approvals",
    "audit",
    "classifiers",
    "effects",
    "intake",
    "policy",
    "recovery",
    "runs",
]
