"""The Django admin: pages people see, so they sit in the console with the other pages.

The domain apps keep their records and services and show none of them; every ModelAdmin
over their models is here, one module per app. Django's admin autodiscovery imports this
package, `console.admin`, and not its modules, so importing the four here registers every
ModelAdmin on the site (config.admin_site).
"""

from __future__ import annotations

from console.admin import approvals, audit, automation, policy

__all__ = ["approvals", "audit", "automation", "policy"]
