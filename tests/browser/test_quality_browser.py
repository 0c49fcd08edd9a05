"""QA review in a real browser: a reviewer confirms one sampled run and corrects another, and
an ops lead reconciles the corrected one. The samples come from the real pipeline under a
policy that samples every straight-through run."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import yaml

from automation.models import (
    ClassifierPromotion,
    Label,
    QAReview,
    QAStatus,
    Run,
    State,
    Task,
)
from policy.services import (
    DEFAULTS_DIR,
    parse_policy_text,
    policy_version_activate,
    policy_version_create,
)
from tests.browser.conftest import PLAYWRIGHT_MISSING, Person, log_in, screenshot
from tests.conftest import Pipeline, decision_for, make_event

pytest.importorskip("playwright.sync_api", reason=PLAYWRIGHT_MISSING, exc_type=ImportError)
from playwright.sync_api import Page, expect

QA_PNG = "/tmp/qa-review.png"  # noqa: S108 - a picture for a person, not asserted


@pytest.fixture
def sampled_runs(pipeline: Pipeline) -> list[Run]:
    data = yaml.safe_load((DEFAULTS_DIR / "policy-1.yaml").read_text(encoding="utf-8"))
    data.update(version="policy-qa", qa_sampling={"default": 1.0, "owners": {}})
    data["queue_owners"]["qa_review"] = "qa-desk"
    policy_version_create(document=parse_policy_text(yaml.safe_dump(data)))
    policy_version_activate(name="policy-qa")
    runs = []
    for n, body in enumerate(
        ["Please create a follow-up about my access.", "Please refund the double charge."]
    ):
        event = make_event(event_id=f"evt-qa-{n}", body=body)
        runs.append(pipeline.run(pipeline.submit(event, [decision_for(event)])))
    assert all(run.state == State.COMPLETED for run in runs)
    return runs


def test_a_reviewer_confirms_one_sample_and_corrects_another_and_a_lead_reconciles(
    page: Page,
    make_person: Callable[..., Person],
    sampled_runs: list[Run],
    new_context: Callable[..., object],
) -> None:
    from django.contrib.auth.models import Group

    Group.objects.get_or_create(name="qa-desk")
    reviewer = make_person("rita", "qa-desk")
    right, wrong = sampled_runs

    log_in(page, reviewer, "/qa/")
    expect(page.get_by_test_id("qa-items")).to_contain_text("evt-qa-0")
    for words in ("Service desk", "Support", "Create a follow-up"):
        expect(page.get_by_test_id("qa-items")).to_contain_text(words)
    page.get_by_test_id(f"qa-open-{right.pk}").click()
    expect(page.get_by_test_id("qa-reading")).to_contain_text("Category Support")
    expect(page.get_by_test_id("qa-status")).to_have_text("To review")
    page.get_by_test_id("qa-confirm").click()
    expect(page.get_by_role("status")).to_contain_text("the reading was right")

    page.get_by_test_id(f"qa-open-{wrong.pk}").click()
    page.get_by_label("Category").select_option(label="Billing")
    page.get_by_label("Effect").select_option(label="Notify the team")
    page.get_by_label("Note").fill("a refund, not an access question")
    page.screenshot(path=QA_PNG, full_page=True)
    screenshot(page, "qa-review-in-words")
    page.get_by_test_id("qa-correct").click()
    expect(page.get_by_role("status")).to_contain_text("an ops lead reconciles it")
    expect(page.get_by_test_id("qa-empty")).to_be_visible()

    assert QAReview.objects.get(run=right).status == QAStatus.CONFIRMED
    assert QAReview.objects.get(run=wrong).status == QAStatus.CORRECTED
    assert sorted(Label.objects.values_list("reading_was_right", flat=True)) == [False, True]
    assert Task.objects.filter(run=wrong).count() == 1  # nothing ran again

    lead = make_person("leo", "ops-leads")
    lead_page = new_context().new_page()  # type: ignore[attr-defined]
    log_in(lead_page, lead, "/qa/reconcile/")
    lead_page.get_by_label(f"What was done about run {wrong.pk}").fill("finance raised the refund")
    lead_page.get_by_test_id(f"reconcile-{wrong.pk}").click()
    expect(lead_page.get_by_role("status")).to_contain_text("reconciled")
    expect(lead_page.get_by_test_id("reconcile-empty")).to_be_visible()
    lead_page.goto(f"/qa/{QAReview.objects.get(run=wrong).pk}/")
    expect(lead_page.get_by_test_id("qa-status")).to_have_text("Corrected")
    expect(lead_page.get_by_test_id("qa-correction")).to_contain_text("Corrected to Billing")
    expect(lead_page.get_by_test_id("qa-correction")).to_contain_text("Notify the team")
    assert QAReview.objects.get(run=wrong).reconcile_note == "finance raised the refund"


def test_an_ops_lead_compares_a_shadow_promotes_it_and_rolls_it_back(
    page: Page, make_person: Callable[..., Person], pipeline: Pipeline
) -> None:
    channel = pipeline.channel
    channel.shadow_classifiers = ["heuristic"]
    channel.save(update_fields=["shadow_classifiers"])
    for n, body in enumerate(
        ["Please create a follow-up about my access.", "Please refund the double charge."]
    ):
        event = make_event(event_id=f"evt-shadow-{n}", body=body)
        pipeline.submit(event, [decision_for(event)])
    lead = make_person("leo", "ops-leads")

    log_in(page, lead, f"/qa/channels/{channel.name}/")
    expect(page.get_by_test_id("live-classifier")).to_have_text("recorded")
    page.get_by_test_id("compare-heuristic").click()
    expect(page.get_by_test_id("compared")).to_have_text("2")
    expect(page.get_by_test_id("disagreements")).to_contain_text("Billing")
    expect(page.get_by_test_id("disagreements")).to_contain_text("Straight through")
    page.screenshot(path="/tmp/shadow-comparison.png", full_page=True)  # noqa: S108
    screenshot(page, "shadow-comparison-in-words")
    page.get_by_test_id("promote").click()

    expect(page.get_by_role("status")).to_contain_text("now reads with heuristic")
    expect(page.get_by_test_id("live-classifier")).to_have_text("heuristic")
    promotion = ClassifierPromotion.objects.get()
    assert promotion.evidence["compared"] == 2 and promotion.promoted_by == lead.user
    page.get_by_test_id(f"rollback-{promotion.pk}").click()
    expect(page.get_by_role("status")).to_contain_text("reads with recorded again")
    expect(page.get_by_test_id("live-classifier")).to_have_text("recorded")
