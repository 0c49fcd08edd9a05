"""The admin app, with Gatehouse's admin site as the default one (config.admin_site)."""

from __future__ import annotations

from django.contrib.admin.apps import AdminConfig


class GatehouseAdminConfig(AdminConfig):
    default_site = "config.admin_site.GatehouseAdminSite"

    def ready(self) -> None:
        super().ready()  # every app's admin is registered by now
        _login_attempts_without_cleanup_action()


def _login_attempts_without_cleanup_action() -> None:
    """django-axes' "clean up expired attempts" action answers 500 from the admin: it reads
    a request attribute only its login hooks set. Expired attempts stop counting by
    themselves; an account is unlocked early by deleting its attempts (or `axes_reset`)."""
    from axes.admin import AccessAttemptAdmin
    from axes.models import AccessAttempt
    from django.contrib import admin

    class LoginAttemptAdmin(AccessAttemptAdmin):
        actions: list[str] = []  # the site's own delete_selected stays

    admin.site.unregister(AccessAttempt)
    admin.site.register(AccessAttempt, LoginAttemptAdmin)
