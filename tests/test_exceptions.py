"""The error tree: wire round trips and documentation of every code."""

from pathlib import Path

import pytest

from django_rivet.exceptions import ERROR_CLASSES, UserError, error_from_dict

DOCS = Path(__file__).resolve().parent.parent / "docs"


@pytest.mark.parametrize(
    "cls", sorted(ERROR_CLASSES.values(), key=lambda c: c.__name__)
)
def test_each_error_round_trips_through_its_wire_form(cls):
    error = cls("something happened", metadata={"n": 1})
    rebuilt = error_from_dict(error.to_dict())
    assert type(rebuilt) is cls
    assert rebuilt.to_dict() == error.to_dict()


def test_user_errors_keep_their_own_code():
    rebuilt = error_from_dict(UserError("no", code="too_much", metadata=[1]).to_dict())
    assert isinstance(rebuilt, UserError)
    assert (rebuilt.group, rebuilt.code, rebuilt.metadata) == ("user", "too_much", [1])


def test_unknown_codes_still_become_errors():
    rebuilt = error_from_dict({"group": "future", "code": "thing", "message": "m"})
    assert rebuilt.qualified_code == "future/thing"


def test_every_error_code_is_documented():
    text = "\n".join(path.read_text() for path in DOCS.glob("*.md"))
    missing = [
        f"{group}/{code}"
        for group, code in ERROR_CLASSES
        if f"{group}/{code}" not in text
    ]
    assert missing == []
