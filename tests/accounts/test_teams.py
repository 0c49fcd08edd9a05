"""Teams as data: a team made by an administrator with the approver role approves what the
business routes to it, and without that role it cannot; a team's permissions are always the
union of its roles'; nobody changes their own access; every change is audited.

The business is a pet insurer of these tests' own (tests/data/pet-insurer-1.yaml), whose
approval rule names the team `claims-desk`.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.db import connection

from accounts.models import Team
from accounts.roles import ROLES, SAMPLE_TEAMS, permissions_of, roles_ensure
from accounts.selectors import administrators
from accounts.services import (
    FieldRefused,
    person_change,
    person_create,
    person_deactivate,
    team_change,
    team_create,
    team_member_add,
    team_member_remove,
)
from approvals.models import ApprovalRequest, ApprovalStatus
from approvals.services import approval_decide
from audit.models import AuditAction, AuditEvent
from core.codes import Refusal
from core.errors import ServiceError
from policy.services import parse_policy_text, policy_version_activate, policy_version_create
from tests.conftest import Pipeline, make_event

pytestmark = pytest.mark.django_db

PET_INSURER = Path(__file__).resolve().parents[1] / "data" / "pet-insurer-1.yaml"
DESK = "claims-desk"


@pytest.fixture
def admin(db: None) -> User:
    """An administrator who is no superuser: in the sample team with the administrator role."""
    roles_ensure()
    user = User.objects.create_user("ada")
    user.groups.add(Group.objects.get(name="administrators"))
    return user


@pytest.fixture
def root(db: None) -> User:
    return User.objects.create_superuser("root", "root@example.com", None)


def activate_pet_insurer() -> None:
    version, _ = policy_version_create(document=parse_policy_text(PET_INSURER.read_text()))
    policy_version_activate(name=version.name)


def vet_bill(pipeline: Pipeline, event_id: str) -> ApprovalRequest:
    event = make_event(
        event_id=event_id,
        request_type="vet_bill",
        requested_action="pay_vet_bill",
        subject="Bill for Biscuit's x-ray",
        body="Please pay the attached vet bill for Biscuit.",
    )
    decision = {
        "category": "vet_bill",
        "recommended_route": "claims",
        "requested_effect": "pay_vet_bill",
        "reason_code": "vet_bill_sent",
    }
    run = pipeline.run(pipeline.submit(event, [{"type": "decision", "value": decision}]))
    assert run.state == "approval_required", (run.state, run.outcome, run.failure_detail)
    return ApprovalRequest.objects.get(run=run, status=ApprovalStatus.PENDING)


def decide(pipeline: Pipeline, request: ApprovalRequest, user: User) -> ApprovalRequest:
    with pipeline.capture():
        approval_decide(request_id=request.pk, user=user, approve=True, seen=request.binding())
    pipeline.drain()
    return ApprovalRequest.objects.get(pk=request.pk)


def desk_member(admin: User, *roles: str) -> User:
    """The claims desk made by the administrator with these roles, and one person in it."""
    team_create(name=DESK, description="Pays vet bills.", roles=roles, by=admin)
    pia = person_create(
        username="pia", first_name="Pia", last_name="Lund", email="", password=None, by=admin
    )
    team_member_add(name=DESK, username="pia", by=admin)
    return User.objects.get(pk=pia.pk)  # afresh: permissions are cached on the object


def test_a_team_made_with_the_approver_role_approves_what_is_routed_to_it(
    pipeline: Pipeline, admin: User
) -> None:
    pia = desk_member(admin, "approver")
    activate_pet_insurer()
    request = vet_bill(pipeline, "evt-vet-1")
    assert request.group == DESK

    assert decide(pipeline, request, pia).status == ApprovalStatus.APPROVED


def test_a_team_without_the_approver_role_cannot_approve_until_it_is_given_it(
    pipeline: Pipeline, admin: User
) -> None:
    pia = desk_member(admin, "auditor")
    activate_pet_insurer()
    request = vet_bill(pipeline, "evt-vet-2")

    with pytest.raises(ServiceError) as refused:
        decide(pipeline, request, pia)
    assert refused.value.code == Refusal.FORBIDDEN
    assert ApprovalRequest.objects.get(pk=request.pk).status == ApprovalStatus.PENDING

    team_change(name=DESK, roles=["auditor", "approver"], description="", by=admin)
    pia = User.objects.get(pk=pia.pk)
    assert decide(pipeline, request, pia).status == ApprovalStatus.APPROVED


def test_an_approvers_role_in_one_team_decides_nothing_for_another_team_without_it(
    pipeline: Pipeline, admin: User
) -> None:
    """Pia approves for the vet desk of another business; the claims desk she is also in has
    no role that decides: its requests are not hers to decide."""
    pia = desk_member(admin, "auditor")
    team_create(name="vet-desk", description="Approves vet payments.", roles=["approver"], by=admin)
    team_member_add(name="vet-desk", username="pia", by=admin)
    pia = User.objects.get(pk=pia.pk)
    assert pia.has_perm("approvals.decide_approvalrequest")  # through the vet desk
    activate_pet_insurer()
    request = vet_bill(pipeline, "evt-vet-3")
    assert request.group == DESK

    with pytest.raises(ServiceError) as refused:
        decide(pipeline, request, pia)
    assert refused.value.code == Refusal.FORBIDDEN
    assert ApprovalRequest.objects.get(pk=request.pk).status == ApprovalStatus.PENDING


def permission_set(name: str) -> set[str]:
    group = Group.objects.get(name=name)
    return set(group.permissions.values_list("content_type__app_label", "codename"))


def union_of(*roles: str) -> set[str]:
    found = Permission.objects.filter(pk__in=[p.pk for p in permissions_of(roles)])
    return set(found.values_list("content_type__app_label", "codename"))


def test_a_teams_permissions_are_always_the_union_of_its_roles(admin: User) -> None:
    team_create(name="fraud team", description="", roles=["approver", "recovery"], by=admin)
    assert permission_set("fraud team") == union_of("approver") | union_of("recovery")
    assert ("approvals", "decide_approvalrequest") in permission_set("fraud team")

    team_change(name="fraud team", roles=["auditor"], description="", by=admin)
    assert permission_set("fraud team") == union_of("auditor")
    assert ("approvals", "decide_approvalrequest") not in permission_set("fraud team")

    team_change(name="fraud team", roles=[], description="", by=admin)
    assert permission_set("fraud team") == set()


def test_setup_roles_makes_the_sample_teams_and_keeps_roles_chosen_in_the_console(
    root: User,
) -> None:
    Group.objects.create(name="auditors")  # a sample group made before teams existed
    counts = roles_ensure()
    assert set(SAMPLE_TEAMS) <= set(counts)
    assert Team.objects.get(group__name="auditors").roles == ["auditor"]
    assert permission_set("security-approvers") == union_of("approver")

    team_change(name="auditors", roles=["recovery", "auditor"], description="", by=root)
    roles_ensure()
    assert Team.objects.get(group__name="auditors").roles == ["recovery", "auditor"]
    assert permission_set("auditors") == union_of("recovery", "auditor")


def test_an_ops_lead_without_the_administrator_role_manages_no_team(ops_lead: User) -> None:
    with pytest.raises(ServiceError) as refused:
        team_create(name="claims-desk", description="", roles=["approver"], by=ops_lead)
    assert refused.value.code == Refusal.FORBIDDEN
    assert not Group.objects.filter(name="claims-desk").exists()


def test_nobody_adds_themselves_to_a_team_or_takes_themselves_out(admin: User) -> None:
    team_create(name=DESK, description="", roles=["approver"], by=admin)
    with pytest.raises(ServiceError) as refused:
        team_member_add(name=DESK, username="ada", by=admin)
    assert refused.value.code == Refusal.OWN_ACCESS
    assert "you cannot add yourself" in refused.value.message
    assert not admin.groups.filter(name=DESK).exists()

    with pytest.raises(ServiceError) as refused:
        team_member_remove(name="administrators", user_id=admin.pk, by=admin)
    assert refused.value.code == Refusal.OWN_ACCESS
    assert admin.groups.filter(name="administrators").exists()


def test_nobody_changes_the_roles_of_a_team_they_are_in(admin: User, root: User) -> None:
    team_create(name=DESK, description="", roles=["approver"], by=admin)
    team_member_add(name=DESK, username="ada", by=root)

    for team, roles in ((DESK, ["approver", "administrator"]), ("administrators", [])):
        with pytest.raises(ServiceError) as refused:
            team_change(name=team, roles=roles, description="", by=admin)
        assert refused.value.code == Refusal.OWN_ACCESS
    assert Team.objects.get(group__name=DESK).roles == ["approver"]
    assert ("automation", "manage_teams") not in permission_set(DESK)

    # Its description, yes: that gives nobody anything.
    team_change(name=DESK, roles=["approver"], description="Pays vet bills.", by=admin)
    assert Team.objects.get(group__name=DESK).description == "Pays vet bills."


def test_a_superuser_may_change_their_own_teams(root: User) -> None:
    roles_ensure()
    team_member_add(name="administrators", username="root", by=root)
    team_change(name="administrators", roles=["administrator", "auditor"], description="", by=root)
    team_member_remove(name="administrators", user_id=root.pk, by=root)
    assert not root.groups.exists()


def test_only_a_superuser_changes_or_deactivates_a_superusers_account(
    admin: User, root: User
) -> None:
    with pytest.raises(ServiceError) as refused:
        person_change(
            user_id=root.pk, first_name="", last_name="", email="me@evil.example", by=admin
        )
    assert refused.value.code == Refusal.FORBIDDEN
    with pytest.raises(ServiceError):
        person_deactivate(user_id=root.pk, by=admin)
    root.refresh_from_db()
    assert root.is_active and root.email == "root@example.com"


def test_the_last_active_administrator_is_not_deactivated(root: User) -> None:
    assert list(administrators()) == [root]
    with pytest.raises(ServiceError) as refused:
        person_deactivate(user_id=root.pk, by=root)
    assert refused.value.code == Refusal.LAST_ADMINISTRATOR
    root.refresh_from_db()
    assert root.is_active


def test_an_administrator_deactivates_another_but_never_themselves(admin: User, root: User) -> None:
    with pytest.raises(ServiceError) as refused:
        person_deactivate(user_id=admin.pk, by=admin)
    assert refused.value.code == Refusal.OWN_ACCESS

    bo = person_create(
        username="bo", first_name="", last_name="", email="", password=None, by=admin
    )
    team_member_add(name="administrators", username="bo", by=admin)
    person_deactivate(user_id=bo.pk, by=admin)
    bo.refresh_from_db()
    assert not bo.is_active
    assert set(administrators()) == {admin, root}


def test_a_person_signs_in_with_the_password_given_or_with_the_company_account(
    admin: User,
) -> None:
    with pytest.raises(FieldRefused) as refused:
        person_create(
            username="cy", first_name="", last_name="", email="", password="123", by=admin
        )
    assert refused.value.field == "password"
    assert not User.objects.filter(username="cy").exists()

    cy = person_create(
        username="cy", first_name="Cy", last_name="", email="", password="a-long-pass-9", by=admin
    )
    assert cy.check_password("a-long-pass-9")
    dee = person_create(
        username="dee",
        first_name="",
        last_name="",
        email="dee@pets.example",
        password=None,
        by=admin,
    )
    assert not dee.has_usable_password()

    with pytest.raises(FieldRefused) as refused:
        person_create(
            username="DEE", first_name="", last_name="", email="", password=None, by=admin
        )
    assert refused.value.field == "username"


def test_every_change_is_audited_with_who_did_it_and_what_changed(admin: User) -> None:
    pia = desk_member(admin, "approver")
    team_change(name=DESK, roles=["approver", "auditor"], description="", by=admin)
    person_change(user_id=pia.pk, first_name="Pia", last_name="Berg", email="", by=admin)
    team_member_remove(name=DESK, user_id=pia.pk, by=admin)

    rows = AuditEvent.objects.filter(actor=admin).order_by("pk")
    assert [row.action for row in rows] == [
        AuditAction.TEAM_CREATED,
        AuditAction.PERSON_ADDED,
        AuditAction.TEAM_MEMBER_ADDED,
        AuditAction.TEAM_CHANGED,
        AuditAction.PERSON_CHANGED,
        AuditAction.TEAM_MEMBER_REMOVED,
    ]
    changed = rows.get(action=AuditAction.TEAM_CHANGED).data
    assert (changed["roles_before"], changed["roles"]) == (["approver"], ["approver", "auditor"])
    renamed = rows.get(action=AuditAction.PERSON_CHANGED).data
    assert renamed["before"] == {"last_name": "Lund"} and renamed["after"] == {"last_name": "Berg"}


def test_every_role_has_words_for_people() -> None:
    for role in ROLES.values():
        assert role.name and role.may.endswith(".") and "_" not in role.may


@pytest.mark.django_db(transaction=True)
def test_of_two_administrators_deactivating_each_other_at_once_one_remains() -> None:
    """Both are active when they start: whichever takes the lock second finds the first's
    change, and is refused instead of leaving nobody to manage teams."""
    roles_ensure()
    pair = [User.objects.create_user(name) for name in ("ada", "bo")]
    for user in pair:
        user.groups.add(Group.objects.get(name="administrators"))
    barrier = threading.Barrier(2)
    results: dict[str, BaseException | None] = {}

    def deactivate(by: User, other: User) -> None:
        try:
            barrier.wait(timeout=10)
            person_deactivate(user_id=other.pk, by=User.objects.get(pk=by.pk))
            results[by.username] = None
        except BaseException as exc:
            results[by.username] = exc
        finally:
            connection.close()

    threads = [
        threading.Thread(target=deactivate, args=(pair[0], pair[1])),
        threading.Thread(target=deactivate, args=(pair[1], pair[0])),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    assert administrators().count() == 1
    refused = [exc for exc in results.values() if exc is not None]
    assert len(results) == 2 and len(refused) == 1
    assert isinstance(refused[0], ServiceError)
    assert refused[0].code in (Refusal.FORBIDDEN, Refusal.LAST_ADMINISTRATOR)
