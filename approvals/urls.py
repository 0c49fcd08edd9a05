from __future__ import annotations

from django.urls import path

from approvals import views

app_name = "approvals"
urlpatterns = [
    path("", views.inbox, name="inbox"),
    path("<int:request_id>/", views.evidence, name="evidence"),
    path("<int:request_id>/decide", views.decide, name="decide"),
    path("<int:request_id>/raw", views.raw_input, name="raw"),
]
