from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

from console.urls import approval_urls, ops_urls, report_urls
from reports.metrics import metrics_view

admin.site.site_header = "Gatehouse"
admin.site.site_title = "Gatehouse"
admin.site.index_title = "Runs, approvals and policy"

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("approvals/", include(approval_urls)),
    path("demo/", include("receiver.urls")),
    path("api/v1/", include("automation.api_urls")),
    path("reports/", include(report_urls)),
    path("metrics", metrics_view, name="metrics"),
    path("", include(ops_urls)),
]
