"""``db.prep_save``: raw SQL's parameters, as the ORM would write them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from django.db import connection

from django_rivet.models import Workflow, db

# pg: the PostgreSQL leg runs this module (each backend adapts datetimes).
pytestmark = [pytest.mark.pg, pytest.mark.django_db]

CASES = [
    ("wake_at", datetime(2026, 12, 6, 12, 0, 0, 123456, tzinfo=UTC)),
    ("created_at", datetime(2026, 12, 6, 14, 0, tzinfo=timezone(timedelta(hours=2)))),
    ("wake_at", None),
    ("waiting_for", ["message:approve"]),
    ("status", "sleeping"),
    ("retry_count", 3),
]


@pytest.mark.parametrize(("name", "value"), CASES, ids=repr)
def test_prep_save_matches_the_field_s_own(name, value):
    field = Workflow._meta.get_field(name)
    expected = field.get_db_prep_save(value, connection)
    assert repr(db.prep_save(field, value, connection)) == repr(expected)


def test_a_naive_datetime_takes_the_field_s_path_with_its_warning():
    field = Workflow._meta.get_field("wake_at")
    with pytest.warns(RuntimeWarning, match="naive datetime"):
        prepared = db.prep_save(field, datetime(2026, 12, 6, 12, 0), connection)
    assert prepared is not None


def _instance_params(values):
    row = Workflow(**values)
    fields = Workflow._meta.concrete_fields
    return [db.prep_save(f, f.pre_save(row, True), connection) for f in fields]


@pytest.mark.parametrize(
    "values",
    [
        {"id": "w1", "name": "greet", "wake_at": None},
        {
            "id": "w2",
            "name": "rivet.task",
            "status": "pending",
            "created_at": datetime(2026, 12, 6, 12, 0, tzinfo=UTC),
            "updated_at": datetime(2026, 12, 6, 12, 0, tzinfo=UTC),
            "wake_at": datetime(2026, 12, 6, 12, 5, tzinfo=UTC),
            "priority": -10,
            "waiting_for": ["message:go"],
            "traceparent": "",
        },
    ],
    ids=["few", "a start's"],
)
def test_insert_params_are_what_the_instance_would_save(values):
    expected = _instance_params(values)
    given = db.insert_params(Workflow, values, connection)
    fields = [f.name for f in Workflow._meta.concrete_fields]
    # created_at/updated_at default to the time of the call when not given.
    computed = {"created_at", "updated_at"} - set(values)
    assert {
        name: repr(value)
        for name, value in zip(fields, given, strict=True)
        if name not in computed
    } == {
        name: repr(value)
        for name, value in zip(fields, expected, strict=True)
        if name not in computed
    }
    for name in computed:
        assert given[fields.index(name)] is not None


def test_insert_params_do_not_share_a_row_between_calls():
    first = db.insert_params(Workflow, {"id": "a", "name": "x"}, connection)
    second = db.insert_params(Workflow, {"id": "b", "name": "y"}, connection)
    assert first[:1] != second[:1]
    assert db.insert_params(Workflow, {"id": "c"}, connection)[1] == ""  # name
