"""Policy versions: validated before they are stored, immutable once stored, one active."""

from __future__ import annotations

import threading
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.management import CommandError, call_command
from django.db import IntegrityError, connection, connections, transaction
from django.test.utils import CaptureQueriesContext

from accounts.roles import roles_ensure
from policy import models as policy_models
from policy.models import PolicyVersion, parsed_version
from policy.schemas import PolicyDocument
from policy.services import (
    DEFAULTS_DIR,
    PolicyError,
    parse_policy_text,
    policy_ensure_defaults,
    policy_get,
    policy_load_file,
    policy_version_activate,
    policy_version_create,
    shipped,
)

POLICY_1_PATH = DEFAULTS_DIR / "policy-1.yaml"
SHIPPED = len(shipped(first="policy-1"))  # the reference policy and the safe default


def policy_1_data() -> dict[str, Any]:
    return yaml.safe_load(POLICY_1_PATH.read_text(encoding="utf-8"))


def document(**changes: Any) -> PolicyDocument:
    """policy-1 with some keys replaced."""
    return PolicyDocument.model_validate({**policy_1_data(), **changes})


def write_policy(tmp_path: Path, data: dict[str, Any], name: str = "policy.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def active_names() -> list[str]:
    return list(PolicyVersion.objects.filter(is_active=True).values_list("name", flat=True))


def load_policy(*args: str) -> str:
    out = StringIO()
    call_command("load_policy", *args, stdout=out)
    return out.getvalue()


# --- loading --------------------------------------------------------------------------------


@pytest.mark.django_db
def test_ensure_defaults_stores_policy_1_and_activates_it() -> None:
    versions = policy_ensure_defaults()

    expected = parse_policy_text(POLICY_1_PATH.read_text(encoding="utf-8"))
    # The reference policy first (active), then the safe default for new installations.
    assert [v.name for v in versions] == ["policy-1", "default-1"]
    assert not PolicyVersion.objects.get(name="default-1").is_active
    stored = PolicyVersion.objects.get(name="policy-1")
    assert stored.is_active
    assert stored.activated_at is not None
    assert stored.checksum == expected.checksum()
    assert len(stored.checksum) == 64
    assert stored.note == "Reference policy of the synthetic case set."
    assert stored.parsed == expected
    assert stored.parent is None
    assert policy_get(name=None) == stored


@pytest.mark.django_db
def test_ensure_defaults_twice_is_a_no_op() -> None:
    first = policy_ensure_defaults()
    activated_at = PolicyVersion.objects.get(name="policy-1").activated_at

    second = policy_ensure_defaults()

    assert [v.pk for v in second] == [v.pk for v in first]
    assert PolicyVersion.objects.count() == SHIPPED
    assert PolicyVersion.objects.get(name="policy-1").activated_at == activated_at


@pytest.mark.django_db
def test_loading_the_same_file_twice_stores_one_version(tmp_path: Path) -> None:
    path = write_policy(tmp_path, policy_1_data())

    first, created_first = policy_load_file(path=path, activate=False)
    second, created_second = policy_load_file(path=path, activate=False)

    assert (created_first, created_second) == (True, False)
    assert second.pk == first.pk
    assert second.checksum == first.checksum
    assert PolicyVersion.objects.count() == 1


@pytest.mark.django_db
def test_same_document_in_other_spelling_has_the_same_checksum(tmp_path: Path) -> None:
    policy_ensure_defaults()
    # Key order, comments and flow style are not part of the document.
    data = policy_1_data()
    reordered = dict(reversed(list(data.items())))
    path = tmp_path / "respelled.yaml"
    path.write_text(
        "# the same rules, written differently\n"
        + yaml.safe_dump(reordered, default_flow_style=True, sort_keys=False)
    )

    version, created = policy_load_file(path=path, activate=False)

    assert created is False
    assert version.checksum == PolicyVersion.objects.get(name="policy-1").checksum
    assert PolicyVersion.objects.count() == SHIPPED


@pytest.mark.django_db
def test_different_document_under_an_existing_version_name_is_refused() -> None:
    policy_ensure_defaults()
    changed = document(routes={**policy_1_data()["routes"], "support": "finance"})

    with pytest.raises(PolicyError, match="policy-1 already exists with different content"):
        policy_version_create(document=changed)

    stored = PolicyVersion.objects.get(name="policy-1")
    assert stored.parsed.routes["support"] == "service_desk"
    assert PolicyVersion.objects.count() == SHIPPED


@pytest.mark.django_db
def test_a_changed_note_is_a_different_document() -> None:
    policy_ensure_defaults()

    with pytest.raises(PolicyError, match="already exists"):
        policy_version_create(document=document(note="edited in place"))


@pytest.mark.django_db
def test_new_version_records_the_active_one_as_parent_and_author(django_user_model: Any) -> None:
    policy_ensure_defaults()
    roles_ensure()  # the groups its approval rules name: a person's version names real ones
    author = django_user_model.objects.create_user(username="author")

    version, created = policy_version_create(
        document=document(version="policy-2", note="second"), author=author
    )

    assert created
    assert version.parent is not None
    assert version.parent.name == "policy-1"
    assert version.author == author
    assert version.note == "second"
    assert version.is_active is False
    assert active_names() == ["policy-1"]


# --- validation -----------------------------------------------------------------------------


def _without(key: str) -> dict[str, Any]:
    data = policy_1_data()
    del data[key]
    return data


INVALID_DOCUMENTS = {
    "routes missing": (_without("routes"), "routes"),
    "routes empty": ({**policy_1_data(), "routes": {}}, "routes"),
    "version missing": (_without("version"), "version"),
    "allowed_effects empty": ({**policy_1_data(), "allowed_effects": []}, "allowed_effects"),
    "approval for an effect not allowed": (
        {
            **policy_1_data(),
            "approvals": {"delete_account": {"group": "security-approvers"}},
        },
        "approvals",
    ),
    "approval without group": (
        {**policy_1_data(), "approvals": {"queue_account_review": {"approvers": 1}}},
        "approvals.queue_account_review.group",
    ),
    "approvers zero": (
        {
            **policy_1_data(),
            "approvals": {"queue_account_review": {"group": "security-approvers", "approvers": 0}},
        },
        "approvals.queue_account_review.approvers",
    ),
    "confidence default above 1": (
        {**policy_1_data(), "confidence": {"default": 1.5}},
        "confidence.default",
    ),
    "confidence per category below 0": (
        {**policy_1_data(), "confidence": {"per_category": {"billing": -0.1}}},
        "confidence.per_category.billing",
    ),
    "unknown top-level key": ({**policy_1_data(), "spending_caps": {}}, "spending_caps"),
    "unknown approval key": (
        {
            **policy_1_data(),
            "approvals": {"queue_account_review": {"group": "security-approvers", "quorum": 2}},
        },
        "approvals.queue_account_review.quorum",
    ),
    "effect allowed twice": (
        {
            **policy_1_data(),
            "allowed_effects": [*policy_1_data()["allowed_effects"], "create_follow_up"],
        },
        "allowed_effects",
    ),
}


@pytest.mark.parametrize(
    ("data", "field"), list(INVALID_DOCUMENTS.values()), ids=list(INVALID_DOCUMENTS)
)
def test_invalid_document_is_refused_naming_the_field(data: dict[str, Any], field: str) -> None:
    with pytest.raises(PolicyError) as caught:
        parse_policy_text(yaml.safe_dump(data))

    assert field in str(caught.value)


def test_approvals_naming_an_unallowed_effect_names_the_effect() -> None:
    data = {**policy_1_data(), "approvals": {"delete_account": {"group": "security-approvers"}}}

    with pytest.raises(
        PolicyError, match="approvals name effects that are not allowed: delete_account"
    ):
        parse_policy_text(yaml.safe_dump(data))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("version: policy-x\nroutes: [unclosed\n", "not valid YAML"),
        ("version: 'unterminated\n", "not valid YAML"),
        ("- just\n- a list\n", "mapping"),
        ("", "mapping"),
        ("just a string", "mapping"),
    ],
)
def test_text_that_is_not_a_yaml_mapping_is_refused(text: str, message: str) -> None:
    with pytest.raises(PolicyError, match=message):
        parse_policy_text(text)


@pytest.mark.django_db
def test_invalid_file_stores_nothing(tmp_path: Path) -> None:
    path = write_policy(tmp_path, {**policy_1_data(), "confidence": {"default": 1.5}})

    with pytest.raises(PolicyError, match=r"confidence\.default"):
        policy_load_file(path=path, activate=True)

    assert PolicyVersion.objects.count() == 0


# --- immutability ---------------------------------------------------------------------------


@pytest.mark.django_db
def test_saving_a_stored_version_again_is_refused() -> None:
    policy_ensure_defaults()
    version = PolicyVersion.objects.get(name="policy-1")
    version.document = {**version.document, "routes": {"support": "finance"}}

    with pytest.raises(ValueError, match="immutable"):
        version.save()
    with pytest.raises(ValueError, match="immutable"):
        version.save(update_fields=["document"])
    with pytest.raises(ValueError, match="immutable"):
        version.save(update_fields=["is_active", "checksum"])

    assert PolicyVersion.objects.get(name="policy-1").parsed.routes["support"] == "service_desk"


@pytest.mark.django_db
def test_only_activation_fields_can_be_saved() -> None:
    policy_ensure_defaults()
    version = PolicyVersion.objects.get(name="policy-1")
    checksum = version.checksum
    version.note = "rewritten"  # not in update_fields: never written
    version.is_active = False
    version.activated_at = None

    version.save(update_fields=["is_active", "activated_at"])

    stored = PolicyVersion.objects.get(name="policy-1")
    assert stored.is_active is False
    assert stored.activated_at is None
    assert stored.note == "Reference policy of the synthetic case set."
    assert stored.checksum == checksum


# --- activation -----------------------------------------------------------------------------


@pytest.mark.django_db
def test_activating_policy_2_deactivates_policy_1() -> None:
    policy_ensure_defaults()
    policy_version_create(document=document(version="policy-2"))

    activated = policy_version_activate(name="policy-2")

    assert activated.name == "policy-2"
    assert active_names() == ["policy-2"]
    assert PolicyVersion.objects.get(name="policy-2").activated_at is not None
    assert PolicyVersion.objects.get(name="policy-1").is_active is False
    assert policy_get(name=None).name == "policy-2"
    # The old version is still there, unchanged, for runs it decided.
    assert policy_get(name="policy-1").parsed == parse_policy_text(POLICY_1_PATH.read_text())


@pytest.mark.django_db
def test_activating_the_active_version_changes_nothing() -> None:
    policy_ensure_defaults()
    before = PolicyVersion.objects.get(name="policy-1").activated_at

    policy_version_activate(name="policy-1")

    assert active_names() == ["policy-1"]
    assert PolicyVersion.objects.get(name="policy-1").activated_at == before


@pytest.mark.django_db
def test_activating_back_and_forth_keeps_one_active() -> None:
    policy_ensure_defaults()
    policy_version_create(document=document(version="policy-2"))

    for name in ["policy-2", "policy-1", "policy-2"]:
        policy_version_activate(name=name)
        assert active_names() == [name]


@pytest.mark.django_db
def test_activating_an_unknown_version_fails_and_keeps_the_active_one() -> None:
    policy_ensure_defaults()

    with pytest.raises(PolicyVersion.DoesNotExist):
        policy_version_activate(name="policy-9")

    assert active_names() == ["policy-1"]


@pytest.mark.django_db
def test_load_file_activates_only_when_asked_or_when_nothing_is_active(tmp_path: Path) -> None:
    first = write_policy(tmp_path, policy_1_data(), "one.yaml")
    second = write_policy(tmp_path, {**policy_1_data(), "version": "policy-2"}, "two.yaml")
    third = write_policy(tmp_path, {**policy_1_data(), "version": "policy-3"}, "three.yaml")

    assert policy_load_file(path=first, activate=False)[0].is_active  # nothing was active
    assert not policy_load_file(path=second, activate=False)[0].is_active
    assert policy_load_file(path=third, activate=True)[0].is_active

    assert active_names() == ["policy-3"]


@pytest.mark.django_db
def test_database_refuses_a_second_active_version() -> None:
    policy_ensure_defaults()
    version, _ = policy_version_create(document=document(version="policy-2"))
    version.is_active = True

    with pytest.raises(IntegrityError), transaction.atomic():
        version.save(update_fields=["is_active"])

    assert active_names() == ["policy-1"]


# --- the management command -----------------------------------------------------------------


@pytest.mark.django_db
def test_load_policy_command_loads_the_defaults_and_prints_the_version() -> None:
    out = load_policy()

    # On a new installation the safe default becomes active; the reference is stored beside it.
    default = PolicyVersion.objects.get(name="default-1").checksum[:12]
    reference = PolicyVersion.objects.get(name="policy-1").checksum[:12]
    assert out == (
        f"default-1: stored, checksum {default} (active)\npolicy-1: stored, checksum {reference}\n"
    )
    assert load_policy() == (
        f"default-1: already stored, checksum {default} (active)\n"
        f"policy-1: already stored, checksum {reference}\n"
    )


@pytest.mark.django_db
def test_load_policy_activate_without_files_makes_the_safe_default_active() -> None:
    policy_ensure_defaults()
    assert active_names() == ["policy-1"]

    load_policy("--activate")

    assert active_names() == ["default-1"]


def test_every_shipped_policy_is_named_after_its_version() -> None:
    for path in shipped(first="policy-1"):
        assert parse_policy_text(path.read_text(encoding="utf-8")).version == path.stem


@pytest.mark.django_db
def test_load_policy_command_stores_and_activates_a_file(tmp_path: Path) -> None:
    policy_ensure_defaults()
    path = write_policy(tmp_path, {**policy_1_data(), "version": "policy-2"})

    stored = load_policy(str(path))
    assert stored.startswith("policy-2: stored, checksum ")
    assert "(active)" not in stored
    assert active_names() == ["policy-1"]

    activated = load_policy(str(path), "--activate")
    assert activated.startswith("policy-2: already stored, checksum ")
    assert activated.rstrip().endswith("(active)")
    assert active_names() == ["policy-2"]


@pytest.mark.django_db
def test_load_policy_command_refuses_an_invalid_file(tmp_path: Path) -> None:
    path = write_policy(tmp_path, _without("routes"), "broken.yaml")

    with pytest.raises(CommandError) as caught:
        load_policy(str(path))

    assert "broken.yaml" in str(caught.value)
    assert "routes" in str(caught.value)
    assert PolicyVersion.objects.count() == 0


@pytest.mark.django_db
def test_load_policy_command_refuses_a_changed_document_under_an_old_name(
    tmp_path: Path,
) -> None:
    policy_ensure_defaults()
    path = write_policy(tmp_path, {**policy_1_data(), "note": "changed"})

    with pytest.raises(CommandError, match="policy-1 already exists"):
        load_policy(str(path))


@pytest.mark.django_db
def test_load_policy_command_refuses_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match=r"missing\.yaml"):
        load_policy(str(tmp_path / "missing.yaml"))


# --- concurrency ----------------------------------------------------------------------------


def _activate_in_threads(names: list[str]) -> dict[str, BaseException | None]:
    barrier = threading.Barrier(len(names))
    results: dict[str, BaseException | None] = {}

    def activate(name: str) -> None:
        try:
            barrier.wait(timeout=10)
            policy_version_activate(name=name)
            results[name] = None
        except BaseException as exc:
            results[name] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=activate, args=(name,)) for name in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    return results


@pytest.mark.django_db(transaction=True)
def test_two_activations_at_the_same_moment_leave_exactly_one_active() -> None:
    policy_ensure_defaults()
    policy_version_create(document=document(version="policy-2"))
    policy_version_create(document=document(version="policy-3"))

    results = _activate_in_threads(["policy-2", "policy-3"])

    active = active_names()
    assert len(active) == 1
    assert active[0] in {"policy-2", "policy-3"}
    assert results[active[0]] is None  # the activation that won returned normally
    assert PolicyVersion.objects.get(name="policy-1").is_active is False


def _waiting_on_locks() -> int:
    with connections["default"].cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return int(cursor.fetchone()[0])


@pytest.mark.django_db(transaction=True)
def test_two_activations_waiting_on_the_active_row_both_succeed_in_turn() -> None:
    policy_ensure_defaults()
    policy_version_create(document=document(version="policy-2"))
    policy_version_create(document=document(version="policy-3"))
    results: dict[str, BaseException | None] = {}

    def activate(name: str) -> None:
        try:
            policy_version_activate(name=name)
            results[name] = None
        except BaseException as exc:
            results[name] = exc
        finally:
            connection.close()

    # Hold the active row, so both activations queue behind it; then let them go.
    holder = connections.create_connection("default")
    try:
        with holder.cursor() as cursor:
            cursor.execute("BEGIN")
            cursor.execute("SELECT id FROM policy_policyversion WHERE is_active FOR UPDATE")
            threads = [
                threading.Thread(target=activate, args=(name,)) for name in ["policy-2", "policy-3"]
            ]
            for thread in threads:
                thread.start()
            for _ in range(100_000):
                if _waiting_on_locks() >= 2:
                    break
            else:
                pytest.fail("the activations never waited on the active row")
            cursor.execute("COMMIT")
    finally:
        holder.close()
    for thread in threads:
        thread.join(timeout=30)

    assert len(active_names()) == 1  # the constraint holds either way
    assert results == {"policy-2": None, "policy-3": None}


def test_a_persons_version_names_only_groups_that_exist_for_its_approvals(
    django_user_model: Any,
) -> None:
    policy_ensure_defaults()  # loaded before setup_roles makes the groups: not held to it
    author = django_user_model.objects.create_user(username="author")
    changed = document(version="policy-2", amount_approval={"group": "finance-approvers"})

    with pytest.raises(PolicyError, match="there is no group named 'finance-approvers'") as no:
        policy_version_create(document=changed, author=author)
    assert no.value.where == "amount_approval.group"
    assert not PolicyVersion.objects.filter(name="policy-2").exists()


def test_a_versions_document_is_read_and_validated_once_per_process(policy: None) -> None:
    """PolicyVersion.parsed keeps each version's validated document by its identity (a
    version never changes once stored): the pipeline asks for it on every run."""
    version = PolicyVersion.objects.defer("document").get(is_active=True)
    identity = (version.pk, version.name, version.checksum)
    policy_models._PARSED.clear()
    with CaptureQueriesContext(connection) as first:
        document = parsed_version(*identity)
    with CaptureQueriesContext(connection) as again:
        assert parsed_version(*identity) is document

    assert len(first) == 1 and len(again) == 0
