"""evaluate_classifier: accuracy and the share sent to people, measured without side effects."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from audit.models import AuditEvent
from automation.classifiers.training import classifier_train
from automation.intake.services import MAIL_TYPE, channel_get_or_create, intake_submit
from automation.mail import parse_message
from automation.models import Customer, IntakeChannel, IntakeRecord, Run
from policy.catalogue import reference_catalogue
from policy.models import PolicyVersion
from policy.services import policy_ensure_defaults
from tests.catalogues import activate_effects
from tests.conftest import Pipeline

MAIL = Path(__file__).resolve().parents[2] / "data" / "mail"
QUOTE = "01-quote-request-northwind.eml"
SUPPORT = {
    "type": "decision",
    "value": {
        "category": "support",
        "recommended_route": "service_desk",
        "requested_effect": "create_follow_up",
        "reason_code": "support_request",
    },
}
HEADER = (
    "file,category,effect,customer_reference,thread_parent,expected_intake,extraction_problem,note"
)


def labelled_set(tmp_path: Path, rows: list[str]) -> Path:
    for row in rows:
        name = row.split(",")[0]
        shutil.copy(MAIL / name, tmp_path / name)
    shutil.copy(MAIL / "customers.csv", tmp_path / "customers.csv")
    labels = tmp_path / "labels.csv"
    labels.write_text("\n".join([HEADER, *rows]) + "\n", encoding="utf-8")
    return labels


def evaluate(labels: Path, *args: str) -> str:
    out = io.StringIO()
    call_command("evaluate_classifier", str(labels), *args, stdout=out)
    return out.getvalue()


@pytest.mark.django_db
def test_accuracy_and_the_share_sent_to_people_are_counted(tmp_path: Path) -> None:
    labels = labelled_set(
        tmp_path,
        [
            # Read right, executed straight through.
            "01-quote-request-northwind.eml,sales,create_follow_up,CUST-10001,,new,,",
            # Labelled wrong on purpose: the reader says support/create_follow_up.
            "15-sso-login-error-500-oakmoor.eml,billing,send_internal_notification,,,new,,",
            # A security review needs an approver under policy-1: sent to a person.
            "17-suspicious-signins-northwind.eml,security,queue_account_review,,,new,,",
            # An unreadable amount: held for correction, the labelled problem is caught.
            "26-invoice-garbled-amount-northwind.eml,billing,send_internal_notification,,,new,amount,",
            "34-not-an-email.eml,,,,,invalid,,",
        ],
    )

    report = json.loads(evaluate(labels, "--json"))

    assert report["messages"] == 4
    assert report["left_out"] == {"invalid": 1}
    assert report["category_accuracy"] == 0.75
    assert report["effect_accuracy"] == 0.75
    assert report["routed_to_people"] == 0.5
    assert report["destinations"] == {
        "straight_through": 2,
        "approval": 1,
        "extraction_invalid": 1,
    }
    assert report["extraction_problems_caught"] == [1, 1]
    text = evaluate(labels)
    assert "category accuracy: 3/4 = 75.0%" in text
    assert "routed to people: 2/4 = 50.0%" in text
    assert "labelled Billing, read as Support: 1" in text

    # The figures that say whether the reading can be trusted.
    assert report["per_category"]["security"]["recall"] == 1.0
    assert report["per_category"]["security"]["straight_through"] == 0  # it waited for approval
    assert "run straight through by category: Billing 1/2, Sales 1/1, Security 0/1" in text
    assert report["wrong_among_straight_through"] == [1, 2]  # 15 ran through, read wrong
    assert report["wrong_readings_straight_through"] == [1, 1]
    assert report["per_category"]["billing"] == {
        "labelled": 2,
        "read": 1,
        "precision": 1.0,
        "recall": 0.5,
        "straight_through": 1,
    }
    assert report["per_category"]["support"]["precision"] == 0.0  # its one reading was wrong
    bands = report["reliability"]
    assert sum(band["readings"] for band in bands) == 4  # every reading has its confidence
    assert sum(band["right"] for band in bands) == 3  # all but 15: category and effect
    assert "recall by category: Billing 1/2, Sales 1/1, Security 1/1" in text
    assert "read wrong among those run straight through: 1/2 = 50.0%" in text


@pytest.mark.django_db
def test_two_classifiers_are_compared_on_the_same_set(tmp_path: Path) -> None:
    labels = labelled_set(
        tmp_path,
        [
            "01-quote-request-northwind.eml,sales,create_follow_up,CUST-10001,,new,,",
            "17-suspicious-signins-northwind.eml,security,queue_account_review,,,new,,",
        ],
    )

    figures = json.loads(evaluate(labels, "--compare", "heuristic", "recorded", "--json"))

    assert figures["heuristic"]["security recall"] == "1/1 = 100.0%"
    assert figures["heuristic"]["security run straight through"] == "0/1 = 0.0%"
    assert figures["heuristic"]["category accuracy"] == "2/2 = 100.0%"
    # Nothing recorded for these messages: the recorded classifier reads nothing, which is
    # counted as no reading, not as two wrong ones.
    assert figures["recorded"]["category accuracy"] == "0/0"
    assert figures["recorded"]["no reading at all"] == "2"
    assert figures["heuristic"]["no reading at all"] == "0"
    table = evaluate(labels, "--compare", "heuristic", "recorded")
    assert "heuristic-3" in table and "recorded-classifier-1" in table
    assert Run.objects.count() == 0  # both evaluations left nothing behind


@pytest.mark.django_db
def test_an_evaluation_leaves_nothing_behind(tmp_path: Path) -> None:
    labels = labelled_set(
        tmp_path, ["01-quote-request-northwind.eml,sales,create_follow_up,,,new,,"]
    )
    audit_before = AuditEvent.objects.count()

    evaluate(labels)

    assert Run.objects.count() == IntakeRecord.objects.count() == 0
    assert IntakeChannel.objects.count() == Customer.objects.count() == 0
    assert AuditEvent.objects.count() == audit_before


@pytest.mark.django_db
def test_messages_already_taken_in_are_read_again_not_answered_as_duplicates(
    tmp_path: Path,
) -> None:
    # E-mail identity is shared by every channel that takes real mail; an evaluation keeps
    # its own, so a message the mailbox already holds is read again, not answered with the
    # reading the mailbox's run was given (here a recorded "support").
    labels = labelled_set(tmp_path, [f"{QUOTE},sales,create_follow_up,,,new,,"])
    policy_ensure_defaults()
    mailbox = Pipeline(channel_get_or_create(name="email", classifier="recorded"))
    raw = (tmp_path / QUOTE).read_bytes()
    mailbox.record(parse_message(raw).event_id, [SUPPORT])
    with mailbox.capture():
        intake_submit(channel=mailbox.channel, raw=raw, content_type=MAIL_TYPE, source="file:q")
    mailbox.drain()
    assert Run.objects.get().category == "support"

    report = json.loads(evaluate(labels, "--json"))

    assert (report["messages"], report["category_accuracy"]) == (1, 1.0)
    assert Run.objects.count() == 1


@pytest.mark.django_db
def test_the_whole_sample_set_is_evaluated(tmp_path: Path) -> None:
    report = json.loads(evaluate(MAIL / "labels.csv", "--json"))

    rows = (MAIL / "labels.csv").read_text(encoding="utf-8").splitlines()[1:]
    assert report["messages"] == sum(",new," in row for row in rows)
    assert report["classifier_version"] == "heuristic-3"
    assert 0.0 < report["category_accuracy"] <= 1.0
    assert sum(report["destinations"].values()) == report["messages"]


@pytest.mark.django_db
def test_a_labels_file_without_its_columns_is_refused(tmp_path: Path) -> None:
    labels = tmp_path / "labels.csv"
    labels.write_text("name,kind\n", encoding="utf-8")
    with pytest.raises(CommandError, match="missing columns"):
        evaluate(labels)


@pytest.mark.django_db
def test_the_evaluation_of_the_learned_reader_names_the_types_it_did_not_learn(
    tmp_path: Path,
) -> None:
    policy_ensure_defaults()
    classifier_train(labels=[MAIL / "labels.csv"])
    catalogue = json.loads(json.dumps(reference_catalogue().model_dump(mode="json")))
    catalogue["request_types"]["warranty_claim"] = {
        "label": "Warranty claim",
        "description": "A product that broke within its warranty.",
        "cues": {"en": ["warranty"]},
    }
    routes = {**PolicyVersion.objects.get(is_active=True).parsed.routes}
    activate_effects({}, catalogue=catalogue, routes={**routes, "warranty_claim": "service_desk"})
    labels = labelled_set(tmp_path, [f"{QUOTE},sales,create_follow_up,CUST-10001,,new,,"])

    report = json.loads(evaluate(labels, "--classifier", "learned", "--json"))
    text = evaluate(labels, "--classifier", "learned")

    assert report["not_learned"] == ["warranty_claim"]
    assert "not learned by the model (too few labels), read by the heuristic: Warranty claim" in (
        text
    )
