"""Editing a business document (policy.editing): each edit's result, what it refuses, and
that the document it was given is never changed."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic import ValidationError

from policy import editing
from policy.editing import Described, NameTaken, Part, StillUsed, Use
from policy.schemas import NEW_VERSION, PolicyDocument
from policy.services import DEFAULTS_DIR, parse_policy_text

# A small business: claims and questions, two routes, two effects (records of work), tiers
# with an amount limit written for one effect, and a risk signal.
AMOUNT = {"amount": {"type": "amount"}}
BASE: dict[str, Any] = {
    "version": "shop-1",
    "routes": {"claim": "desk", "question": "desk"},
    "allowed_effects": ["open_task", "refund"],
    "approvals": {"refund": {"group": "approvers"}},
    "confidence": {"default": 0.5, "per_category": {"claim": 0.8}},
    "amount_limits": {"gold": {"block_above": "1000", "effects": ["refund"]}},
    "signals": {
        "fraud": {"action": "hold", "description": "Talk of fraud.", "phrases": {"en": ["fraud"]}}
    },
    "qa_sampling": {"routes": {"review": 0.1}},
    "catalogue": {
        "request_types": {
            "claim": {
                "label": "Claim",
                "description": "",
                "default_effect": "refund",
                "fields": AMOUNT,
            },
            "question": {"label": "Question", "description": "Anything else.", "fields": AMOUNT},
        },
        "routes": {
            "desk": {"label": "Desk", "group": "desk"},
            "review": {"label": "Review", "group": "desk"},
        },
        "effects": {
            "open_task": {"label": "Open a task", "description": "", "adapter": "record"},
            "refund": {
                "label": "Refund",
                "description": "",
                "adapter": "record",
                "parameters": {"amount": {"value": "{{ fields.amount }}", "type": "amount"}},
            },
        },
        "customer_attributes": {
            "tier": {"label": "Tier", "values": ["standard", "gold"]},
            "region": {"label": "Region", "values": ["north", "south"]},
        },
    },
}


@pytest.fixture
def data() -> dict[str, Any]:
    """The base as a draft of a new version, and a copy of it to compare with after an edit."""
    return editing.draft(PolicyDocument.model_validate(BASE), version=" shop-2 ", note=" n ")


def valid(data: dict[str, Any]) -> PolicyDocument:
    return PolicyDocument.model_validate(data, context=NEW_VERSION)


def untouched(data: dict[str, Any], edit: Any, **kwargs: Any) -> Any:
    """Run the edit and check the document it was given is as it was."""
    before = copy.deepcopy(data)
    try:
        return edit(data, **kwargs)
    finally:
        assert data == before


# --- the draft ---------------------------------------------------------------------------


def test_a_draft_carries_the_new_name_and_note_and_the_base_business() -> None:
    base = PolicyDocument.model_validate(BASE)
    found = editing.draft(base, version=" shop-2 ", note=" Refunds approved. ")
    assert (found["version"], found["note"]) == ("shop-2", "Refunds approved.")
    assert found["catalogue"] == base.business.model_dump(mode="json")
    assert valid(found).business == base.business


def test_a_draft_of_a_version_without_a_catalogue_carries_the_reference_one() -> None:
    base = parse_policy_text((DEFAULTS_DIR / "policy-1.yaml").read_text(encoding="utf-8"))
    assert base.catalogue is None
    found = editing.draft(base, version="shop-2", note="")
    assert found["catalogue"] == base.business.model_dump(mode="json")
    assert found["catalogue"]["request_types"]


# --- adding and changing -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("part", "name"),
    [
        (Part.REQUEST_TYPE, "claim"),
        (Part.ROUTE, "desk"),
        (Part.EFFECT, "refund"),
        (Part.CUSTOMER_ATTRIBUTE, "tier"),
        (Part.SIGNAL, "fraud"),
    ],
)
def test_a_part_added_under_a_name_its_kind_has_is_refused(
    data: dict[str, Any], part: Part, name: str
) -> None:
    with pytest.raises(NameTaken) as refused:
        untouched(data, editing.part_add, part=part, name=name, spec={"label": "Again"})
    assert (refused.value.part, refused.value.name) == (part, name)
    assert editing.parts(data, part)[name] != {"label": "Again"}


def test_a_name_one_kind_has_is_free_for_another(data: dict[str, Any]) -> None:
    spec = {"label": "Refund desk", "group": "desk"}
    found = untouched(data, editing.part_add, part=Part.ROUTE, name="refund", spec=spec)
    assert editing.parts(found, Part.ROUTE)["refund"] == spec


def test_a_route_added_and_a_type_sent_there_make_a_valid_version(data: dict[str, Any]) -> None:
    route = editing.route_spec({}, words=Described("Returns", " Goods sent back. "), group="desk")
    found = editing.part_add(data, part=Part.ROUTE, name="returns", spec=route)
    spec = editing.request_type_spec({}, words=Described("Return", ""), cue_weight=3)
    found = untouched(found, editing.part_add, part=Part.REQUEST_TYPE, name="return", spec=spec)
    found = untouched(found, editing.request_type_send, name="return", route="returns")
    document = valid(found)
    assert document.routes["return"] == "returns"
    assert document.business.routes["returns"].description == "Goods sent back."
    assert document.business.request_types["return"].cue_weight == 3


def test_a_type_sent_nowhere_is_out_of_the_routes_and_the_schema_says_so(
    data: dict[str, Any],
) -> None:
    found = untouched(data, editing.request_type_send, name="question", route="")
    assert "question" not in found["routes"]
    with pytest.raises(ValidationError, match="routes leave out the request type question"):
        valid(found)


def test_changing_a_part_that_is_not_there_is_an_error(data: dict[str, Any]) -> None:
    with pytest.raises(KeyError):
        editing.part_change(data, part=Part.ROUTE, name="nowhere", spec={"label": "X"})


def test_specs_keep_what_they_do_not_say_and_drop_what_is_left_empty() -> None:
    was = {"label": "Desk", "description": "old", "group": "desk", "kept": 1}
    assert editing.route_spec(was, words=Described("Front desk", " new "), group="") == {
        "label": "Front desk",
        "description": "new",
        "kept": 1,
    }
    typed = {"label": "Claim", "description": "", "cue_weight": 4, "fields": {"a": {}}}
    found = editing.request_type_spec(typed, words=Described("Claim", ""), cue_weight=None)
    assert found == {"label": "Claim", "description": "", "fields": {"a": {}}}


def test_an_effect_spec_loses_the_settings_of_an_adapter_it_no_longer_uses() -> None:
    was = {"label": "Tell", "description": "", "adapter": "http", "http": {"url": "x"}}
    found = editing.effect_spec(was, words=Described("Tell", ""), adapter="record", cue_priority=5)
    assert found == {"label": "Tell", "description": "", "adapter": "record", "cue_priority": 5}
    assert was["http"] == {"url": "x"}


# --- routes ------------------------------------------------------------------------------


def test_a_route_no_rule_names_is_removed(data: dict[str, Any]) -> None:
    data = editing.request_type_send(data, name="claim", route="desk")
    data["qa_sampling"] = None
    found = untouched(data, editing.route_remove, name="review")
    assert "review" not in editing.parts(found, Part.ROUTE)
    valid(found)


def test_a_route_types_are_sent_to_is_kept_and_the_types_are_named(data: dict[str, Any]) -> None:
    with pytest.raises(StillUsed) as refused:
        untouched(data, editing.route_remove, name="desk")
    assert (refused.value.use, refused.value.users) == (Use.SENT_TO, ("Claim", "Question"))


def test_a_route_the_qa_sampling_samples_is_kept(data: dict[str, Any]) -> None:
    with pytest.raises(StillUsed) as refused:
        untouched(data, editing.route_remove, name="review")
    assert refused.value.use == Use.SAMPLED
    data["qa_sampling"] = {"owners": {"review": "qa"}}
    with pytest.raises(StillUsed):
        editing.route_remove(data, name="review")


# --- request types -----------------------------------------------------------------------


def test_a_removed_type_leaves_the_routes_and_thresholds_too(data: dict[str, Any]) -> None:
    found = untouched(data, editing.request_type_remove, name="claim")
    assert "claim" not in editing.parts(found, Part.REQUEST_TYPE)
    assert "claim" not in found["routes"]
    assert "claim" not in found["confidence"]["per_category"]
    valid(found)


def test_a_usual_effect_is_set_and_cleared(data: dict[str, Any]) -> None:
    found = untouched(
        data, editing.request_type_usual_effect, name="question", effect="open_task", always=True
    )
    question = editing.parts(found, Part.REQUEST_TYPE)["question"]
    assert (question["default_effect"], question["default_effect_always"]) == ("open_task", True)
    cleared = editing.request_type_usual_effect(found, name="question", effect="", always=False)
    assert "default_effect" not in editing.parts(cleared, Part.REQUEST_TYPE)["question"]
    valid(cleared)


# --- effects -----------------------------------------------------------------------------


def test_an_effect_allowed_and_approved_then_not(data: dict[str, Any]) -> None:
    found = untouched(data, editing.effect_allow, name="open_task", allowed=True, approver="leads")
    assert found["allowed_effects"] == ["open_task", "refund"]
    assert found["approvals"]["open_task"] == {"group": "leads"}
    found = untouched(found, editing.effect_allow, name="open_task", allowed=False, approver="")
    assert found["allowed_effects"] == ["refund"]
    assert "open_task" not in found["approvals"]


def test_a_new_approver_keeps_the_rest_of_the_approval_rule(data: dict[str, Any]) -> None:
    data["approvals"]["refund"] = {"group": "approvers", "required": 2}
    found = editing.effect_allow(data, name="refund", allowed=True, approver="leads")
    assert found["approvals"]["refund"] == {"group": "leads", "required": 2}


def test_an_effect_no_rule_names_is_removed_with_its_approval(data: dict[str, Any]) -> None:
    data = editing.effect_allow(data, name="open_task", allowed=True, approver="leads")
    found = untouched(data, editing.effect_remove, name="open_task")
    assert "open_task" not in editing.parts(found, Part.EFFECT)
    assert "open_task" not in found["allowed_effects"]
    assert "open_task" not in found["approvals"]
    valid(found)


def test_a_types_usual_effect_is_kept_and_the_types_are_named(data: dict[str, Any]) -> None:
    with pytest.raises(StillUsed) as refused:
        untouched(data, editing.effect_remove, name="refund")
    assert (refused.value.use, refused.value.users) == (Use.USUAL_EFFECT, ("Claim",))


def test_an_effect_an_amount_limit_is_written_for_is_kept(data: dict[str, Any]) -> None:
    data = editing.request_type_usual_effect(data, name="claim", effect="", always=False)
    with pytest.raises(StillUsed) as refused:
        untouched(data, editing.effect_remove, name="refund")
    assert (refused.value.use, refused.value.users) == (Use.AMOUNT_LIMITS, ("gold",))


# --- customer attributes -----------------------------------------------------------------


def test_an_attribute_is_changed_and_removed(data: dict[str, Any]) -> None:
    spec = editing.attribute_spec(
        editing.parts(data, Part.CUSTOMER_ATTRIBUTE)["region"],
        words=Described("Region", "Where they are."),
        values=["east", "west"],
    )
    found = editing.part_change(data, part=Part.CUSTOMER_ATTRIBUTE, name="region", spec=spec)
    assert editing.parts(found, Part.CUSTOMER_ATTRIBUTE)["region"]["values"] == ["east", "west"]
    found = untouched(found, editing.attribute_remove, name="region")
    assert "region" not in editing.parts(found, Part.CUSTOMER_ATTRIBUTE)
    valid(found)


def test_the_tier_is_kept_while_amount_limits_are_written_per_tier(data: dict[str, Any]) -> None:
    with pytest.raises(StillUsed) as refused:
        untouched(data, editing.attribute_remove, name="tier")
    assert (refused.value.use, refused.value.users) == (Use.AMOUNT_LIMITS, ("gold",))
    data["amount_limits"] = {}
    assert "tier" not in editing.parts(
        editing.attribute_remove(data, name="tier"), Part.CUSTOMER_ATTRIBUTE
    )


# --- risk signals ------------------------------------------------------------------------


def test_a_changed_signal_is_its_next_version_and_an_unchanged_one_keeps_its_own(
    data: dict[str, Any],
) -> None:
    was = editing.parts(data, Part.SIGNAL)["fraud"]
    same = editing.signal_spec(was, description="Talk of fraud.", action="hold", approver="")
    assert editing.signal_change(data, name="fraud", spec=same)["signals"]["fraud"]["version"] == 1
    changed = editing.signal_spec(was, description="Fraud.", action="approval", approver="risk")
    found = untouched(data, editing.signal_change, name="fraud", spec=changed)
    signal = valid(found).signals["fraud"]
    assert (signal.version, signal.action, signal.approval) == (2, "approval", signal.approval)
    assert signal.approval is not None and signal.approval.group == "risk"


def test_an_approver_is_kept_only_when_a_match_asks_for_an_approval() -> None:
    was = {"action": "approval", "approval": {"group": "risk"}, "description": ""}
    found = editing.signal_spec(was, description="", action="block", approver="risk")
    assert (found["action"], found["approval"]) == ("block", None)


def test_a_signal_is_removed(data: dict[str, Any]) -> None:
    found = untouched(data, editing.signal_remove, name="fraud")
    assert found["signals"] == {}
    valid(found)


# --- the whole business ------------------------------------------------------------------


def test_customer_matching_as_the_defaults_is_said_as_none(data: dict[str, Any]) -> None:
    found = untouched(
        data,
        editing.customer_matching_set,
        reference_pattern="C-[0-9]{4}",
        match_sender_domain=False,
    )
    assert found["catalogue"]["customer_matching"] == {
        "reference_pattern": "C-[0-9]{4}",
        "match_sender_domain": False,
    }
    back = editing.customer_matching_set(found, reference_pattern=None, match_sender_domain=True)
    assert back["catalogue"]["customer_matching"] is None


def test_customer_matching_as_it_was_stays_said(data: dict[str, Any]) -> None:
    said = {"reference_pattern": None, "match_sender_domain": True}
    data["catalogue"]["customer_matching"] = said
    found = editing.customer_matching_set(data, reference_pattern=None, match_sender_domain=True)
    assert found["catalogue"]["customer_matching"] == said


def test_what_a_business_has_none_of_is_named(data: dict[str, Any]) -> None:
    assert editing.parts_missing(data) == []
    data["catalogue"]["routes"] = {}
    data["catalogue"]["effects"] = {}
    assert editing.parts_missing(data) == [Part.ROUTE, Part.EFFECT]
