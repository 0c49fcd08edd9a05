"""The console's addresses, under the URL namespaces the templates and tests reverse.

Each group is an (urlpatterns, app_name) pair that config.urls mounts at its prefix: the
namespaces (`approvals`, `automation`, `reports`) and the paths are those of the pages
before they moved here from the domain apps.
"""

from __future__ import annotations

from django.urls import path

from console.views import about, approvals, integrators, lists, ops, policy, quality, reports

approval_urls = (
    [
        path("", approvals.inbox, name="inbox"),
        path("<int:request_id>/", approvals.evidence, name="evidence"),
        path("<int:request_id>/decide", approvals.decide, name="decide"),
        path("<int:request_id>/raw", approvals.raw_input, name="raw"),
        path("<int:request_id>/raw/download", approvals.raw_download, name="raw_download"),
    ],
    "approvals",
)

quality_urls = (
    [
        path("", quality.qa_queue, name="queue"),
        path("reconcile/", quality.reconcile_queue, name="reconcile_queue"),
        path("<int:review_id>/", quality.qa_review, name="review"),
        path("<int:review_id>/reconcile", quality.reconcile, name="reconcile"),
        path("channels/<slug:name>/", quality.channel_classifiers, name="channel"),
        path(
            "channels/<slug:name>/shadow/<slug:classifier>/",
            quality.shadow_comparison,
            name="comparison",
        ),
        path(
            "channels/<slug:name>/shadow/<slug:classifier>/promote",
            quality.promote,
            name="promote",
        ),
        path("promotions/<int:promotion_id>/rollback", quality.rollback, name="rollback"),
    ],
    "quality",
)

ops_urls = (
    [
        path("", ops.home, name="home"),
        path("ops/queues/", ops.queues, name="queues"),
        path("ops/effects/<slug:name>/<slug:action>", ops.effect_control, name="effect_control"),
        path("ops/queues/<slug:name>/", ops.queue, name="queue"),
        path("ops/queues/<slug:name>/claim", lists.claim_many, name="claim_many"),
        path("ops/queues/<slug:queue_name>/batch", ops.batch_new, name="batch_new"),
        path("ops/batches/<int:batch_id>/", ops.batch, name="batch"),
        path("ops/batches/<int:batch_id>/start", ops.batch_start, name="batch_start"),
        path("policy/", policy.policy_list, name="policies"),
        path("policy/new", policy.policy_new, name="policy_new"),
        path("policy/simulations/<int:simulation_id>/", policy.simulation, name="simulation"),
        path("policy/<str:name>/", policy.policy_detail, name="policy"),
        path("policy/<str:name>/simulate", policy.policy_simulate, name="policy_simulate"),
        path("policy/<str:name>/activate", policy.policy_activate, name="policy_activate"),
        path("runs/<int:run_id>/", ops.run_page, name="run"),
        path("integrators/api/", integrators.api_reference, name="api_reference"),
        path("runs/<int:run_id>/raw", ops.raw_input, name="raw"),
        path("runs/<int:run_id>/raw/download", ops.raw_download, name="raw_download"),
        path("runs/<int:run_id>/correct", ops.correct, name="correct"),
        path("runs/<int:run_id>/queue/<slug:action>", ops.queue_action, name="queue_action"),
        path("runs/<int:run_id>/recover/<slug:action>", ops.recover, name="recover"),
        path("runs/<int:run_id>/preview/<slug:action>", ops.preview, name="preview"),
        path("about/states/", about.run_states, name="run_states"),
    ],
    "automation",
)

report_urls = (
    [
        path("", reports.dashboard, name="dashboard"),
        path("<slug:panel>.csv", reports.panel_csv, name="csv"),
    ],
    "reports",
)
