"""The console's addresses, one URL namespace for each section of the console.

Each section is an (urlpatterns, namespace) pair that config.urls mounts at its prefix;
the home page (`home`) has no namespace. The paths are the ones the pages have always had:
integrators and people's saved links depend on them, so a section's name can change but
its paths do not.

    home                  /                              the role's start page
    queues:*              /ops/                          the queues, a queue, batches, effects
    runs:*                /runs/                         a run and what is done to it
    policy:*              /policy/                       policy versions and simulations
    approvals:*           /approvals/                    the inbox and a request's evidence
    quality:*             /qa/                           QA, classifiers in shadow, labelled sets
    reports:*             /reports/                      the dashboard and its CSV files
    integrators:*         /integrators/                  the API reference
    about:*               /about/                        the run states explained
    me:*                  /me/                           the signed-in person's own settings
    setup:*               /setup/                        what the install lacks; intake channels
    tasks:*               /tasks/                        a team's tasks (record effects)
    teams:*               /teams/, /people/              teams, their roles and people
    customers:*           /customers/                    the customer list, a customer, a file
"""

from __future__ import annotations

from django.urls import path

from console.views import (
    about,
    approvals,
    business,
    customers,
    home,
    integrators,
    lists,
    me,
    policy,
    quality,
    queues,
    reading,
    reports,
    runs,
    setup,
    tasks,
    teams,
)

home_urls = [path("", home.home, name="home")]

queue_urls = (
    [
        path("queues/", queues.queues, name="list"),
        path("effects/<slug:name>/<slug:action>", queues.effect_control, name="effect_control"),
        path("queues/<slug:name>/", queues.queue, name="queue"),
        path("queues/<slug:name>/claim", lists.claim_many, name="claim_many"),
        path("queues/<slug:queue_name>/batch", queues.batch_new, name="batch_new"),
        path("batches/<int:batch_id>/", queues.batch, name="batch"),
        path("batches/<int:batch_id>/start", queues.batch_start, name="batch_start"),
    ],
    "queues",
)

run_urls = (
    [
        path("<int:run_id>/", runs.run_page, name="run"),
        path("<int:run_id>/comments", runs.comment, name="comment"),
        path("<int:run_id>/raw", runs.raw_input, name="raw"),
        path("<int:run_id>/raw/download", runs.raw_download, name="raw_download"),
        path("<int:run_id>/correct", runs.correct, name="correct"),
        path("<int:run_id>/queue/<slug:action>", runs.queue_action, name="queue_action"),
        path("<int:run_id>/recover/<slug:action>", runs.recover, name="recover"),
        path("<int:run_id>/preview/<slug:action>", runs.preview, name="preview"),
    ],
    "runs",
)

policy_urls = (
    [
        path("", policy.policy_list, name="list"),
        path("new", policy.policy_new, name="new"),
        path("business", business.business_edit, name="business"),
        path("business/start", business.business_start, name="business_start"),
        path("simulations/<int:simulation_id>/", policy.simulation, name="simulation"),
        path("<str:name>/", policy.policy_detail, name="detail"),
        path("<str:name>/simulate", policy.policy_simulate, name="simulate"),
        path("<str:name>/activate", policy.policy_activate, name="activate"),
    ],
    "policy",
)

approval_urls = (
    [
        path("", approvals.inbox, name="inbox"),
        path("<int:request_id>/", approvals.evidence, name="evidence"),
        path("decide", approvals.bulk, name="bulk"),
        path("<int:request_id>/decide", approvals.decide, name="decide"),
        path("<int:request_id>/raw", approvals.raw_input, name="raw"),
        path("<int:request_id>/raw/download", approvals.raw_download, name="raw_download"),
        # claim, assign, release: after the fixed names above, which it would otherwise take
        path("<int:request_id>/<slug:action>", approvals.hand, name="hand"),
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
        path("reading/", reading.labelled_sets, name="reading"),
        path("reading/upload", reading.upload, name="reading_upload"),
        path("reading/train", reading.train, name="reading_train"),
        path("reading/trainings/<int:training_id>/", reading.training, name="reading_training"),
        path("reading/<int:set_id>/", reading.labelled_set, name="reading_set"),
        path("reading/<int:set_id>/remove", reading.remove, name="reading_remove"),
        path("reading/<int:set_id>/evaluate", reading.evaluate, name="reading_evaluate"),
        path(
            "reading/evaluations/<int:evaluation_id>/",
            reading.evaluation,
            name="reading_evaluation",
        ),
    ],
    "quality",
)

report_urls = (
    [
        path("", reports.dashboard, name="dashboard"),
        path("<slug:panel>.csv", reports.panel_csv, name="csv"),
    ],
    "reports",
)

integrator_urls = (
    [path("api/", integrators.api_reference, name="api_reference")],
    "integrators",
)

about_urls = (
    [path("states/", about.run_states, name="run_states")],
    "about",
)

me_urls = (
    [
        path("work/", me.my_work, name="work"),
        path("decided/", me.decided_by_me, name="decided"),
        path("notifications/", me.notification_settings, name="notifications"),
        path("notifications/list/", me.notification_list, name="notification_list"),
        path("notifications/read", me.notification_read, name="notification_read"),
        path("team-queue/", me.team_queue, name="team_queue"),
        path("delegation/", me.delegation, name="delegation"),
    ],
    "me",
)

setup_urls = (
    [
        path("", setup.checklist, name="checklist"),
        path("channels/", setup.channels, name="channels"),
        path("channels/new", setup.channel_new, name="channel_new"),
        path("channels/<slug:name>/", setup.channel_edit, name="channel_edit"),
        path("channels/<slug:name>/mailbox", setup.mailbox, name="mailbox"),
        path("channels/<slug:name>/tokens/new", setup.token_new, name="token_new"),
        path(
            "channels/<slug:name>/tokens/<int:token_id>/revoke",
            setup.token_revoke,
            name="token_revoke",
        ),
    ],
    "setup",
)

task_urls = (
    [
        path("", tasks.task_list, name="list"),
        path("<int:task_id>/", tasks.task_page, name="task"),
        path("<int:task_id>/comments", tasks.task_comment, name="comment"),
        # claim, release, done: after the fixed name above, which it would otherwise take
        path("<int:task_id>/<slug:action>", tasks.task_action, name="action"),
    ],
    "tasks",
)

# Mounted at the root: the teams under /teams/, the people under /people/ (so no team's name
# can take a people page's address).
team_urls = (
    [
        path("teams/", teams.team_list, name="list"),
        path("teams/new", teams.team_new, name="new"),
        path("teams/<str:name>/", teams.team_page, name="team"),
        path("teams/<str:name>/roles", teams.team_roles, name="roles"),
        path("teams/<str:name>/members", teams.team_member, name="members"),
        path("teams/<str:name>/sign-in-groups", teams.team_provider_groups, name="provider_groups"),
        path("people/", teams.people, name="people"),
        path("people/new", teams.person_new, name="person_new"),
        path("people/<int:user_id>/", teams.person_page, name="person"),
        path("people/<int:user_id>/deactivate", teams.person_deactivate_view, name="deactivate"),
    ],
    "teams",
)

customer_urls = (
    [
        path("", customers.customer_list, name="list"),
        path("new", customers.customer_new, name="new"),
        path("upload", customers.customer_upload, name="upload"),
        path("<int:customer_id>/", customers.customer_edit, name="edit"),
    ],
    "customers",
)
