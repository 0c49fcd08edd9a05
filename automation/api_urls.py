from __future__ import annotations

from django.urls import path

from automation import api

app_name = "api"
urlpatterns = [
    path("events", api.submit_event, name="events"),
    path("runs/<int:run_id>", api.run_detail, name="run"),
    path("openapi.json", api.openapi, name="openapi"),
]
