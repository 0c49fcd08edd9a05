"""The learned classifier: trained on labelled sets with a fixed held-back part, stored as a
checksummed, versioned artifact, read with inside the pipeline like the heuristic."""

from __future__ import annotations

import csv
import hashlib
import json
import shutil
from pathlib import Path

import pytest

from automation.classifiers import training
from automation.classifiers.base import ClassifierInput, ClassifierRefused, ClassifierUnavailable
from automation.classifiers.learned import LearnedClassifier
from automation.classifiers.training import classifier_train
from automation.intake.services import channel_get_or_create, intake_submit
from automation.models import ClassificationAttempt, ClassifierModel, IntakeChannel, Run
from automation.pipeline.services import run_advance
from policy.catalogue import Catalogue, reference_catalogue
from policy.models import PolicyVersion
from tests.catalogues import activate_effects

pytestmark = pytest.mark.django_db

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "mail" / "labels.csv"
EVALUATION = SAMPLES.parents[1] / "mail-eval" / "labels.csv"


@pytest.fixture
def trained(policy: None) -> ClassifierModel:
    return classifier_train(labels=[SAMPLES]).model


def test_training_stores_a_checksummed_version_and_reports_the_held_back_part(
    policy: None,
) -> None:
    report = classifier_train(labels=[SAMPLES, EVALUATION])
    model = ClassifierModel.objects.get(pk=report.model.pk)

    artifact = bytes(model.artifact)
    assert model.checksum == hashlib.sha256(artifact).hexdigest()
    assert model.version == f"learned-{model.checksum[:12]}"
    assert model.is_active
    examples = training.examples_from(SAMPLES) + training.examples_from(EVALUATION)
    held = [e for e in examples if e.held_back]
    assert model.training_size == len(examples) - len(held) > 0
    assert set(model.categories) == {"billing", "sales", "security", "support"}
    assert model.cv_accuracy is not None and 0 < model.cv_accuracy <= 1
    # Each set's held-back quarter, the same files on every machine, never trained on.
    assert {name: f["of"] for name, f in model.held_out.items()} == {
        "mail": sum(e.source == "mail" for e in held),
        "mail-eval": sum(e.source == "mail-eval" for e in held),
    }
    assert all(0 <= f["right"] <= f["of"] for f in model.held_out.values())
    assert any(line.startswith("held back from mail-eval:") for line in report.lines())


def test_a_second_model_takes_over_and_only_one_is_active(trained: ClassifierModel) -> None:
    other = classifier_train(labels=[SAMPLES, EVALUATION]).model
    assert list(ClassifierModel.objects.filter(is_active=True)) == [other]
    assert LearnedClassifier().version == other.version


def test_a_run_read_by_the_learned_classifier_names_the_model(trained: ClassifierModel) -> None:
    channel = channel_get_or_create(name="learned-api", classifier="learned")
    assert channel.classifier_version == trained.version
    event = {
        "event_id": "evt-learned",
        "source": "web_form",
        "request_type": "billing",
        "subject": "Refund of a double charge",
        "body": "We were charged twice for invoice INV-2044. Please refund the second payment.",
        "account_tier": "standard",
        "requested_action": "send_internal_notification",
    }
    result = intake_submit(
        channel=channel, raw=json.dumps(event).encode(), content_type="application/json", source="t"
    )
    assert result.run is not None
    run_advance(run_id=result.run.pk)

    run = Run.objects.get(pk=result.run.pk)
    attempt = ClassificationAttempt.objects.get(run=run)
    assert (attempt.classifier, attempt.classifier_version) == ("learned", trained.version)
    assert run.classification is not None
    assert run.classification["category"] in trained.categories
    assert 0 < run.classification["confidence"] <= 1
    # The fields are the heuristic's extraction, with their sources.
    assert run.classification["fields"]["reference"]["value"] == "INV-2044"


def test_below_its_calibrated_confidence_it_abstains(
    trained: ClassifierModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("automation.classifiers.learned.ABSTAIN_BELOW", 1.01)
    event = ClassifierInput("api", "e-1", {"subject": "Quote", "body": "Quote for 40 seats?"})
    reading = LearnedClassifier().classify(event, 1, deadline=1.0)
    assert reading["reason_code"] == "unclear"  # policy sends an unclear reading to a person


def test_without_a_model_it_is_unavailable_and_a_damaged_one_is_refused(policy: None) -> None:
    event = ClassifierInput("api", "e-1", {"subject": "Quote", "body": "Quote please"})
    with pytest.raises(ClassifierUnavailable):
        LearnedClassifier().classify(event, 1, deadline=1.0)
    model = classifier_train(labels=[SAMPLES]).model
    ClassifierModel.objects.filter(pk=model.pk).update(artifact=b"not the model")
    training._LOADED.clear()
    with pytest.raises(ClassifierRefused):
        LearnedClassifier().classify(event, 1, deadline=1.0)


def test_a_channel_is_stamped_with_no_model_yet(policy: None) -> None:
    channel = channel_get_or_create(name="learned-new", classifier="learned")
    assert IntakeChannel.objects.get(pk=channel.pk).classifier_version == "learned-untrained"


CLAIMS = {
    "w1-kettle.eml": (
        "Kettle stopped working",
        "My kettle stopped working after a month. Warranty?",
    ),
    "w2-garantie.eml": ("Garantie", "Der Toaster ist defekt, er ist noch in der Garantie."),
    "w3-mixer.eml": ("Warranty claim", "The mixer broke within its warranty, what now?"),
}


def with_warranty_claims(folder: Path) -> Path:
    """The sample set and three labelled warranty claims. The folder's name decides which
    files are held back: named `mail-warranty`, none of the claims is, and each of the four
    types keeps at least four labels to train on."""
    folder.mkdir()
    for eml in SAMPLES.parent.glob("*.eml"):
        shutil.copy(eml, folder)
    rows = list(csv.DictReader(SAMPLES.open(encoding="utf-8")))
    for number, (name, (subject, body)) in enumerate(CLAIMS.items()):
        (folder / name).write_text(
            f"From: Kim Lee <kim@kettles.test>\nTo: requests@gatehouse.test\n"
            f"Subject: {subject}\nMessage-ID: <claim-{number}@kettles.test>\n"
            f"Content-Type: text/plain; charset=us-ascii\n\n{body}\n",
            encoding="utf-8",
        )
        rows.append({**rows[0], "file": name, "category": "warranty_claim", "note": ""})
    labels = folder / "labels.csv"
    with labels.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return labels


def warranty_business() -> Catalogue:
    data = reference_catalogue().model_dump()
    data["request_types"]["warranty_claim"] = {
        "label": "Warranty claim",
        "description": "A product that broke within its warranty.",
        "cues": {"en": ["warranty", "stopped working"], "de": ["garantie", "defekt"]},
        "default_effect": "create_follow_up",
    }
    return Catalogue.model_validate(data)


def activate_warranty_business() -> None:
    """A version whose catalogue has the warranty claim: training learns only the request
    types of the active version."""
    catalogue = warranty_business().model_dump(mode="json", exclude_none=True)
    routes = {
        **PolicyVersion.objects.get(is_active=True).parsed.routes,
        "warranty_claim": "commercial",
    }
    activate_effects({}, catalogue=catalogue, routes=routes)


def test_a_type_with_too_few_labels_is_not_learned_and_is_left_to_the_heuristic(
    policy: None, tmp_path: Path
) -> None:
    activate_warranty_business()
    labels = with_warranty_claims(tmp_path / "mail-warranty")
    claims = [e for e in training.examples_from(labels) if e.category == "warranty_claim"]
    assert len(claims) == 3 and not any(e.held_back for e in claims)
    report = classifier_train(labels=[labels])

    assert set(report.model.categories) == {"billing", "sales", "security", "support"}
    assert (
        "warranty_claim: 3 labels to train on, too few to learn (it takes 4); read by the heuristic"
    ) in report.lines()
    business = warranty_business()
    claim = {"source": "email", "subject": "Garantie", "body": "Die Waage ist defekt."}
    reading = LearnedClassifier().classify(
        ClassifierInput("email", "m-1", claim, business=business), 1, deadline=1.0
    )
    assert (reading["category"], reading["reason_code"]) == (
        "warranty_claim",
        "warranty_claim_keywords",
    )
    invoice = {"source": "email", "subject": "Invoice", "body": "Please refund invoice 4471."}
    reading = LearnedClassifier().classify(
        ClassifierInput("email", "m-2", invoice, business=business), 1, deadline=1.0
    )
    assert reading["category"] in report.model.categories  # the model's own reading
    assert reading["reason_code"] in ("unclear", f"{reading['category']}_learned")


def test_training_needs_two_types_with_enough_labels(policy: None, tmp_path: Path) -> None:
    activate_warranty_business()
    folder = tmp_path / "mail-warranty"
    labels = with_warranty_claims(folder)
    rows = [r for r in csv.DictReader(labels.open(encoding="utf-8"))]
    kept = [r for r in rows if r["category"] in ("sales", "warranty_claim")]
    with labels.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(kept)
    with pytest.raises(training.TrainingError) as refused:
        classifier_train(labels=[labels])
    assert "warranty_claim: 3 labels to train on, too few to learn" in str(refused.value)
