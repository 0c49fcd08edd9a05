"""The console's URL names, one namespace per section, and the paths they have always had.

Integrators and people's saved links use the paths: a section's name may change, its paths
may not. Each row is a URL name with its arguments and the exact path it must give, and
that path must lead back to the same name.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import URLPattern, URLResolver, get_resolver, resolve, reverse

from console import urls as console_urls

PATHS: dict[str, tuple[dict[str, Any], str]] = {
    "home": ({}, "/"),
    # company sign-in (OpenID Connect): the callback is registered at the identity provider
    "oidc_authentication_init": ({}, "/oidc/authenticate/"),
    "oidc_authentication_callback": ({}, "/oidc/callback/"),
    # queues
    "queues:list": ({}, "/ops/queues/"),
    "queues:queue": ({"name": "retry_exhausted"}, "/ops/queues/retry_exhausted/"),
    "queues:claim_many": ({"name": "retry_exhausted"}, "/ops/queues/retry_exhausted/claim"),
    "queues:batch_new": ({"queue_name": "retry_exhausted"}, "/ops/queues/retry_exhausted/batch"),
    "queues:batch": ({"batch_id": 3}, "/ops/batches/3/"),
    "queues:batch_start": ({"batch_id": 3}, "/ops/batches/3/start"),
    "queues:effect_control": (
        {"name": "create_follow_up", "action": "pause"},
        "/ops/effects/create_follow_up/pause",
    ),
    # runs
    "runs:run": ({"run_id": 7}, "/runs/7/"),
    "runs:comment": ({"run_id": 7}, "/runs/7/comments"),
    "runs:raw": ({"run_id": 7}, "/runs/7/raw"),
    "runs:raw_download": ({"run_id": 7}, "/runs/7/raw/download"),
    "runs:correct": ({"run_id": 7}, "/runs/7/correct"),
    "runs:queue_action": ({"run_id": 7, "action": "claim"}, "/runs/7/queue/claim"),
    "runs:recover": ({"run_id": 7, "action": "retry"}, "/runs/7/recover/retry"),
    "runs:preview": ({"run_id": 7, "action": "replay"}, "/runs/7/preview/replay"),
    # policy
    "policy:list": ({}, "/policy/"),
    "policy:new": ({}, "/policy/new"),
    "policy:business": ({}, "/policy/business"),
    "policy:business_start": ({}, "/policy/business/start"),
    "policy:detail": ({"name": "policy-2"}, "/policy/policy-2/"),
    "policy:simulate": ({"name": "policy-2"}, "/policy/policy-2/simulate"),
    "policy:activate": ({"name": "policy-2"}, "/policy/policy-2/activate"),
    "policy:simulation": ({"simulation_id": 5}, "/policy/simulations/5/"),
    # approvals
    "approvals:inbox": ({}, "/approvals/"),
    "approvals:evidence": ({"request_id": 9}, "/approvals/9/"),
    "approvals:decide": ({"request_id": 9}, "/approvals/9/decide"),
    "approvals:hand": ({"request_id": 9, "action": "claim"}, "/approvals/9/claim"),
    "approvals:bulk": ({}, "/approvals/decide"),
    "approvals:raw": ({"request_id": 9}, "/approvals/9/raw"),
    "approvals:raw_download": ({"request_id": 9}, "/approvals/9/raw/download"),
    # quality
    "quality:queue": ({}, "/qa/"),
    "quality:reconcile_queue": ({}, "/qa/reconcile/"),
    "quality:review": ({"review_id": 4}, "/qa/4/"),
    "quality:reconcile": ({"review_id": 4}, "/qa/4/reconcile"),
    "quality:channel": ({"name": "web"}, "/qa/channels/web/"),
    "quality:comparison": (
        {"name": "web", "classifier": "heuristic"},
        "/qa/channels/web/shadow/heuristic/",
    ),
    "quality:promote": (
        {"name": "web", "classifier": "heuristic"},
        "/qa/channels/web/shadow/heuristic/promote",
    ),
    "quality:rollback": ({"promotion_id": 2}, "/qa/promotions/2/rollback"),
    "quality:reading": ({}, "/qa/reading/"),
    "quality:reading_upload": ({}, "/qa/reading/upload"),
    "quality:reading_train": ({}, "/qa/reading/train"),
    "quality:reading_training": ({"training_id": 3}, "/qa/reading/trainings/3/"),
    "quality:reading_set": ({"set_id": 4}, "/qa/reading/4/"),
    "quality:reading_remove": ({"set_id": 4}, "/qa/reading/4/remove"),
    "quality:reading_evaluate": ({"set_id": 4}, "/qa/reading/4/evaluate"),
    "quality:reading_evaluation": ({"evaluation_id": 5}, "/qa/reading/evaluations/5/"),
    # reports
    "reports:dashboard": ({}, "/reports/"),
    "reports:csv": ({"panel": "handoffs"}, "/reports/handoffs.csv"),
    # integrators, about
    "integrators:api_reference": ({}, "/integrators/api/"),
    "about:run_states": ({}, "/about/states/"),
    # the signed-in person's own
    "me:notifications": ({}, "/me/notifications/"),
    "me:work": ({}, "/me/work/"),
    "me:decided": ({}, "/me/decided/"),
    "me:delegation": ({}, "/me/delegation/"),
    # setting up
    "setup:checklist": ({}, "/setup/"),
    "setup:channels": ({}, "/setup/channels/"),
    "setup:channel_new": ({}, "/setup/channels/new"),
    "setup:channel_edit": ({"name": "claims-mail"}, "/setup/channels/claims-mail/"),
    "setup:mailbox": ({"name": "claims-mail"}, "/setup/channels/claims-mail/mailbox"),
    "setup:token_new": ({"name": "claims-mail"}, "/setup/channels/claims-mail/tokens/new"),
    "setup:token_revoke": (
        {"name": "claims-mail", "token_id": 3},
        "/setup/channels/claims-mail/tokens/3/revoke",
    ),
    "me:notification_list": ({}, "/me/notifications/list/"),
    "me:notification_read": ({}, "/me/notifications/read"),
    "me:team_queue": ({}, "/me/team-queue/"),
    # a team's tasks
    "tasks:list": ({}, "/tasks/"),
    "tasks:task": ({"task_id": 6}, "/tasks/6/"),
    "tasks:comment": ({"task_id": 6}, "/tasks/6/comments"),
    "tasks:action": ({"task_id": 6, "action": "claim"}, "/tasks/6/claim"),
    # customers
    "customers:list": ({}, "/customers/"),
    "customers:new": ({}, "/customers/new"),
    "customers:upload": ({}, "/customers/upload"),
    "customers:edit": ({"customer_id": 12}, "/customers/12/"),
    # teams and people
    "teams:list": ({}, "/teams/"),
    "teams:new": ({}, "/teams/new"),
    "teams:team": ({"name": "claims-desk"}, "/teams/claims-desk/"),
    "teams:roles": ({"name": "claims-desk"}, "/teams/claims-desk/roles"),
    "teams:members": ({"name": "claims-desk"}, "/teams/claims-desk/members"),
    "teams:provider_groups": ({"name": "claims-desk"}, "/teams/claims-desk/sign-in-groups"),
    "teams:people": ({}, "/people/"),
    "teams:person_new": ({}, "/people/new"),
    "teams:person": ({"user_id": 7}, "/people/7/"),
    "teams:deactivate": ({"user_id": 7}, "/people/7/deactivate"),
}


@pytest.mark.parametrize("name", PATHS)
def test_each_page_keeps_its_path_under_its_section_name(name: str) -> None:
    kwargs, path = PATHS[name]

    assert reverse(name, kwargs=kwargs) == path
    assert resolve(path).view_name == name


def _console_names() -> set[str]:
    """Every URL name the console serves, as reversed (namespace:name), from the URLconf;
    not the admin's pages (console.admin), which the admin site names under `admin:`."""
    names: set[str] = set()

    def walk(entries: list[Any], namespace: str) -> None:
        for entry in entries:
            if isinstance(entry, URLResolver):
                inner = ":".join(filter(None, [namespace, entry.namespace or ""]))
                walk(entry.url_patterns, inner)
            elif isinstance(entry, URLPattern) and _is_console_page(entry.callback.__module__):
                names.add(f"{namespace}:{entry.name}" if namespace else str(entry.name))

    walk(get_resolver().url_patterns, "")
    return names


def _is_console_page(module: str) -> bool:
    """The console's views, and company sign-in's two pages (accounts.oidc), which its login
    page leads to."""
    if module == "accounts.oidc":
        return True
    return module.startswith("console.") and not module.startswith("console.admin.")


def test_the_table_names_every_console_page() -> None:
    assert _console_names() == set(PATHS)


def test_no_page_is_left_under_a_domain_app_name() -> None:
    """`automation` named the console's pages before they had sections of their own."""
    namespaces = {name.partition(":")[0] for name in _console_names() if ":" in name}

    assert namespaces == {
        "queues",
        "runs",
        "policy",
        "approvals",
        "quality",
        "reports",
        "customers",
        "integrators",
        "me",
        "about",
        "setup",
        "tasks",
        "teams",
    }
    assert console_urls.home_urls[0].name == "home"
