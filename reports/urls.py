from __future__ import annotations

from django.urls import path

from reports import views

app_name = "reports"
urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("<slug:panel>.csv", views.panel_csv, name="csv"),
]
