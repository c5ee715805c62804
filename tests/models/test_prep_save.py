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
