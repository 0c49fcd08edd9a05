from __future__ import annotations

from django.apps import apps
from django.contrib import admin
from django.urls import include, path, re_path

from accounts.oidc import CallbackView, SignInView
from automation import api
from console.urls import (
    about_urls,
    approval_urls,
    customer_urls,
    home_urls,
    integrator_urls,
    me_urls,
    policy_urls,
    quality_urls,
    queue_urls,
    report_urls,
    run_urls,
    setup_urls,
    task_urls,
    team_urls,
)
from reports.metrics import metrics_view

admin.site.site_header = "Gatehouse"
admin.site.site_title = "Gatehouse"
admin.site.index_title = "Runs, approvals and policy"

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    # Company sign-in (OpenID Connect): 404 unless configured. The names are the ones
    # mozilla-django-oidc reverses.
    path("oidc/authenticate/", SignInView.as_view(), name="oidc_authentication_init"),
    path("oidc/callback/", CallbackView.as_view(), name="oidc_authentication_callback"),
    path("approvals/", include(approval_urls)),
    path("api/v1/", include("automation.api_urls")),
    # The API's own 404 (JSON) for any other address under /api/, never a console page.
    re_path(r"^api/", api.not_found, name="api_not_found"),
    path("reports/", include(report_urls)),
    path("qa/", include(quality_urls)),
    path("metrics", metrics_view, name="metrics"),
    path("ops/", include(queue_urls)),
    path("runs/", include(run_urls)),
    path("policy/", include(policy_urls)),
    path("integrators/", include(integrator_urls)),
    path("about/", include(about_urls)),
    path("me/", include(me_urls)),
    path("setup/", include(setup_urls)),
    path("tasks/", include(task_urls)),
    path("customers/", include(customer_urls)),
    path("", include(team_urls)),
    path("", include(home_urls)),
]

# The demo receiver exists only where the development tools are installed (the demo and the
# tests, config.dev_settings); it is named by its dotted path so the product never imports it.
if apps.is_installed("devtools.receiver"):
    urlpatterns.append(path("demo/", include("devtools.receiver.urls")))
