"""Labelled sets uploaded in the console, measured and trained on, for a business of the
tests' own (a veterinary clinic): its types are learned from its labels only."""

from __future__ import annotations

import io
import zipfile

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from audit.models import AuditAction, AuditEvent
from automation.classifiers import get_classifier
from automation.classifiers.base import ClassifierInput
from automation.classifiers.labelled import (
    MAX_FILE_BYTES,
    LabelledSetRefused,
    labelled_set_folder,
    labelled_set_remove,
    labelled_set_upload,
)
from automation.classifiers.learned import LearnedClassifier
from automation.classifiers.training import TrainingError, classifier_train
from automation.models import (
    ClassifierModel,
    ClassifierTraining,
    EvaluationStatus,
    IntakeChannel,
    LabelledExample,
    LabelledSet,
    LabelledSetEvaluation,
    LabelledSetStatus,
)
from automation.pipeline.evaluation import labelled_set_evaluation_start
from automation.pipeline.shadow import classifier_promote, classifier_training_start
from automation.tasks import evaluate_labelled_set, train_into_shadow
from core.errors import ServiceError
from policy.services import policy_business
from tests.automation.vet_clinic import (
    LABELS,
    TYPES,
    WRITES,
    activate_vet_clinic,
    vet_mail,
    vet_rows,
    vet_zip,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def vet(policy: None) -> None:
    activate_vet_clinic()


def upload(user: User, raw: bytes, name: str = "march") -> LabelledSet:
    return labelled_set_upload(name=name, filename=f"{name}.zip", raw=raw, user=user).labelled_set


def refusal(user: User, raw: bytes) -> str:
    """Why the upload was refused: kept as it came, with its problems, and nothing read."""
    with pytest.raises(LabelledSetRefused) as refused:
        upload(user, raw)
    assert not LabelledExample.objects.exists()
    kept = LabelledSet.objects.get()
    assert (kept.status, bytes(kept.raw)) == (LabelledSetStatus.REFUSED, raw)
    assert kept.problems == refused.value.problems
    kept.delete()
    return str(refused.value)


def test_a_set_is_stored_with_its_bytes_and_its_rows(vet: None, ops_lead: User) -> None:
    raw = vet_zip()
    stored = upload(ops_lead, raw)

    assert bytes(stored.raw) == raw
    assert stored.examples.count() == 4 * 8
    example = stored.examples.get(file="invoice_question-milo.eml")
    assert (example.category, example.line) == ("invoice_question", 2 + 8 * 2 + 1)
    assert b"consultation fee twice" in bytes(example.message)
    assert AuditEvent.objects.filter(action=AuditAction.LABELLED_SET_UPLOADED).count() == 1
    with labelled_set_folder(set_id=stored.pk) as labels:
        folder = labels.parent
        assert (folder / "invoice_question-milo.eml").read_bytes() == bytes(example.message)
    assert not folder.exists()


def test_a_type_of_the_business_is_learned_from_its_stored_labels(
    vet: None, ops_lead: User, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = vet_rows()
    # A row of a type the clinic does not have: stored, counted, never learned.
    grooming = row("grooming.eml", category="grooming")
    rows.append((grooming, vet_mail("appointment", "Rex")))
    stored = labelled_set_upload(name="march", filename="m.zip", raw=vet_zip(rows), user=ops_lead)
    assert stored.not_a_type == {"grooming": 1}

    call_command("train_classifier")  # no files: the sets stored for the business

    model = ClassifierModel.objects.get(is_active=True)
    assert model.sources == ["march"]  # never the repository's sample mail
    assert sorted(model.categories) == sorted(TYPES)
    printed = capsys.readouterr().out
    assert "grooming: 1 labelled, not a request type of the active version; left out" in printed
    business = policy_business(name=None)
    for kind in TYPES:  # a message of each type it was not trained on reads as that type
        subject, body = WRITES[kind]
        unseen = {
            "source": "email",
            "subject": subject.format(pet="Pepper"),
            "body": body.format(pet="Pepper"),
        }
        reading = LearnedClassifier().classify(
            ClassifierInput("email", f"unseen-{kind}", unseen, business=business), 1, deadline=1.0
        )
        assert reading["category"] == kind, reading


def test_train_classifier_without_files_and_without_sets_says_so(vet: None) -> None:
    with pytest.raises(TrainingError, match="no labelled set is stored"):
        classifier_train()


def test_the_console_trains_a_new_version_into_shadow_and_leaves_the_live_reader(
    vet: None, ops_lead: User
) -> None:
    upload(ops_lead, vet_zip())
    channel = IntakeChannel.objects.create(
        name="clinic-mail", classifier="heuristic", classifier_version="heuristic-3"
    )

    training = classifier_training_start(channel_id=channel.pk, people=False, user=ops_lead)
    assert training.status == EvaluationStatus.QUEUED
    assert train_into_shadow(training.pk) == EvaluationStatus.DONE
    assert train_into_shadow(training.pk) == "already taken"  # a message sent twice

    training.refresh_from_db()
    version = training.version
    assert sorted(training.result["categories"]) == sorted(TYPES)
    channel.refresh_from_db()
    assert channel.classifier == "heuristic"
    assert channel.shadow_classifiers == [version]
    assert not ClassifierModel.objects.get(version=version).is_active
    assert get_classifier(version).version == version  # the shadow reads with that model
    classifier_promote(channel_id=channel.pk, classifier=version, user=ops_lead, evidence={})
    channel.refresh_from_db()
    assert (channel.classifier, channel.classifier_version) == (version, version)
    assert channel.shadow_classifiers == ["heuristic"]


def test_only_whoever_may_change_channels_uploads_or_trains(
    vet: None, ops_lead: User, approver: User
) -> None:
    with pytest.raises(PermissionDenied):
        upload(approver, vet_zip())
    stored = upload(ops_lead, vet_zip())
    channel = IntakeChannel.objects.create(name="clinic-mail", classifier="heuristic")
    with pytest.raises(PermissionDenied):
        classifier_training_start(channel_id=channel.pk, people=False, user=approver)
    with pytest.raises(PermissionDenied):
        labelled_set_remove(set_id=stored.pk, user=approver)
    with pytest.raises(PermissionDenied):
        labelled_set_evaluation_start(set_id=stored.pk, classifier="heuristic", user=approver)


def test_an_upload_that_is_no_zip_is_refused(vet: None, ops_lead: User) -> None:
    assert "not a readable .zip file" in refusal(ops_lead, b"file,category\nx.eml,sales\n")


def row(file: str, category: str = "appointment") -> dict[str, str]:
    return {"file": file, "category": category, "effect": "", "expected_intake": "new"}


def test_a_row_naming_a_missing_file_is_refused_with_its_line(vet: None, ops_lead: User) -> None:
    raw = vet_zip(vet_rows(per_type=2), more_rows=[row("lost.eml")], folder="")
    assert "line 10: lost.eml is not in the zip" in refusal(ops_lead, raw)


def test_bad_rows_are_each_named_and_nothing_is_written(vet: None, ops_lead: User) -> None:
    more = [row(""), row("appointment-bella.eml"), row("../up.eml"), row("x.eml", category="")]
    said = refusal(ops_lead, vet_zip(vet_rows(per_type=1), more_rows=more))
    assert "line 6: names no file" in said
    assert "line 7: appointment-bella.eml is named twice (first on line 2)" in said
    assert "line 8: ../up.eml is a path outside the set" in said
    assert "line 9: x.eml is a new request without a category" in said


def test_a_path_outside_the_set_is_refused(vet: None, ops_lead: User) -> None:
    said = refusal(ops_lead, vet_zip(extra={"../outside.eml": b"x"}))
    assert "../outside.eml: a path outside the set" in said


def test_a_zip_bomb_is_refused_by_its_expanded_size(vet: None, ops_lead: User) -> None:
    rows = vet_rows(per_type=1)
    bomb = b"\0" * (MAX_FILE_BYTES + 1)  # a few kilobytes zipped
    rows[0] = (rows[0][0], bomb)
    raw = vet_zip(rows)
    assert len(raw) < 100_000
    assert "is larger than 5 MB" in refusal(ops_lead, raw)


def test_a_zip_without_labels_or_columns_is_refused(vet: None, ops_lead: User) -> None:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("one.eml", vet_mail("appointment", "Bella"))
    assert "the zip holds no labels.csv" in refusal(ops_lead, out.getvalue())
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("labels.csv", "file,category\none.eml,appointment\n")
    assert "missing columns effect, expected_intake" in refusal(ops_lead, out.getvalue())


def test_a_name_is_one_set_and_a_refused_upload_does_not_hold_it(vet: None, ops_lead: User) -> None:
    with pytest.raises(LabelledSetRefused):
        upload(ops_lead, b"not a zip")
    stored = upload(ops_lead, vet_zip(vet_rows(per_type=1)))
    assert stored.status == LabelledSetStatus.READ
    with pytest.raises(LabelledSetRefused, match="a set named march is stored already") as taken:
        upload(ops_lead, vet_zip(vet_rows(per_type=1)))
    assert taken.value.field == "name"
    assert LabelledSet.objects.filter(name="march").count() == 2  # the refused one and the set
    with pytest.raises(ServiceError, match="was refused"):
        labelled_set_evaluation_start(
            set_id=LabelledSet.objects.get(status=LabelledSetStatus.REFUSED).pk,
            classifier="heuristic",
            user=ops_lead,
        )


def test_a_reader_is_measured_per_request_type_in_the_business_words(
    vet: None, ops_lead: User
) -> None:
    stored = upload(ops_lead, vet_zip(vet_rows(per_type=2)))
    evaluation = labelled_set_evaluation_start(
        set_id=stored.pk, classifier="heuristic", user=ops_lead
    )
    assert evaluation.status == EvaluationStatus.QUEUED

    assert evaluate_labelled_set(evaluation.pk) == EvaluationStatus.DONE
    assert evaluate_labelled_set(evaluation.pk) == "already taken"  # a message sent twice

    report = LabelledSetEvaluation.objects.get(pk=evaluation.pk).report
    assert report["messages"] == 8
    per_type = {row["type"]: row for row in report["per_type"]}
    assert {row["label"] for row in per_type.values()} == set(LABELS.values())
    for row in per_type.values():
        assert row["messages"] == 2
        assert row["right"] + sum(row["read_as"].values()) == 2
        assert 0 <= row["to_people"] <= 2
    assert (
        not LabelledSet.objects.get(pk=stored.pk)
        .evaluations.exclude(status=EvaluationStatus.DONE)
        .exists()
    )


def test_removing_a_set_removes_its_messages_and_keeps_its_models(
    vet: None, ops_lead: User
) -> None:
    stored = upload(ops_lead, vet_zip())
    model = classifier_train().model
    assert labelled_set_remove(set_id=stored.pk, user=ops_lead) == "march"
    assert not LabelledExample.objects.exists()
    assert ClassifierModel.objects.filter(pk=model.pk).exists()


def test_the_console_pages_upload_measure_and_train_in_words(
    vet: None, ops_lead: User, client: Client
) -> None:
    client.force_login(ops_lead)
    sent = SimpleUploadedFile("march.zip", vet_zip(), content_type="application/zip")
    answer = client.post(reverse("quality:reading_upload"), {"name": "march", "upload": sent})
    stored = LabelledSet.objects.get(name="march")
    assert answer.url == reverse("quality:reading_set", kwargs={"set_id": stored.pk})
    page = client.get(answer.url).content.decode()
    assert "Prescription refill" in page and "32 rows stored" in page

    channel = IntakeChannel.objects.create(name="clinic-mail", classifier="heuristic")
    answer = client.post(reverse("quality:reading_train"), {"channel": str(channel.pk)})
    training = ClassifierTraining.objects.get()
    assert answer.url == reverse("quality:reading_training", kwargs={"training_id": training.pk})
    assert "A worker is training it" in client.get(answer.url).content.decode()
    train_into_shadow(training.pk)  # the worker
    page = client.get(answer.url).content.decode()
    assert "Trained on 24 messages" in page and "Medical records transfer" in page
    version = IntakeChannel.objects.get(pk=channel.pk).shadow_classifiers[0]
    assert f"<code>{version}</code>, reads clinic-mail in shadow" in page

    answer = client.post(
        reverse("quality:reading_evaluate", kwargs={"set_id": stored.pk}), {"classifier": version}
    )
    evaluation = LabelledSetEvaluation.objects.get()
    assert evaluation.classifier == version  # a trained model, chosen by its version
    assert answer.url == reverse(
        "quality:reading_evaluation", kwargs={"evaluation_id": evaluation.pk}
    )


def test_a_refused_upload_is_named_at_its_field(vet: None, ops_lead: User, client: Client) -> None:
    client.force_login(ops_lead)
    sent = SimpleUploadedFile("march.zip", b"not a zip")
    answer = client.post(reverse("quality:reading_upload"), {"name": "march", "upload": sent})
    assert answer.status_code == 400
    assert "not a readable .zip file" in answer.content.decode()
    assert 'value="march"' in answer.content.decode()
    assert LabelledSet.objects.get().status == LabelledSetStatus.REFUSED
    assert not LabelledExample.objects.exists()
