from __future__ import annotations

from django.urls import path

from devtools.receiver import views

app_name = "receiver"
urlpatterns = [path("receiver/<slug:effect>", views.receive, name="receive")]
