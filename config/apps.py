"""The admin app, with Gatehouse's admin site as the default one (config.admin_site)."""

from __future__ import annotations

from typing import Any, cast

from django.contrib.admin.apps import AdminConfig


class GatehouseAdminConfig(AdminConfig):
    default_site = "config.admin_site.GatehouseAdminSite"

    def ready(self) -> None:
        super().ready()  # every app's admin is registered by now
        _login_attempts_without_cleanup_action()
        _admin_dates_bounded()


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


def _admin_dates_bounded() -> None:
    """Every date and time typed into the admin, ours and the libraries' (a django-q
    schedule's next run), lies between core.inputs' bounds, as in the console: the admin's
    own fields take any year a datetime holds."""
    from django.apps import apps
    from django.contrib import admin
    from django.db import models

    from core.inputs import BoundedDateField, BoundedSplitDateTimeField

    bounded: dict[type[models.Field[Any, Any]], dict[str, Any]] = {
        models.DateTimeField: {"form_class": BoundedSplitDateTimeField},
        models.DateField: {"form_class": BoundedDateField},
    }
    for model in apps.get_models():
        if not admin.site.is_registered(model):
            continue
        # ModelAdmin.__init__ gives each admin its own deep copy of the admin's field
        # defaults (with its widgets): changing it changes that admin's forms only.
        overrides = cast(
            "dict[type[models.Field[Any, Any]], dict[str, Any]]",
            admin.site.get_model_admin(model).formfield_overrides,
        )
        for field, options in bounded.items():
            overrides.setdefault(field, {}).update(options)
