"""Fixtures shared by the approval tests."""

from __future__ import annotations

import pytest
import yaml

from policy.schemas import PolicyDocument
from policy.services import DEFAULTS_DIR, policy_version_activate, policy_version_create
from tests.conftest import Pipeline


@pytest.fixture
def two_approver_policy(pipeline: Pipeline) -> None:
    """policy-2: policy-1 asking two distinct security approvers; active before any submit."""
    data = yaml.safe_load((DEFAULTS_DIR / "policy-1.yaml").read_text(encoding="utf-8"))
    data["version"] = "policy-2"
    data["approvals"]["queue_account_review"]["approvers"] = 2
    policy_version_create(document=PolicyDocument.model_validate(data))
    policy_version_activate(name="policy-2")
