"""The admin app, with Gatehouse's admin site as the default one (config.admin_site)."""

from __future__ import annotations

from django.contrib.admin.apps import AdminConfig


class GatehouseAdminConfig(AdminConfig):
    default_site = "config.admin_site.GatehouseAdminSite"
