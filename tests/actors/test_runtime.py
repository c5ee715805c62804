"""The actor runtime: lifecycle, persisted state, atomicity, errors, sync/async."""

import asyncio
import datetime
import re
import time
import zoneinfo

import pytest
from asgiref.sync import sync_to_async
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from django_rivet import (
    ActionNotFound,
    ActionTimeout,
    Actor,
    ActorAlreadyExists,
    ActorNotFound,
    Forbidden,
    InvalidArgs,
    UserError,
    action,
    actors,
    clock,
)
from django_rivet.actors import cache, errors, rows, spine
from django_rivet.actors.calls import Origin
from django_rivet.actors.kv import ActorKVStore
from django_rivet.actors.operations import CallAction
from django_rivet.actors.rows import ActorRef
from django_rivet.actors.spine import invoke
from django_rivet.exceptions import InvalidKey, ReentrantCall
from django_rivet.models import Actor as ActorRow
from django_rivet.models import ActorEvent, db
from django_rivet.testing import freeze_time, register_temporarily, reset_actor_cache
from tests.support.threads import in_threads
from tests.testapp.models import Note

# pg: the PostgreSQL leg runs this module (the invocation spine: row locks, raw SQL,
# rollbacks).
pytestmark = [pytest.mark.pg, pytest.mark.django_db(transaction=True)]

calls: list[str] = []


class SyncLifecycle(Actor):
    name = "syncLifecycle"

    def create_state(self, ctx, input):
        calls.append(f"create_state:{input}")
        return {"seen": [], "input": input}

    def on_create(self, ctx, input):
        calls.append(f"on_create:{input}")

    def on_wake(self, ctx):
        calls.append("on_wake")
        self.ephemeral = "set by on_wake"

    def on_sleep(self, ctx):
        calls.append("on_sleep")
        ctx.state["slept"] = True

    def on_destroy(self, ctx):
        calls.append("on_destroy")

    def on_state_change(self, ctx, state):
        calls.append(f"on_state_change:{len(state['seen'])}")

    @action
    def touch(self, ctx, item: str):
        calls.append(f"touch:{item}")
        ctx.state["seen"].append(item)
        return getattr(self, "ephemeral", None)

    @action
    def read(self, ctx):
        calls.append("read")
        return ctx.state

    @action
    def nap(self, ctx):
        ctx.sleep()

    @action
    def remove(self, ctx):
        ctx.destroy()


class AsyncLifecycle(Actor):
    name = "asyncLifecycle"

    async def create_state(self, ctx, input):
        calls.append(f"create_state:{input}")
        return {"seen": [], "input": input}

    async def on_create(self, ctx, input):
        calls.append(f"on_create:{input}")

    async def on_wake(self, ctx):
        calls.append("on_wake")
        self.ephemeral = "set by on_wake"

    async def on_sleep(self, ctx):
        calls.append("on_sleep")
        ctx.state["slept"] = True

    async def on_destroy(self, ctx):
        calls.append("on_destroy")

    async def on_state_change(self, ctx, state):
        calls.append(f"on_state_change:{len(state['seen'])}")

    @action
    async def touch(self, ctx, item: str):
        await asyncio.sleep(0)
        calls.append(f"touch:{item}")
        ctx.state["seen"].append(item)
        return getattr(self, "ephemeral", None)

    @action
    async def read(self, ctx):
        calls.append("read")
        return ctx.state

    @action
    async def nap(self, ctx):
        ctx.sleep()

    @action
    async def remove(self, ctx):
        ctx.destroy()


@pytest.fixture(params=[SyncLifecycle, AsyncLifecycle], ids=["sync", "async"])
def lifecycle(request):
    calls.clear()
    with register_temporarily(request.param):
        yield request.param.name


def stored_state(handle):
    return ActorRow.objects.get(pk=handle.actor_id).decoded_state()


# -- lifecycle ----
def test_creation_runs_create_state_on_create_on_wake_in_order(lifecycle):
    handle = actors.get_or_create(lifecycle, "x", input={"n": 1})
    assert calls == ["create_state:{'n': 1}", "on_create:{'n': 1}", "on_wake"]
    assert handle.call("touch", "a") == "set by on_wake"
    assert calls[3:] == ["touch:a", "on_state_change:1"]


def test_loading_in_a_fresh_process_runs_on_wake_once(lifecycle):
    handle = actors.get_or_create(lifecycle, "x")
    reset_actor_cache()  # as a new process would
    calls.clear()
    handle.call("touch", "a")
    handle.call("touch", "b")
    assert calls == [
        "on_wake",
        "touch:a",
        "on_state_change:1",
        "touch:b",
        "on_state_change:2",
    ]


def test_ctx_sleep_runs_on_sleep_and_evicts(lifecycle):
    handle = actors.get_or_create(lifecycle, "x")
    calls.clear()
    handle.call("nap")
    # on_sleep changed the state, so on_state_change follows.
    assert calls == ["on_sleep", "on_state_change:0"]
    assert handle.actor_id not in cache.cached_ids()
    assert stored_state(handle)["slept"] is True
    handle.call("read")
    assert calls[2:] == ["on_wake", "read"]


def test_idle_actors_are_evicted_after_sleep_timeout(lifecycle):
    with freeze_time() as clock:
        handle = actors.get_or_create(lifecycle, "x")
        calls.clear()
        clock.advance(29)
        assert spine.evict_idle() == 0
        clock.advance(2)
        assert spine.evict_idle() == 1
    assert calls == ["on_sleep", "on_state_change:0"]
    assert stored_state(handle)["slept"] is True
    assert cache.cached_ids() == set()


def test_destroy_runs_on_destroy_and_removes_everything(lifecycle):
    handle = actors.get_or_create(lifecycle, "x")
    ActorKVStore(handle.actor_id).put("k", 1)
    calls.clear()
    handle.call("remove")
    assert calls == ["on_destroy"]
    assert not ActorRow.objects.filter(pk=handle.actor_id).exists()
    with pytest.raises(ActorNotFound):
        actors.get(lifecycle, "x")
    # get_or_create handles make a fresh actor on the next call.
    fresh = actors.get_or_create(lifecycle, "x")
    assert fresh.actor_id != handle.actor_id
    assert handle.call("read")["seen"] == []


def test_handle_destroy(lifecycle):
    handle = actors.get_or_create(lifecycle, "x")
    calls.clear()
    handle.destroy()
    assert calls == ["on_destroy"]
    with pytest.raises(ActorNotFound):
        actors.get_by_id(handle.actor_id).call("read")


# -- persisted state ----
class Nested(Actor):
    name = "nested"
    initial_state = {"a": {"b": [1]}, "n": 0}

    @action
    def push(self, ctx, value):
        ctx.state["a"]["b"].append(value)

    @action
    def replace(self, ctx, value):
        ctx.state = value

    @action
    def read(self, ctx):
        return ctx.state

    @action
    def set_ephemeral(self, ctx, value):
        self.note = value

    @action
    def get_ephemeral(self, ctx):
        return getattr(self, "note", None)


@pytest.fixture
def nested():
    with register_temporarily(Nested):
        yield actors.get_or_create("nested", "n")


def test_nested_mutation_is_persisted_without_a_save_call(nested):
    nested.call("push", 2)
    nested.call("push", {"deep": [True]})
    assert stored_state(nested) == {"a": {"b": [1, 2, {"deep": [True]}]}, "n": 0}


def test_assigning_state_replaces_it(nested):
    nested.call("replace", [1, 2, 3])
    assert stored_state(nested) == [1, 2, 3]


def test_unchanged_state_is_not_rewritten(nested):
    version = ActorRow.objects.get(pk=nested.actor_id).version
    with CaptureQueriesContext(connection) as queries:
        nested.call("read")
    state_writes = [
        q["sql"] for q in queries if re.search(r'SET .*"state" =', q["sql"])
    ]
    assert state_writes == []
    assert ActorRow.objects.get(pk=nested.actor_id).version == version


def test_state_survives_cache_eviction_and_a_fresh_process(nested):
    nested.call("push", 2)
    nested.call("set_ephemeral", "kept in this process")
    assert nested.call("get_ephemeral") == "kept in this process"
    reset_actor_cache()
    assert nested.call("read") == {"a": {"b": [1, 2]}, "n": 0}
    assert nested.call("get_ephemeral") is None  # ephemeral: gone with the process


def test_a_state_written_by_another_process_is_reloaded(nested):
    nested.call("read")  # cached here
    row = ActorRow.objects.get(pk=nested.actor_id)
    from django_rivet.encoding import cbor_dumps

    ActorRow.objects.filter(pk=row.pk).update(
        state=cbor_dumps({"other": 1}), version=row.version + 1
    )
    assert nested.call("read") == {"other": 1}


# -- atomicity ----
def test_raising_handler_leaves_state_kv_and_model_rows_unchanged():
    counter = actors.get_or_create("counter", "atomic")
    counter.call("increment")
    with pytest.raises(UserError) as info:
        counter.call("add_note_then_fail", "should vanish")
    assert info.value.code == "refused"
    assert info.value.metadata == {"text": "should vanish"}
    assert Note.objects.count() == 0
    assert ActorKVStore(counter.actor_id).get("note") is None
    assert counter.call("getCount") == 1
    assert stored_state(counter) == {"count": 1}
    # The failed action's broadcast did not reach the log either.
    assert list(ActorEvent.objects.values_list("seq", flat=True)) == [1]


class AsyncWriter(Actor):
    name = "asyncWriter"
    initial_state = {"n": 0}

    @action
    async def write(self, ctx, text: str, fail: bool):
        await Note.objects.acreate(text=text)
        await ctx.kv.aput("last", text)
        ctx.state["n"] += 1
        if fail:
            raise ValueError("boom")
        return await Note.objects.acount()


@pytest.fixture
def writer():
    with register_temporarily(AsyncWriter):
        yield


def test_async_handler_orm_writes_share_the_invocation_transaction(writer):
    handle = actors.get_or_create("asyncWriter", "w")
    assert handle.call("write", "kept", False) == 1
    with pytest.raises(ValueError, match="boom"):
        handle.call("write", "dropped", True)
    assert list(Note.objects.values_list("text", flat=True)) == ["kept"]
    assert ActorKVStore(handle.actor_id).get("last") == "kept"
    assert stored_state(handle) == {"n": 1}


async def test_async_caller_with_async_handler_rolls_back_together(writer):
    handle = await actors.aget_or_create("asyncWriter", "w")
    assert await handle.acall("write", "kept", False) == 1
    with pytest.raises(ValueError):
        await handle.acall("write", "dropped", True)
    texts = await sync_to_async(
        lambda: list(Note.objects.values_list("text", flat=True))
    )()
    assert texts == ["kept"]


async def test_async_caller_with_sync_handler():
    handle = await actors.aget_or_create("counter", "async-caller")
    assert await handle.acall("increment", 2) == 2
    with pytest.raises(UserError):
        await handle.acall("add_note_then_fail", "x")
    assert await handle.acall("getCount") == 2
    assert await Note.objects.acount() == 0


async def test_async_callers_run_different_actors_concurrently():
    a = await actors.aget_or_create("counter", "p1")
    b = await actors.aget_or_create("counter", "p2")
    results = await asyncio.gather(
        a.acall("slow_increment", 0.05), b.acall("increment")
    )
    assert results == [1, 1]


# -- errors ----
def test_other_exceptions_reach_server_side_callers_unchanged():
    counter = actors.get_or_create("counter", "errors")
    with pytest.raises(RuntimeError, match="secret detail"):
        counter.call("crash")
    assert counter.call("getCount") == 0


def test_public_error_hides_internal_details(caplog):
    error = errors.public_error(RuntimeError("secret detail"))
    assert error.to_dict() == {
        "group": "rivet",
        "code": "internal_error",
        "message": "An internal error occurred",
        "metadata": None,
    }
    assert "secret detail" in caplog.text
    with override_settings(RIVET={"EXPOSE_ERRORS": True}):
        assert (
            "secret detail"
            in errors.public_error(RuntimeError("secret detail")).message
        )


def test_unknown_action_is_action_not_found():
    counter = actors.get_or_create("counter", "errors")
    with pytest.raises(ActionNotFound) as info:
        counter.call("nope")
    assert info.value.qualified_code == "actor/action_not_found"
    assert info.value.http_status == 404


@pytest.mark.parametrize(
    "args",
    [(1, 2), ("not an int",), (True,)],
    ids=["too-many", "wrong-type", "bool-for-int"],
)
def test_arguments_that_do_not_fit_the_signature_are_invalid_args(args):
    counter = actors.get_or_create("counter", "errors")
    with pytest.raises(InvalidArgs) as info:
        counter.call("increment", *args)
    assert info.value.qualified_code == "request/invalid_args"
    assert counter.call("getCount") == 0


def test_missing_argument_is_invalid_args():
    counter = actors.get_or_create("counter", "errors")
    with pytest.raises(InvalidArgs):
        counter.call("add_note_then_fail")
    assert Note.objects.count() == 0


def test_invalid_args_are_refused_before_the_actor_is_touched():
    with CaptureQueriesContext(connection) as queries, pytest.raises(InvalidArgs):
        invoke(
            ActorRef.of("counter", "never", mode="get_or_create"),
            CallAction("increment", ["x"]),
        )
    assert len(queries) == 0
    assert not ActorRow.objects.exists()


def test_get_of_a_missing_actor_is_not_found():
    with pytest.raises(ActorNotFound) as info:
        actors.get("counter", "missing")
    assert info.value.qualified_code == "actor/not_found"
    with pytest.raises(ActorNotFound):
        actors.get_by_id("00000000-0000-0000-0000-000000000000")
    with pytest.raises(ActorNotFound):
        actors.get_by_id("not-a-uuid")


def test_unknown_actor_name_is_not_found():
    with pytest.raises(ActorNotFound):
        actors.get_or_create("noSuchActor", "x")


@pytest.mark.parametrize(
    ("called", "meant"),
    [("Counter", "counter"), ("ChatRoom", "chatRoom"), ("chat_room", "chatRoom")],
)
def test_a_class_name_used_as_the_actor_name_suggests_the_actor_name(called, meant):
    with pytest.raises(ActorNotFound) as info:
        actors.get_or_create(called, "x").call("increment")
    assert info.value.message == f"Unknown actor {called!r}; did you mean {meant!r}?"


def test_an_unknown_name_far_from_every_actor_suggests_nothing():
    with pytest.raises(ActorNotFound) as info:
        actors.get_or_create("noSuchActor", "x")
    assert info.value.message == "Unknown actor 'noSuchActor'"


def test_create_of_an_existing_actor_is_already_exists():
    first = actors.create("counter", "unique")
    with pytest.raises(ActorAlreadyExists) as info:
        actors.create("counter", "unique")
    assert info.value.http_status == 409
    assert actors.get("counter", "unique") == first


@pytest.mark.parametrize(
    "key",
    ["x" * 129, ["a" * 128] * 9, [1], {"a": 1}],
    ids=["part-too-long", "key-too-long", "not-a-string", "not-a-sequence"],
)
def test_bad_keys_are_refused(key):
    with pytest.raises(InvalidKey):
        actors.get_or_create("counter", key)
    assert not ActorRow.objects.exists()


def test_key_normalization():
    assert actors.get_or_create("counter", "room") == actors.get_or_create(
        "counter", ["room"]
    )
    assert actors.get_or_create("counter", []) == actors.get_or_create("counter", None)
    compound = actors.get_or_create("counter", ["acme", "general"])
    assert compound.key == ("acme", "general")
    assert compound != actors.get_or_create("counter", "acme")
    # Limits are per part (128 bytes) and whole (1024 bytes), in UTF-8 bytes.
    actors.get_or_create("counter", ["é" * 64] * 8)


class Slow(Actor):
    name = "slow"
    initial_state = {"n": 0}

    @action
    def sync_sleep(self, ctx, seconds: float):
        ctx.state["n"] += 1
        Note.objects.create(text="sync")
        time.sleep(seconds)

    @action
    async def async_sleep(self, ctx, seconds: float):
        ctx.state["n"] += 1
        await Note.objects.acreate(text="async")
        await asyncio.sleep(seconds)


@pytest.mark.parametrize("kind", ["sync_sleep", "async_sleep"])
def test_action_timeout_rolls_back(kind):
    with register_temporarily(Slow), override_settings(RIVET={"ACTION_TIMEOUT": 0.2}):
        handle = actors.get_or_create("slow", "s")
        with pytest.raises(ActionTimeout) as info:
            handle.call(kind, 0.5)
        assert info.value.http_status == 504
        assert stored_state(handle) == {"n": 0}
        assert Note.objects.count() == 0


class Caller(Actor):
    name = "caller"
    initial_state = {"n": 0}

    @action
    def call_self(self, ctx):
        return ctx.actors.get_by_id(ctx.actor_id).call("bump")

    @action
    def bump(self, ctx):
        ctx.state["n"] += 1
        return ctx.state["n"]

    @action
    def bump_other_then_fail(self, ctx, key: str):
        ctx.actors.get_or_create("counter", key).call("increment")
        raise UserError("after calling another actor")

    @action
    async def abump_other(self, ctx, key: str, fail: bool):
        other = await ctx.actors.aget_or_create("counter", key)
        value = await other.acall("increment")
        if fail:
            raise UserError("after calling another actor")
        return value


@pytest.fixture
def caller():
    with register_temporarily(Caller):
        yield actors.get_or_create("caller", "c")


def test_an_actor_calling_itself_is_refused(caller):
    with pytest.raises(ReentrantCall):
        caller.call("call_self")
    assert caller.call("bump") == 1


def test_actor_to_actor_calls_join_the_callers_transaction(caller):
    with pytest.raises(UserError):
        caller.call("bump_other_then_fail", "other")
    assert not ActorRow.objects.filter(name="counter").exists()


def test_async_actor_to_actor_calls_join_the_callers_transaction(caller):
    assert caller.call("abump_other", "o", False) == 1
    with pytest.raises(UserError):
        caller.call("abump_other", "o", True)
    assert actors.get("counter", "o").call("getCount") == 1


# -- on_auth and origins ----
class Guarded(Actor):
    name = "guarded"
    initial_state = {"n": 0}
    seen = []

    def on_auth(self, ctx, info):
        self.seen.append((info.transport, info.action, info.headers.get("x-token")))
        if info.headers.get("x-token") != "ok":
            raise PermissionError("no token")

    @action
    def bump(self, ctx):
        ctx.state["n"] += 1
        return ctx.user.is_authenticated


def test_on_auth_guards_external_callers_only():
    Guarded.seen.clear()
    with register_temporarily(Guarded):
        ref = ActorRef.of("guarded", "g", mode="get_or_create")
        with pytest.raises(Forbidden) as info:
            invoke(ref, CallAction("bump", []), Origin(transport="http", headers={}))
        assert info.value.http_status == 403
        assert not ActorRow.objects.exists()  # the refused call created nothing
        ok = Origin(transport="http", headers={"x-token": "ok"})
        assert invoke(ref, CallAction("bump", []), ok) is False  # AnonymousUser
        assert actors.get("guarded", "g").call("bump") is False  # internal: no on_auth
    assert Guarded.seen == [("http", "bump", None), ("http", "bump", "ok")]


# -- threads ----
def test_rolled_back_state_is_never_reused_by_the_next_invocation():
    counter = actors.get_or_create("counter", "rollback")
    counter.call("increment")
    for _ in range(3):
        with pytest.raises(RuntimeError):
            counter.call("crash")  # mutates the cached state, then raises
    assert counter.call("getCount") == 1


def test_invocations_from_many_threads_keep_one_cache_consistent():
    counter = actors.get_or_create("counter", "mt")

    def work():
        for i in range(20):
            if i % 5 == 0:
                with pytest.raises(RuntimeError):
                    counter.call("crash")
            else:
                counter.call("increment")

    assert in_threads(work, 3) == []
    assert counter.call("getCount") == 48


def test_calls_by_id_to_a_loaded_actor_skip_the_name_lookup():
    actors.get_or_create("counter", "by-id")
    handle = actors.get("counter", "by-id")  # addresses the actor by id
    handle.call("increment")
    with CaptureQueriesContext(connection) as queries:
        assert handle.call("increment") == 2
    lookups = [q["sql"] for q in queries if q["sql"].startswith('SELECT "django_rivet')]
    assert lookups == []


# -- the state write's timestamp (issue 29) ------------------------------------------
def test_a_state_write_stamps_updated_at_with_the_clock():
    handle = actors.get_or_create("counter", "stamped")
    moment = datetime.datetime(2026, 12, 2, 11, 0, 0, 250_000, tzinfo=datetime.UTC)
    with freeze_time(moment):
        handle.call("increment")
    assert ActorRow.objects.get(pk=handle.actor_id).updated_at == moment
    with freeze_time(moment.replace(microsecond=0)):  # str() drops zero micros
        handle.call("increment")
    row = ActorRow.objects.get(pk=handle.actor_id)
    assert row.updated_at == moment.replace(microsecond=0)


@pytest.mark.parametrize("zone", [None, "Europe/Paris"])
def test_now_param_is_what_django_adapts_the_time_to(monkeypatch, zone):
    # The direct form on SQLite must match Django's conversion exactly, and
    # any other connection time zone (or database) must get Django's own.
    conn = db.connection()
    if zone is not None:
        monkeypatch.setattr(conn, "timezone_name", zone)
        monkeypatch.setattr(conn, "timezone", zoneinfo.ZoneInfo(zone))
    for moment in (1_796_209_200.25, 1_796_209_200.0, 1_796_209_200.000001):
        with freeze_time(moment):
            expected = conn.ops.adapt_datetimefield_value(clock.now_datetime())
            assert rows.now_param(conn) == expected
