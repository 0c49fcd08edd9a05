"""The one translator of pydantic's errors into words (core.errors): what the API answers,
what a policy document's problems say, and never pydantic's own text."""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal
from enum import StrEnum
from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import ErrorDetails, PydanticCustomError

from automation.openapi import SUBMITTED_EXAMPLES
from automation.schemas import event_of, validation_problems
from console.forms.policy import plain_problem
from core.errors import field_messages, plain_message
from policy.services import POLICY_WORDS
from tests.conftest import make_event

PYDANTIC_WORDING = ("Input should", "String should", "Value error", "Assertion failed", "valid ")


class Colour(StrEnum):
    RED = "red"
    BLUE = "blue"


class Inner(BaseModel):
    x: int


class Shape(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = "n"
    source: Literal["web_form", "partner_portal"] = "web_form"
    colour: Colour = Colour.RED
    count: Annotated[int, Field(ge=1)] = 1
    share: Annotated[float, Field(le=1.0)] = 0.5
    positive: Annotated[int, Field(gt=0)] = 1
    small: Annotated[int, Field(lt=10)] = 1
    ratio: float = 0.0
    amount: Annotated[Decimal, Field(max_digits=4, decimal_places=2)] = Decimal(0)
    flag: bool = False
    text: str = ""
    filled: Annotated[str, Field(min_length=1)] = "x"
    word: Annotated[str, Field(min_length=2, max_length=5)] = "xx"
    code: Annotated[str, Field(pattern=r"^[a-z]+$")] = "x"
    phrases: list[Annotated[str, Field(min_length=2)]] = []
    few: Annotated[list[int], Field(min_length=1, max_length=2)] = [1]
    counts: dict[str, int] = {}
    inner: Inner | None = None
    when: datetime | None = None
    day: date | None = None
    note: str = ""
    version: str = ""

    @field_validator("note")
    @classmethod
    def _note(cls, value: str) -> str:
        raise ValueError("must not be empty")

    @field_validator("version")
    @classmethod
    def _version(cls, value: str) -> str:
        raise PydanticCustomError("version_name", "'a b' is not a usable version name")


def error_for(**data: Any) -> ErrorDetails:
    with pytest.raises(ValidationError) as caught:
        Shape.model_validate(data)
    errors = caught.value.errors()
    assert len(errors) == 1, errors
    return errors[0]


# What the API says (after the field's name) for each kind of problem.
MESSAGES = [
    ({"name": None}, "must be text"),
    ({"zzz": 1}, "is not part of the contract"),
    ({"source": "fax"}, "must be one of web_form or partner_portal (it was 'fax')"),
    ({"colour": "green"}, "must be one of red or blue (it was 'green')"),
    ({"count": 0}, "must be at least 1 (it was 0)"),
    ({"share": 1.5}, "must be at most 1.0 (it was 1.5)"),
    ({"positive": 0}, "must be more than 0 (it was 0)"),
    ({"small": 11}, "must be less than 10 (it was 11)"),
    ({"count": "many"}, "must be a whole number (it was 'many')"),
    ({"count": 1.5}, "must be a whole number (it was 1.5)"),
    ({"ratio": "x"}, "must be a number (it was 'x')"),
    ({"amount": "x"}, "must be a number (it was 'x')"),
    ({"amount": "12345"}, "must have at most 4 digits (it was '12345')"),
    ({"amount": "1.234"}, "must have at most 2 decimal places (it was '1.234')"),
    ({"flag": "maybe"}, "must be true or false"),
    ({"text": 5}, "must be text"),
    ({"filled": ""}, "must not be empty"),
    ({"word": "x"}, "must be at least 2 characters"),
    ({"word": "x" * 7}, "must be at most 5 characters"),
    ({"code": "A!"}, "has characters that are not allowed here"),
    ({"phrases": "x"}, "must be a list"),
    ({"few": []}, "must have at least 1 entry"),
    ({"few": [1, 2, 3]}, "must have at most 2 entries"),
    ({"counts": [1]}, "must be an object with named fields"),
    ({"inner": 5}, "must be an object with named fields"),
    ({"when": "yesterday"}, "must be a date and time such as 2026-03-01T09:30:00Z"),
    ({"day": "soon"}, "must be a date such as 2026-03-01"),
    ({"note": "x"}, "must not be empty"),
    ({"version": "x"}, "'a b' is not a usable version name"),
]


@pytest.mark.parametrize(("data", "said"), MESSAGES)
def test_each_kind_of_problem_reads_in_plain_words(data: dict[str, Any], said: str) -> None:
    message = plain_message(error_for(**data))

    assert message == said
    assert not any(raw in message for raw in PYDANTIC_WORDING)


def test_a_long_value_sent_is_cut_in_the_message() -> None:
    message = plain_message(error_for(count="x" * 1000))

    assert message == f"must be a whole number (it was '{'x' * 60}…')"


def test_a_type_pydantic_has_and_the_table_does_not_word_is_not_said_in_pydantics_words() -> None:
    item = error_for(count=0) | {"type": "url_parsing", "msg": "Input should be a valid URL"}

    assert plain_message(item) == "is not an allowed value"


def test_field_messages_name_each_place_and_the_input_as_a_whole() -> None:
    with pytest.raises(ValidationError) as caught:
        Inner.model_validate([1])

    assert field_messages(caught.value, root="body") == [
        ("body", "must be an object with named fields")
    ]
    with pytest.raises(ValidationError) as caught:
        Shape.model_validate({"inner": {"x": "y"}, "few": []})
    assert field_messages(caught.value, root="body") == [
        ("few", "must have at least 1 entry"),
        ("inner.x", "must be a whole number (it was 'y')"),
    ]


def test_a_policy_document_has_settings_not_a_contract() -> None:
    assert plain_message(error_for(zzz=1), words=POLICY_WORDS) == (
        "is not a setting a policy has: check the spelling and the indentation"
    )
    assert plain_message(error_for(inner=5), words=POLICY_WORDS) == (
        "must be a group of settings (names with their values)"
    )
    assert plain_message(error_for(count=0), words=POLICY_WORDS) == "must be at least 1 (it was 0)"


def test_the_policy_editor_names_a_list_entry_and_leaves_the_value_to_its_field() -> None:
    assert plain_problem(error_for(phrases=["ok", "x"])) == "“x” must be at least 2 characters"
    assert plain_problem(error_for(count="many")) == "must be a whole number"
    assert plain_problem(error_for(share=1.5)) == "must be at most 1.0"


def test_the_apis_documented_422_example_is_what_the_api_says() -> None:
    with pytest.raises(ValidationError) as caught:
        event_of(make_event(source="fax", body="   "))
    said = [problem.model_dump() for problem in validation_problems(caught.value)]

    assert SUBMITTED_EXAMPLES["422"]["invalid"]["value"]["problems"] == said
