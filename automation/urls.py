from __future__ import annotations

from django.urls import path

from automation import policy_views, views

app_name = "automation"
urlpatterns = [
    path("", views.home, name="home"),
    path("ops/queues/", views.queues, name="queues"),
    path("ops/effects/<slug:name>/<slug:action>", views.effect_control, name="effect_control"),
    path("ops/queues/<slug:name>/", views.queue, name="queue"),
    path("ops/queues/<slug:queue_name>/batch", views.batch_new, name="batch_new"),
    path("ops/batches/<int:batch_id>/", views.batch, name="batch"),
    path("policy/", policy_views.policy_list, name="policies"),
    path("policy/new", policy_views.policy_new, name="policy_new"),
    path("policy/simulations/<int:simulation_id>/", policy_views.simulation, name="simulation"),
    path("policy/<str:name>/", policy_views.policy_detail, name="policy"),
    path("policy/<str:name>/simulate", policy_views.policy_simulate, name="policy_simulate"),
    path("policy/<str:name>/activate", policy_views.policy_activate, name="policy_activate"),
    path("runs/<int:run_id>/", views.run_page, name="run"),
    path("runs/<int:run_id>/raw", views.raw_input, name="raw"),
    path("runs/<int:run_id>/correct", views.correct, name="correct"),
    path("runs/<int:run_id>/queue/<slug:action>", views.queue_action, name="queue_action"),
    path("runs/<int:run_id>/recover/<slug:action>", views.recover, name="recover"),
]
