from __future__ import annotations

from django.urls import path

from automation import views

app_name = "automation"
urlpatterns = [
    path("", views.home, name="home"),
]
