"""QA sampling of straight-through runs, a reviewer's confirmation or correction, the
reconcile queue, and the labels people's judgements leave behind."""

from __future__ import annotations

import csv
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.core.management import call_command

from accounts.roles import roles_ensure
from audit.models import AuditEvent
from automation.classifiers.quality import qa_confirm, qa_correct, qa_reconcile
from automation.models import Label, LabelSource, QAReview, QAStatus, Run, State, Task
from automation.recovery.services import run_correct
from core.errors import ServiceError
from policy.evaluation import qa_sample
from policy.services import (
    DEFAULTS_DIR,
    parse_policy_text,
    policy_version_activate,
    policy_version_create,
)
from tests.approvals.test_decide import decide, open_request
from tests.conftest import Pipeline, _user, decision_for, make_event
from tests.policy.test_evaluation import policy_with
from tests.visible_text import codes_shown, visible_text

pytestmark = pytest.mark.django_db


def sampling(pipeline: Pipeline, rate: float, name: str = "policy-qa") -> Pipeline:
    """policy-1 sampling every route at `rate`, service desk samples reviewed by qa-desk."""
    data = yaml.safe_load((DEFAULTS_DIR / "policy-1.yaml").read_text(encoding="utf-8"))
    data.update(
        version=name,
        qa_sampling={"default": rate, "owners": {"service_desk": "qa-desk"}},
    )
    policy_version_create(document=parse_policy_text(yaml.safe_dump(data)))
    policy_version_activate(name=name)
    return pipeline


def straight_through(pipeline: Pipeline, event_id: str) -> Run:
    event = make_event(event_id=event_id)
    return pipeline.run(pipeline.submit(event, [decision_for(event)]))


def test_sampling_is_deterministic_and_close_to_its_rate() -> None:
    policy = policy_with(qa_sampling={"routes": {"finance": 0.2}, "default": 0.0})
    prints = [hashlib.sha256(str(n).encode()).hexdigest() for n in range(2000)]
    picked = [p for p in prints if qa_sample(policy, "finance", p)]
    assert 0.16 < len(picked) / len(prints) < 0.24
    assert picked == [p for p in prints if qa_sample(policy, "finance", p)]  # same again
    assert not any(qa_sample(policy, "service_desk", p) for p in prints)  # its rate is 0
    assert qa_sample(policy, "finance", picked[0]) == "ops-leads"  # the default owner
    other = policy_with(version="policy-x", qa_sampling={"default": 0.2})
    assert [p for p in prints if qa_sample(other, "finance", p)] != picked  # version in the hash


def test_a_version_without_sampling_keeps_its_checksum() -> None:
    plain = policy_with()
    assert plain.checksum() == policy_with(qa_sampling=None).checksum()
    assert policy_with(qa_sampling={"default": 0.1}).checksum() != plain.checksum()


def test_a_sampled_run_completes_as_usual_and_waits_for_review(pipeline: Pipeline) -> None:
    run = straight_through(sampling(pipeline, 1.0), "evt-qa-1")

    assert (run.state, Task.objects.filter(run=run).count()) == (State.COMPLETED, 1)
    review = QAReview.objects.get(run=run)
    assert (review.status, review.group, review.route) == (
        QAStatus.OPEN,
        "qa-desk",
        "service_desk",
    )
    assert review.policy_version == "policy-qa"
    assert review.reading["category"] == "support"
    assert AuditEvent.objects.filter(run=run, action="qa.sampled").exists()


def test_a_run_not_sampled_gets_no_review(pipeline: Pipeline) -> None:
    run = straight_through(sampling(pipeline, 0.0), "evt-qa-0")
    assert run.state == State.COMPLETED
    assert not QAReview.objects.filter(run=run).exists()


def test_a_confirmation_labels_the_reading_right(pipeline: Pipeline) -> None:
    run = straight_through(sampling(pipeline, 1.0), "evt-qa-2")
    reviewer = _user("quinn", "qa-desk")

    qa_confirm(review_id=run.qa_review.pk, user=reviewer)

    label = Label.objects.get(run=run)
    assert (label.source, label.actor, label.reading_was_right) == (
        LabelSource.QA_CONFIRMED,
        reviewer,
        True,
    )
    assert label.classifier_version == run.classifier_version
    with pytest.raises(ServiceError):  # decided once
        qa_confirm(review_id=run.qa_review.pk, user=reviewer)


def test_a_correction_runs_nothing_again_and_waits_to_be_reconciled(
    pipeline: Pipeline, ops_lead: User
) -> None:
    run = straight_through(sampling(pipeline, 1.0), "evt-qa-3")
    reviewer = _user("quinn", "qa-desk")

    review = qa_correct(
        review_id=run.qa_review.pk,
        user=reviewer,
        category="billing",
        effect="send_internal_notification",
        note="a refund request",
    )
    pipeline.drain()

    run.refresh_from_db()
    assert run.state == State.COMPLETED
    assert Task.objects.filter(run=run).count() == 1  # the effect is not run again
    assert review.status == QAStatus.CORRECTED
    label = Label.objects.get(run=run)
    assert (label.category, label.reading_was_right) == ("billing", False)
    assert list(QAReview.objects.filter(status=QAStatus.CORRECTED, reconciled_at=None)) == [review]

    roles_ensure()
    with pytest.raises(ServiceError):
        qa_reconcile(review_id=review.pk, user=ops_lead, note="  ")
    qa_reconcile(review_id=review.pk, user=ops_lead, note="called finance; refund raised")
    review.refresh_from_db()
    assert review.reconciled_by == ops_lead and review.reconcile_note.startswith("called")
    assert AuditEvent.objects.filter(run=run, action="qa.reconciled").exists()


def test_only_the_routes_group_reviews_and_a_correction_must_change_something(
    pipeline: Pipeline,
) -> None:
    run = straight_through(sampling(pipeline, 1.0), "evt-qa-4")
    outsider = _user("otto", "finance-approvers")
    with pytest.raises(PermissionDenied):
        qa_confirm(review_id=run.qa_review.pk, user=outsider)
    with pytest.raises(ServiceError):
        qa_correct(
            review_id=run.qa_review.pk,
            user=_user("quinn", "qa-desk"),
            category="support",
            effect="create_follow_up",
        )


def test_a_correction_names_a_type_and_an_effect_of_the_runs_catalogue(
    pipeline: Pipeline,
) -> None:
    run = straight_through(sampling(pipeline, 1.0), "evt-qa-catalogue")
    reviewer = _user("quinn", "qa-desk")
    for category, effect, refused in [
        ("warranty_claim", "create_follow_up", "'warranty_claim' is no request type"),
        ("billing", "refund_now", "'refund_now' is no effect of the catalogue"),
    ]:
        with pytest.raises(ServiceError) as error:
            qa_correct(review_id=run.qa_review.pk, user=reviewer, category=category, effect=effect)
        assert refused in error.value.message
    assert QAReview.objects.get(pk=run.qa_review.pk).status == QAStatus.OPEN


def test_a_correction_in_the_queue_and_an_approval_leave_labels(
    pipeline: Pipeline, approver: User, ops_lead: User
) -> None:
    roles_ensure()
    low = make_event(event_id="evt-low")
    held = pipeline.run(pipeline.submit(low, [decision_for(low, reason_code="unclear")]))
    corrected: dict[str, Any] = dict(held.classification or {})
    with pipeline.capture():
        run_correct(run_id=held.pk, user=ops_lead, corrected=corrected, reason="read it")
    pipeline.drain()
    assert Label.objects.get(run=held).source == LabelSource.CORRECTION

    request = open_request(pipeline)
    decide(pipeline, request, approver)
    label = Label.objects.get(run=request.run)
    assert (label.source, label.actor, label.reading_was_right) == (
        LabelSource.APPROVAL,
        approver,
        True,
    )


def test_labels_are_exported_as_a_labelled_set(pipeline: Pipeline, tmp_path: Path) -> None:
    run = straight_through(sampling(pipeline, 1.0), "evt-qa-5")
    qa_correct(
        review_id=run.qa_review.pk,
        user=_user("quinn", "qa-desk"),
        category="billing",
        effect="send_internal_notification",
    )

    call_command("export_labels", str(tmp_path))

    with (tmp_path / "labels.csv").open(encoding="utf-8") as handle:
        (row,) = list(csv.DictReader(handle))
    assert (row["file"], row["category"], row["effect"]) == (
        f"run-{run.pk}.json",
        "billing",
        "send_internal_notification",
    )
    assert json.loads((tmp_path / row["file"]).read_bytes())["event_id"] == "evt-qa-5"


def test_the_qa_queue_pages_by_keyset_and_shows_only_the_readers_groups(
    pipeline: Pipeline,
) -> None:
    from django.test import Client

    from console.views.quality import PAGE_SIZE

    run = straight_through(sampling(pipeline, 0.0), "evt-page")
    QAReview.objects.bulk_create(
        QAReview(
            run=Run.objects.create(
                channel=pipeline.channel,
                intake=run.intake,
                event_id=f"evt-page-{n}",
                identity_scope="pages",
                workflow_version="workflow-1",
            ),
            route="service_desk",
            group="qa-desk" if n % 2 == 0 else "elsewhere",
            policy_version="policy-qa",
            classifier_version="recorded-classifier-1",
            reading={"category": "support", "effect": "create_follow_up"},
        )
        for n in range(2 * PAGE_SIZE + 4)
    )
    client = Client()
    client.force_login(_user("quinn", "qa-desk"))

    first = client.get("/qa/")
    shown = first.context["reviews"]
    assert len(shown) == PAGE_SIZE and {r.group for r in shown} == {"qa-desk"}
    second = client.get("/qa/" + first.context["next_link"])
    assert len(second.context["reviews"]) == 2  # 52 of the desk's, 50 a page
    assert not {r.pk for r in shown} & {r.pk for r in second.context["reviews"]}
    assert 'rel="prev"' in second.content.decode()


# --- the QA pages in words: codes only as secondary text --------------------------------------

CODES = [
    "needs_review", "low_confidence", "risk_signal", "queue_account_review",
    "send_internal_notification", "create_follow_up", "service_desk", "security_review",
    "approval_required", "invalid", "timeout",
]  # fmt: skip


def qa_pages_history(pipeline: Pipeline) -> tuple[QAReview, QAReview]:
    """An open sample and a corrected one, both also read in shadow by the heuristic."""
    pipeline.channel.shadow_classifiers = ["heuristic"]
    pipeline.channel.save(update_fields=["shadow_classifiers"])
    sampling(pipeline, 1.0)
    bodies = ["Please create a follow-up about my access.", "Please refund the double charge."]
    runs = []
    for n, body in enumerate(bodies):
        event = make_event(event_id=f"evt-words-{n}", body=body)
        runs.append(pipeline.run(pipeline.submit(event, [decision_for(event)])))
    corrected = qa_correct(
        review_id=runs[1].qa_review.pk,
        user=_user("quinn", "qa-desk"),
        category="billing",
        effect="send_internal_notification",
        note="a refund",
    )
    return runs[0].qa_review, corrected


def test_the_qa_pages_show_labels_and_codes_only_as_secondary_text(
    pipeline: Pipeline, ops_lead: User
) -> None:
    from django.test import Client

    roles_ensure()
    open_one, corrected = qa_pages_history(pipeline)
    reviewer, lead = Client(), Client()
    reviewer.force_login(User.objects.get(username="quinn"))
    lead.force_login(ops_lead)
    channel = pipeline.channel.name
    pages = [
        (reviewer, "/qa/", ["Service desk", "Support", "Create a follow-up"]),
        (reviewer, f"/qa/{open_one.pk}/", ["To review", "Notify the team", "Billing"]),
        (reviewer, f"/qa/{corrected.pk}/", ["Corrected", "Notify the team", "Billing"]),
        (lead, "/qa/reconcile/", ["Create a follow-up", "Notify the team"]),
        (lead, f"/qa/channels/{channel}/", ["heuristic"]),
        (lead, f"/qa/channels/{channel}/shadow/heuristic/", ["Straight through", "Billing"]),
    ]
    for client, url, words in pages:
        response = client.get(url)
        assert response.status_code == 200, url
        html = response.content.decode()
        assert codes_shown(html, CODES) == [], url
        text = visible_text(html)
        assert all(w in text for w in words), (url, [w for w in words if w not in text])
    comparison = lead.get(f"/qa/channels/{channel}/shadow/heuristic/").content.decode()
    assert '<small class="code">create_follow_up</small>' in comparison  # the code, quietly


def test_the_qa_flash_messages_are_plain_words(pipeline: Pipeline, ops_lead: User) -> None:
    from django.test import Client

    roles_ensure()
    open_one, corrected = qa_pages_history(pipeline)
    reviewer = Client()
    reviewer.force_login(User.objects.get(username="quinn"))
    url = f"/qa/{open_one.pk}/"

    done = reviewer.post(url, {"verdict": "confirm"}, follow=True)
    again = reviewer.post(url, {"verdict": "confirm"}, follow=True)

    assert "Confirmed: the reading was right." in visible_text(done.content.decode())
    said = visible_text(again.content.decode())
    assert "Someone already reviewed this sample (confirmed): nothing was changed." in said
    lead = Client()
    lead.force_login(ops_lead)
    reconciled = lead.post(f"/qa/{corrected.pk}/reconcile", {"note": "refund raised"}, follow=True)
    assert f"Sample #{corrected.pk} reconciled." in visible_text(reconciled.content.decode())


def test_a_promotion_the_settings_forbid_is_refused_in_plain_words(
    pipeline: Pipeline, ops_lead: User, settings: Any
) -> None:
    from django.test import Client

    roles_ensure()
    qa_pages_history(pipeline)
    name = pipeline.channel.name
    settings.GATEHOUSE = {**settings.GATEHOUSE, "CHANNEL_CLASSIFIERS": {name: "recorded"}}
    lead = Client()
    lead.force_login(ops_lead)

    refused = lead.post(f"/qa/channels/{name}/shadow/heuristic/promote", follow=True)

    said = visible_text(refused.content.decode())
    assert f"The server's settings choose {name}'s classifier" in said
    assert "GATEHOUSE_CHANNEL_CLASSIFIERS" not in said
    pipeline.channel.refresh_from_db()
    assert pipeline.channel.classifier == "recorded"
