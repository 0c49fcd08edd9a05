"""Comments on a run (automation.runs.comments): written as given, with the people and groups
they mention, audited, never edited, and changing nothing else on the run."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.contrib.auth.models import Group, User

from accounts.roles import roles_ensure
from approvals.models import ApprovalDecision, ApprovalRequest, ApprovalStatus
from approvals.selectors import can_decide, decidable_by, not_yours
from approvals.services import approval_decide
from audit.models import AuditAction, AuditEvent
from automation.models import Run, RunComment, State
from automation.runs.comments import body_pieces, mentions_of, run_comment_add
from core.codes import Refusal
from core.errors import ServiceError
from core.limits import COMMENT
from tests.conftest import Pipeline, decision_for, make_event

NOW = datetime(2026, 3, 2, 9, 30, tzinfo=UTC)


def person(username: str, *groups: str, **extra: object) -> User:
    user = User.objects.create_user(username=username, **extra)  # type: ignore[arg-type]
    user.groups.add(*Group.objects.filter(name__in=groups))
    return user


@pytest.fixture
def people(db: None) -> dict[str, User]:
    roles_ensure()
    return {
        "approver": person("ana", "security-approvers"),
        "lead": person("lee", "ops-leads", is_staff=True),
        "outsider": person("fin", "finance-approvers"),
        "nobody": person("nobody"),
    }


@pytest.fixture
def waiting(pipeline: Pipeline, people: dict[str, User]) -> Run:
    """A run waiting for the security approvers' decision."""
    event = make_event(
        event_id="evt-sec-1", request_type="security", requested_action="queue_account_review"
    )
    run = pipeline.run(pipeline.submit(event, [decision_for(event)]))
    assert run.state == State.APPROVAL_REQUIRED
    return run


def add(run: Run, author: User, body: str) -> RunComment:
    return run_comment_add(run_id=run.pk, author=author, body=body, now=NOW)


def test_a_comment_is_stored_as_written_with_one_audit_row(
    waiting: Run, people: dict[str, User]
) -> None:
    body = "  Is AC-20931 the right account?\n@lee please check.  "

    comment = add(waiting, people["approver"], body)

    stored = RunComment.objects.get()
    assert stored == comment and stored.body == body and stored.created_at == NOW
    assert stored.author == people["approver"] and stored.run_id == waiting.pk
    row = AuditEvent.objects.get(action=AuditAction.RUN_COMMENTED)
    assert row.run_id == waiting.pk and row.actor == people["approver"]
    assert row.data == {
        "comment": comment.pk,
        "mentions": {"users": [people["lead"].pk], "groups": []},
    }
    assert "AC-20931" not in str(row.data)  # the body is the comment's, not written twice


def test_mentions_are_active_people_and_groups_and_nothing_else(
    db: None, people: dict[str, User]
) -> None:
    person("gone", is_active=False)
    body = (
        "@lee and @ops-leads, see @ana. Not @nobody-here, not @gone, not a@b.c or "
        "mail lee@example.com; @lee again, (@security-approvers)."
    )

    found = mentions_of(body)

    assert found == {
        "users": [people["lead"].pk, people["approver"].pk],
        "groups": ["ops-leads", "security-approvers"],
    }


def test_a_mention_is_marked_where_it_is_written_and_nothing_else_is() -> None:
    pieces = body_pieces("Hi @lee, ask @ops-leads. @nobody, a@b.c", {"lee", "ops-leads"})

    assert pieces == [
        ("Hi ", False),
        ("@lee", True),
        (", ask ", False),
        ("@ops-leads", True),
        (". @nobody, a@b.c", False),
    ]


@pytest.mark.parametrize(
    ("body", "code", "said"),
    [
        ("", Refusal.COMMENT_REQUIRED, "the comment is empty"),
        (" \n\t ", Refusal.COMMENT_REQUIRED, "the comment is empty"),
        ("x" * (COMMENT + 1), Refusal.TOO_LONG, "the comment is 4,001 characters long"),
    ],
)
def test_an_empty_or_too_long_comment_is_refused_and_nothing_is_written(
    waiting: Run, people: dict[str, User], body: str, code: Refusal, said: str
) -> None:
    trail = AuditEvent.objects.count()

    with pytest.raises(ServiceError) as refused:
        add(waiting, people["lead"], body)

    assert refused.value.code == code and said in refused.value.message
    assert not RunComment.objects.exists() and AuditEvent.objects.count() == trail


def test_the_longest_comment_is_taken_its_spaces_aside(
    waiting: Run, people: dict[str, User]
) -> None:
    body = "  " + "x" * COMMENT + "\n"

    assert add(waiting, people["lead"], body).body == body


@pytest.mark.parametrize("who", ["outsider", "nobody"])
def test_whoever_may_not_read_the_run_is_refused_and_nothing_is_written(
    waiting: Run, people: dict[str, User], who: str
) -> None:
    trail = AuditEvent.objects.count()

    with pytest.raises(ServiceError) as refused:
        add(waiting, people[who], "Let me see.")

    assert refused.value.code == Refusal.FORBIDDEN
    assert not RunComment.objects.exists() and AuditEvent.objects.count() == trail


def test_a_comment_is_never_edited_or_deleted(waiting: Run, people: dict[str, User]) -> None:
    comment = add(waiting, people["lead"], "First thoughts.")
    comment.body = "Second thoughts."

    with pytest.raises(ValueError, match="append-only: update refused"):
        comment.save()
    with pytest.raises(ValueError, match="append-only: delete refused"):
        comment.delete()
    assert RunComment.objects.get().body == "First thoughts."


def test_a_comment_changes_no_state_approval_or_decision(
    pipeline: Pipeline, waiting: Run, people: dict[str, User]
) -> None:
    request = ApprovalRequest.objects.get(run=waiting)
    before = Run.objects.values().get(pk=waiting.pk)

    with pipeline.capture():
        add(waiting, people["approver"], "@ops-leads does this look right?")
        add(waiting, people["lead"], "@ana yes, go ahead.")
    pipeline.drain()

    assert Run.objects.values().get(pk=waiting.pk) == before
    request.refresh_from_db()
    assert request.status == ApprovalStatus.PENDING and request.decided_at is None
    assert not ApprovalDecision.objects.exists()
    assert pipeline.queue == type(pipeline.queue)()  # no work was sent


def test_an_approver_who_commented_may_still_decide(
    pipeline: Pipeline, waiting: Run, people: dict[str, User]
) -> None:
    """A comment is not a hand on the run: separation of duties does not count it."""
    approver = people["approver"]
    request = ApprovalRequest.objects.get(run=waiting)
    add(waiting, approver, "Is the customer aware?")

    assert can_decide(approver, request) and not_yours(approver, request) is None
    assert list(decidable_by(approver, ApprovalRequest.objects.all())) == [request]  # the inbox
    with pipeline.capture():
        result = approval_decide(
            request_id=request.pk, user=approver, approve=True, seen=request.binding()
        )
    assert result.code == ApprovalStatus.APPROVED
