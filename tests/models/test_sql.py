"""The SQL dialects: one per supported database, each keeping its contract.

The contract tests run the dialect of the test database against it, so the
PostgreSQL leg checks PostgreSQL's statements and the SQLite run SQLite's.
"""

from __future__ import annotations

import threading
import types

import pytest
from django.db import (
    IntegrityError,
    NotSupportedError,
    OperationalError,
    connection,
    connections,
    transaction,
)
from django.test.utils import CaptureQueriesContext

from django_rivet import clock
from django_rivet.models import Actor, Workflow, WorkflowKV, WorkflowMessage, sql

pytestmark = [pytest.mark.pg, pytest.mark.django_db(transaction=True)]


def fake(vendor: str) -> types.SimpleNamespace:
    """A connection of ``vendor`` as far as choosing a dialect goes."""
    return types.SimpleNamespace(vendor=vendor, alias="elsewhere")


def dialect() -> sql.Dialect:
    return sql.dialect(connection)


# -- choosing the dialect --------------------------------------------------------------
@pytest.mark.parametrize(
    ("vendor", "cls"),
    [("postgresql", sql.PostgreSQLDialect), ("sqlite", sql.SQLiteDialect)],
)
def test_each_supported_database_gets_its_own_dialect(vendor, cls):
    assert sql.supports(vendor)
    found = sql.dialect(fake(vendor))
    assert type(found) is cls
    assert found.vendor == vendor
    assert sql.dialect(fake(vendor)) is found  # one per vendor: it caches


def test_the_test_database_gets_the_dialect_of_its_vendor():
    assert dialect().vendor == connection.vendor


@pytest.mark.parametrize("vendor", ["mysql", "oracle"])
def test_an_unsupported_database_is_refused_by_name(vendor):
    assert not sql.supports(vendor)
    with pytest.raises(NotSupportedError) as refused:
        sql.dialect(fake(vendor))
    message = str(refused.value)
    assert repr(vendor) in message and "'elsewhere'" in message
    assert "postgresql and sqlite" in message and "rivet.E401" in message


def test_the_supported_vendors_are_the_dialects():
    assert set(sql.SUPPORTED_VENDORS) == {"postgresql", "sqlite"}


def test_skip_locked_is_what_the_backend_can_do():
    features = connection.features
    assert dialect().skip_locked == features.has_select_for_update_skip_locked


# -- the lease and the KV rows ---------------------------------------------------------
def _leased(workflow_id: str, token: str = "ours", **fields) -> None:
    Workflow.objects.create(id=workflow_id, name="greet", lease_token=token, **fields)


def _insert_checked(workflow_id: str, token: str, rows: list[tuple[bytes, bytes]]):
    params = [item for key, value in rows for item in (workflow_id, key, value)]
    with connection.cursor() as cursor:
        return dialect().insert_kv_checked(
            cursor, True, len(rows), True, params, [workflow_id, token]
        )


def _kv(workflow_id: str) -> dict[bytes, bytes]:
    rows = WorkflowKV.objects.filter(workflow_id=workflow_id)
    return {bytes(row.key): bytes(row.value) for row in rows}


def test_a_checked_insert_writes_while_the_lease_is_held():
    _leased("wf-held")
    assert _insert_checked("wf-held", "ours", [(b"a", b"1"), (b"b", b"2")]) is True
    assert _insert_checked("wf-held", "ours", [(b"a", b"3")]) is True  # upsert
    assert _kv("wf-held") == {b"a": b"3", b"b": b"2"}


def test_sqlite_names_the_parameters_of_its_checked_insert():
    # Django's SQLite cursor reads "%(name)s" with a string format, "%s"
    # with a regular expression on every call.
    from django_rivet.models.sql.sqlite import named

    statement = "a = %s AND b LIKE '%%s' AND c IN (%s, %s)"
    assert named(statement) == (
        "a = %(p0)s AND b LIKE '%%s' AND c IN (%(p1)s, %(p2)s)",
        ("p0", "p1", "p2"),
    )


def test_a_checked_insert_is_logged_with_its_values():
    _leased("wf-logged")
    with CaptureQueriesContext(connection) as queries:
        assert _insert_checked("wf-logged", "ours", [(b"k", b"v")]) is True
    [logged] = [q["sql"] for q in queries if "wf-logged" in q["sql"]]
    assert "INSERT" in logged and "'ours'" in logged


def test_a_checked_insert_writes_nothing_once_the_lease_moved_on():
    _leased("wf-moved", token="successor")
    assert _insert_checked("wf-moved", "ours", [(b"a", b"1")]) is False
    assert _kv("wf-moved") == {}


def test_a_requested_cancel_fails_the_check_that_stops_on_cancel():
    _leased("wf-cancel", cancel_requested=True)
    assert _insert_checked("wf-cancel", "ours", [(b"a", b"1")]) is False
    with connection.cursor() as cursor:
        cursor.execute(dialect().lease_check_sql(False), ["wf-cancel", "ours"])
        assert cursor.fetchone() is not None  # an operation's check ignores it


def _plain_insert_checked(workflow_id: str, rows: list[tuple[bytes, bytes]]):
    params = [item for key, value in rows for item in (workflow_id, key, value)]
    with connection.cursor() as cursor:
        return dialect().insert_kv_checked(
            cursor, True, len(rows), False, params, [workflow_id, "ours"]
        )


def test_a_plain_checked_insert_of_a_stored_key_fails_whole():
    # The driver's first try for new keys: a key stored after all fails the
    # statement, and none of its rows land (the upsert follows).
    _leased("wf-plain")
    assert _plain_insert_checked("wf-plain", [(b"a", b"1")]) is True
    with pytest.raises(IntegrityError):
        _plain_insert_checked("wf-plain", [(b"b", b"2"), (b"a", b"3")])
    assert _kv("wf-plain") == {b"a": b"1"}


def test_a_check_that_ignores_cancels_writes_while_a_cancel_is_pending():
    _leased("wf-operation", cancel_requested=True)
    with connection.cursor() as cursor:
        held = dialect().insert_kv_checked(
            cursor,
            False,
            1,
            True,
            ["wf-operation", b"a", b"1"],
            ["wf-operation", "ours"],
        )
    assert held is True
    assert _kv("wf-operation") == {b"a": b"1"}


def _inbox(workflow_id: str) -> set[int]:
    return set(
        WorkflowMessage.objects.filter(workflow_id=workflow_id).values_list(
            "pk", flat=True
        )
    )


def _insert_removing(workflow_id, rows, removing, upsert=True) -> bool:
    params = [item for key, value in rows for item in (workflow_id, key, value)]
    with connection.cursor() as cursor:
        return dialect().insert_kv_checked(
            cursor, True, len(rows), upsert, params, [workflow_id, "ours"], removing
        )


def test_a_checked_insert_removes_received_messages_on_the_same_check():
    # PostgreSQL: a live wake's record (receipt, step, the message's removal)
    # in one statement; SQLite deletes them beside it (the driver's path).
    _leased("wf-remove")
    _leased("wf-bystander")
    mine = [
        WorkflowMessage.objects.create(workflow_id="wf-remove", name="m", body=b"")
        for _ in range(3)
    ]
    theirs = WorkflowMessage.objects.create(
        workflow_id="wf-bystander", name="m", body=b""
    )
    removing = [mine[0].pk, mine[1].pk, theirs.pk]
    if not dialect().kv_insert_removes_messages:
        with pytest.raises(ValueError):
            _insert_removing("wf-remove", [(b"a", b"1")], removing)
        return
    assert _insert_removing("wf-remove", [(b"a", b"1")], removing, upsert=False)
    assert _kv("wf-remove") == {b"a": b"1"}
    assert _inbox("wf-remove") == {mine[2].pk}  # only this workflow's
    assert _inbox("wf-bystander") == {theirs.pk}
    # A stored key fails the plain insert whole: the message stays.
    with pytest.raises(IntegrityError):
        _insert_removing("wf-remove", [(b"a", b"2")], [mine[2].pk], upsert=False)
    assert _inbox("wf-remove") == {mine[2].pk}
    # The lease moved on: nothing written, nothing removed.
    Workflow.objects.filter(pk="wf-remove").update(lease_token="successor")
    assert not _insert_removing("wf-remove", [(b"b", b"1")], [mine[2].pk])
    assert _kv("wf-remove") == {b"a": b"1"}
    assert _inbox("wf-remove") == {mine[2].pk}
    # A cancel pending (a run's check stops on it): the same.
    Workflow.objects.filter(pk="wf-remove").update(
        lease_token="ours", cancel_requested=True
    )
    assert not _insert_removing("wf-remove", [(b"b", b"1")], [mine[2].pk])
    assert _inbox("wf-remove") == {mine[2].pk}


def _held(workflow_id: str, token: str = "ours") -> bool:
    with connection.cursor() as cursor:
        cursor.execute(dialect().lease_held_sql(), [workflow_id, token])
        return cursor.fetchone() is not None


def test_the_cancel_check_reads_a_held_lease_and_no_pending_cancel():
    _leased("wf-read")
    assert _held("wf-read")
    assert not _held("wf-read", "theirs")
    assert not _held("wf-absent")
    Workflow.objects.filter(pk="wf-read").update(cancel_requested=True)
    assert not _held("wf-read")  # what committed before the read, it sees


@pytest.mark.skipif("connection.vendor != 'postgresql'", reason="PostgreSQL's")
def test_a_checked_insert_locks_the_lease_row_until_its_transaction_ends():
    # As the renewal would: a claim or a cancel (another connection) waits.
    _leased("wf-lock")

    def try_lock() -> str:
        # Another thread: its own connection, closed when it is done.
        found: list[str] = []

        def attempt() -> None:
            table = connection.ops.quote_name(Workflow._meta.db_table)
            try:
                with connection.cursor() as cursor:
                    cursor.execute(
                        f"SELECT 1 FROM {table} WHERE id = %s FOR UPDATE NOWAIT",
                        ["wf-lock"],
                    )
                found.append("locked it")
            except OperationalError:
                found.append("waited")
            finally:
                connections.close_all()

        thread = threading.Thread(target=attempt)
        thread.start()
        thread.join()
        return found[0]

    with transaction.atomic():
        assert _insert_checked("wf-lock", "ours", [(b"a", b"1")]) is True
        assert try_lock() == "waited"
    assert try_lock() == "locked it"


def test_the_renewal_moves_the_expiry_only_for_the_holder():
    _leased("wf-renew")
    expires = connection.ops.adapt_datetimefield_value(clock.to_datetime(2e9))
    statement = dialect().lease_renew_sql(True)
    with connection.cursor() as cursor:
        cursor.execute(statement, [expires, "wf-renew", "theirs"])
        assert cursor.rowcount == 0
        cursor.execute(statement, [expires, "wf-renew", "ours"])
        assert cursor.rowcount == 1
    assert Workflow.objects.get(pk="wf-renew").lease_expires_at == clock.to_datetime(
        2e9
    )


def test_the_kv_list_reads_a_key_range_in_key_order():
    Workflow.objects.create(id="wf-list", name="greet")
    for key in (b"\x02", b"\x01\xff", b"\x01\x00", b"\x00"):
        WorkflowKV.objects.create(workflow_id="wf-list", key=key, value=b"v")
    with connection.cursor() as cursor:
        cursor.execute(dialect().kv_list_sql(True, True), ["wf-list", b"\x01", b"\x02"])
        assert [bytes(key) for key, _ in cursor.fetchall()] == [
            b"\x01\x00",
            b"\x01\xff",
        ]


# -- the actor row ---------------------------------------------------------------------
def test_the_statements_before_an_actor_update_run_with_it():
    actor = Actor.objects.create(name="counter", key='["x"]', key_parts=["x"])
    other = Actor.objects.create(name="counter", key='["y"]', key_parts=["y"])
    table = connection.ops.quote_name(Actor._meta.db_table)
    pk = Actor._meta.pk
    before = [
        (
            f"UPDATE {table} SET event_seq = %s WHERE id = %s",
            [7, pk.get_db_prep_value(other.pk, connection)],
        )
    ]
    params = [b"state", 3, dialect().now_param(connection, clock.now_datetime())]
    params.append(pk.get_db_prep_value(actor.pk, connection))
    with transaction.atomic(), connection.cursor() as cursor:
        statement = dialect().actor_update_sql(True, False)
        dialect().execute_after(cursor, before, statement, params)
    actor.refresh_from_db()
    assert (bytes(actor.state), actor.version, actor.state_version) == (b"state", 1, 3)
    assert Actor.objects.get(pk=other.pk).event_seq == 7


def test_now_param_is_what_django_adapts_the_time_to():
    moment = clock.to_datetime(1_796_209_200.25)
    expected = connection.ops.adapt_datetimefield_value(moment)
    assert dialect().now_param(connection, moment) == expected


# -- transactions ----------------------------------------------------------------------
def _setting(name: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute(f"SHOW {name}")
        return str(cursor.fetchone()[0])


@pytest.mark.skipif("connection.vendor != 'postgresql'", reason="PostgreSQL's")
def test_postgresql_defers_the_flush_and_bounds_lock_waits_of_one_transaction():
    with connection.cursor() as cursor:
        # The test cluster runs without synchronous commits: this session does.
        cursor.execute("SET synchronous_commit TO on")
    try:
        with transaction.atomic():
            dialect().defer_commit_flush(connection)
            dialect().bound_lock_wait(connection, 250)
            inside = (_setting("synchronous_commit"), _setting("lock_timeout"))
        after = (_setting("synchronous_commit"), _setting("lock_timeout"))
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET synchronous_commit")
    assert inside == ("off", "250ms")
    assert after == ("on", "0")


@pytest.mark.skipif("connection.vendor != 'sqlite'", reason="SQLite's")
def test_sqlite_runs_no_statement_for_what_it_cannot_do():
    with transaction.atomic(), CaptureQueriesContext(connection) as queries:
        dialect().defer_commit_flush(connection)
        dialect().bound_lock_wait(connection, 250)
    assert queries.captured_queries == []
    assert not dialect().bounds_lock_waits and dialect().locks_by_writing_first


@pytest.mark.skipif("connection.vendor != 'sqlite'", reason="SQLite's")
def test_sqlite_older_than_3_35_is_too_old(monkeypatch):
    assert dialect().too_old() is None
    monkeypatch.setattr("sqlite3.sqlite_version_info", (3, 31, 1))
    assert dialect().too_old() == (3, 31, 1)


# -- JSON ------------------------------------------------------------------------------
def test_waiting_for_matches_a_name_in_the_list():
    Workflow.objects.create(id="wf-a", name="greet", waiting_for=["approve", "*"])
    Workflow.objects.create(id="wf-b", name="greet", waiting_for=["approved"])
    Workflow.objects.create(id="wf-c", name="greet", waiting_for=[])
    found = Workflow.objects.filter(waiting_for__has_name="approve")
    assert list(found.values_list("pk", flat=True)) == ["wf-a"]
    assert Workflow.objects.filter(waiting_for__has_name="*").count() == 1


@pytest.mark.skipif("connection.vendor != 'postgresql'", reason="PostgreSQL's plans")
def test_statements_on_one_workflow_find_it_by_its_primary_key_whatever_the_stats():
    """Statistics taken when nothing was leased: the plans must not scan.

    With the statistics saying no workflow is leased (or due), the lease
    check took the partial index of leased workflows (every leased row) and
    the claim the index of due ones (every due row) instead of the primary
    key: P16's drain paid 0.5-1.8 ms a statement for it, growing with the
    batch.
    """
    from django_rivet.models.workflows import WORKFLOW_ACTIVE
    from django_rivet.workflows.leases import _CLAIMED

    now = clock.to_datetime(1_700_000_000)
    Workflow.objects.bulk_create(
        [Workflow(id=f"idle-{i}", name="greet", status="sleeping") for i in range(300)]
    )
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {Workflow._meta.db_table}")
    Workflow.objects.bulk_create(
        [
            Workflow(id=f"wf-{i}", name="greet", lease_token=f"t{i}", wake_at=now)
            for i in range(300)
        ]
        + [Workflow(id=f"due-{i}", name="greet", wake_at=now) for i in range(300)]
    )
    at = connection.ops.adapt_datetimefield_value(now)
    statements = {
        "cancel read": (dialect().lease_held_sql(), ["wf-7", "t7"]),
        "lease check": (dialect().lease_check_sql(True), ["wf-7", "t7"]),
        "renewal": (dialect().lease_renew_sql(True), [at, "wf-7", "t7"]),
        "load": (dialect().kv_load_checked_sql(), ["wf-7", "wf-7", "t7"]),
        "claim": (
            dialect().lease_claim_sql(True, WORKFLOW_ACTIVE, _CLAIMED),
            ["t", "me", at, at, "due-7", at, at],
        ),
    }
    for name, (statement, params) in statements.items():
        with connection.cursor() as cursor:
            cursor.execute(f"EXPLAIN {statement}", params)
            plan = "\n".join(row[0] for row in cursor.fetchall())
        assert "rivet_workflow_leased" not in plan, (name, plan)
        assert "rivet_workflow_due" not in plan, (name, plan)
