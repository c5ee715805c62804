"""Finding actors from code: actors.filter() and actors.count()."""

import uuid
from datetime import timedelta

import pytest
from django.db import connection

from django_rivet import actors, clock
from django_rivet.actors import client
from django_rivet.actors.rows import canonical_key
from django_rivet.models import Actor as ActorRow

# pg: prefixes compare text, which each database orders its own way.
pytestmark = [pytest.mark.pg, pytest.mark.django_db]


def make(name, key, created):
    parts = (key,) if isinstance(key, str) else tuple(key)
    return ActorRow.objects.create(
        name=name,
        key=canonical_key(parts),
        key_parts=list(parts),
        created_at=created,
        updated_at=created,
    )


@pytest.fixture
def rooms():
    start = clock.now_datetime()
    keys = [["acme"], ["acme", "general"], ["acme", "x", "y"], ["acme2"], ["bolt"]]
    made = [
        make("chatRoom", key, start + timedelta(seconds=i))
        for i, key in enumerate(keys)
    ]
    make("counter", "acme", start + timedelta(seconds=10))
    return start, made


def test_filter_returns_handles_newest_first(rooms):
    _, made = rooms
    found = actors.filter("chatRoom")
    assert [h.actor_id for h in found] == [row.id for row in reversed(made)]
    assert found[0].key == ("bolt",) and found[0].name == "chatRoom"
    assert found[0].created_at == made[-1].created_at
    assert [h.name for h in actors.filter(limit=2)] == ["counter", "chatRoom"]


def test_key_prefix_matches_whole_leading_parts(rooms):
    found = actors.filter("chatRoom", key_prefix="acme")
    assert sorted(h.key for h in found) == [
        ("acme",),
        ("acme", "general"),
        ("acme", "x", "y"),
    ]
    assert [h.key for h in actors.filter("chatRoom", key_prefix=["acme", "x"])] == [
        ("acme", "x", "y")
    ]
    assert actors.count("chatRoom", key_prefix=["acme"]) == 3
    assert actors.count("chatRoom", key_prefix=[]) == 5
    with pytest.raises(ValueError):
        actors.filter(key_prefix="acme")  # keys belong to a class


def test_prefixes_are_case_sensitive_and_whole_parts():
    now = clock.now_datetime()
    make("chatRoom", ["ACME", "a"], now)
    make("chatRoom", ["acme", "b"], now)
    make("chatRoom", ["acmé", "c"], now)
    assert [h.key for h in actors.filter("chatRoom", key_prefix="acme")] == [
        ("acme", "b")
    ]
    assert actors.count("chatRoom", key_prefix="ACME") == 1
    assert actors.count("chatRoom", key_prefix="acmé") == 1


def test_like_wildcards_in_a_prefix_are_literal():
    now = clock.now_datetime()
    make("chatRoom", ["50%", "a"], now)
    make("chatRoom", ["50_b"], now)
    make("chatRoom", ['quo"te', "\\x"], now)
    assert [h.key for h in actors.filter("chatRoom", key_prefix="50%")] == [
        ("50%", "a")
    ]
    assert actors.count("chatRoom", key_prefix="5_%") == 0
    assert actors.count("chatRoom", key_prefix='quo"te') == 1


def test_creation_times_bound_the_search_and_page_it(rooms):
    start, made = rooms
    newer = actors.filter("chatRoom", created_after=start + timedelta(seconds=2))
    assert [h.key for h in newer] == [("bolt",), ("acme2",)]
    older = actors.filter("chatRoom", created_before=start + timedelta(seconds=2))
    assert [h.key for h in older] == [("acme", "general"), ("acme",)]
    page = actors.filter("chatRoom", limit=2)
    following = actors.filter("chatRoom", created_before=page[-1].created_at, limit=2)
    assert [h.actor_id for h in page + following] == [row.id for row in reversed(made)][
        :4
    ]
    assert actors.count("chatRoom", created_after=start) == 4


def test_handles_call_the_actors(rooms):
    handle = actors.get_or_create("counter", "found")
    handle.call("increment")
    (found,) = actors.filter("counter", key_prefix="found")
    assert found == handle
    assert found.call("getCount") == 1


def test_limits_are_checked():
    for limit in (0, client.MAX_FILTER_LIMIT + 1, True, "5"):
        with pytest.raises(ValueError):
            actors.filter(limit=limit)


@pytest.mark.django_db(transaction=True)
async def test_async_twins(rooms):
    found = await actors.afilter("chatRoom", key_prefix="bolt")
    assert [h.key for h in found] == [("bolt",)]
    assert await actors.acount("counter") == 1


@pytest.mark.skipif(
    "connection.vendor != 'postgresql'", reason="asserts PostgreSQL's query plan"
)
def test_filter_by_name_and_key_prefix_uses_an_index_over_10000_actors():
    now = clock.now_datetime()
    rows = []
    for index in range(10_000):
        name = ("chatRoom", "counter", "tally", "gate")[index % 4]
        parts = (f"tenant{index % 50}", f"room{index}")
        rows.append(
            ActorRow(
                id=uuid.uuid4(),
                name=name,
                key=canonical_key(parts),
                key_parts=list(parts),
                created_at=now - timedelta(seconds=index),
                updated_at=now,
            )
        )
    ActorRow.objects.bulk_create(rows, batch_size=2000)
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {ActorRow._meta.db_table}")
    query = client._found("chatRoom", key_prefix=["tenant4"])
    plan = query.order_by("-created_at", "-id")[:100].explain()
    assert "Index" in plan and "Seq Scan" not in plan, plan
    assert len(actors.filter("chatRoom", key_prefix="tenant4", limit=500)) == 100
    by_name = client._found("counter")
    plan = by_name.order_by("-created_at", "-id")[:100].explain()
    assert "Index" in plan and "Seq Scan" not in plan, plan
    count_plan = by_name.explain()
    assert "Seq Scan" not in count_plan, count_plan
    assert actors.count("counter") == 2500
