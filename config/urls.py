from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

from config.auth_views import ThrottledAdminAuthenticationForm, ThrottledLoginView
from reports.metrics import metrics_view

admin.site.site_header = "Gatehouse"
admin.site.site_title = "Gatehouse"
admin.site.index_title = "Runs, approvals and policy"
admin.site.login_form = ThrottledAdminAuthenticationForm

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/login/", ThrottledLoginView.as_view(), name="login"),
    path("accounts/", include("django.contrib.auth.urls")),
    path("approvals/", include("approvals.urls")),
    path("demo/", include("receiver.urls")),
    path("api/v1/", include("automation.api_urls")),
    path("reports/", include("reports.urls")),
    path("metrics", metrics_view, name="metrics"),
    path("", include("automation.urls")),
]
