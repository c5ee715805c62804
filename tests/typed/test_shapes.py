"""typed.shapes: which annotations convert, and how values go both ways."""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Annotated, Any, Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, Field
from typing_extensions import TypedDict

from django_rivet.domain import value_problem
from django_rivet.exceptions import InvalidArgs, InvalidValue
from django_rivet.typed import Shape, returned_shape, shape_of, to_domain
from django_rivet.typed.shapes import needs_shape


class Mood(enum.Enum):
    UP = "up"
    DOWN = "down"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


@dataclass
class Point:
    x: float
    y: float


class Entry(TypedDict):
    amount: Decimal
    mood: Mood


class Record(BaseModel):
    id: uuid.UUID
    when: datetime
    day: date
    wait: timedelta
    blob: bytes
    level: Level
    entries: list[Entry]
    tags: set[str]
    extra: Any = None


@pytest.mark.parametrize(
    "hint",
    [str, int, float, bool, bytes, None, type(None), Any, list, dict, tuple,
     list[int], dict[str, Any], int | None, str | list[str], tuple[int, ...]],
)  # fmt: skip
def test_builtin_annotations_need_no_shape(hint):
    assert not needs_shape(hint)
    assert shape_of(hint) is None


@pytest.mark.parametrize(
    "hint",
    [Decimal, Mood, Point, Entry, Record, datetime, uuid.UUID, Literal["a"],
     Annotated[int, Field(gt=0)], list[Point], dict[str, Decimal], Point | None],
)  # fmt: skip
def test_other_annotations_get_one_shared_shape(hint):
    shape = shape_of(hint)
    assert isinstance(shape, Shape)
    assert shape_of(hint) is shape


def test_a_value_goes_to_the_domain_and_back_exactly():
    record = Record(
        id=uuid.UUID(int=5),
        when=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        day=date(2026, 1, 2),
        wait=timedelta(days=1, seconds=30),
        blob=b"\x00\xff",
        level=Level.HIGH,
        entries=[{"amount": Decimal("1.230"), "mood": Mood.UP}],
        tags={"b"},
        extra={"n": Decimal("2")},
    )
    shape = shape_of(Record)
    domain = shape.dump(record)
    assert value_problem(domain) is None
    assert domain == {
        "id": uuid.UUID(int=5),  # a CBOR tag, a JSON string
        "when": datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        "day": "2026-01-02",
        "wait": "P1DT30S",
        "blob": b"\x00\xff",
        "level": 2,
        "entries": [{"amount": "1.230", "mood": "up"}],
        "tags": ["b"],
        "extra": {"n": "2"},
    }
    back = shape.load(domain)
    assert back == record.model_copy(update={"extra": {"n": "2"}})


def test_a_value_that_does_not_fit_names_each_path():
    shape = shape_of(list[Entry])
    with pytest.raises(InvalidArgs) as bad:
        shape.load(
            [{"amount": "1", "mood": "up"}, {"amount": "x", "mood": "sideways"}],
            "args[0]",
            InvalidArgs,
        )
    assert bad.value.message == (
        "args[0][1].amount: Input should be a valid decimal (and 1 more)"
    )
    assert [e["path"] for e in bad.value.metadata["errors"]] == [
        "args[0][1].amount",
        "args[0][1].mood",
    ]
    assert bad.value.metadata["errors"][1]["reason"] == "Input should be 'up' or 'down'"


def test_a_float_that_is_not_finite_stays_for_the_domain_check_to_refuse():
    domain = shape_of(Point).dump(Point(float("inf"), 1.0))
    assert value_problem(domain) == ("x", "numbers must be finite (no NaN or infinity)")


def test_an_object_the_domain_cannot_carry_is_refused_when_dumped():
    with pytest.raises(InvalidValue, match="cannot be converted"):
        shape_of(Mood).dump(object())


def test_to_domain_converts_what_a_python_mode_dump_leaves():
    assert to_domain(
        {"a": (Mood.UP, {Decimal("1.5")}), Level.LOW: date(2026, 5, 1)}
    ) == {
        "a": ["up", ["1.5"]],
        "1": "2026-05-01",
    }


def test_a_step_functions_return_annotation_is_read_once_per_function():
    def charge() -> Point:
        return Point(1, 2)

    def plain():
        return 1

    assert returned_shape(charge) is shape_of(Point)
    assert returned_shape(plain) is None
    assert returned_shape(lambda: 1) is None


@given(
    st.lists(
        st.builds(
            Point,
            st.floats(allow_nan=False, allow_infinity=False),
            st.floats(allow_nan=False, allow_infinity=False),
        )
    ),
    st.decimals(allow_nan=False, allow_infinity=False),
)
def test_dump_then_load_is_the_identity(points, amount):
    shape = shape_of(tuple[list[Point], Decimal])
    domain = shape.dump((points, amount))
    assert value_problem(domain) is None
    assert shape.load(domain) == (points, amount)
