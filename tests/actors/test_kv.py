"""The actor KV contract, run against two ways of reaching the store.

``TestKVStore`` uses :class:`ActorKVStore` directly; ``TestKVThroughInvocations``
runs every call as an action using ``ctx.kv``, inside the invocation's
transaction. ``make test`` runs both on SQLite and on PostgreSQL, which is
where bytewise ordering (BLOB vs bytea) matters.
"""

import datetime

import pytest

from django_rivet import (
    Actor,
    KVKeyTooLarge,
    KVPayloadTooLarge,
    KVTooManyKeys,
    KVValueTooLarge,
    action,
    actors,
)
from django_rivet.actors import kv as kv_module
from django_rivet.actors.kv import ActorKVStore, prefix_end
from django_rivet.models import Actor as ActorRow
from django_rivet.models import ActorKV
from django_rivet.testing import register_temporarily

# pg: the PostgreSQL leg runs this module (bytewise key order (BLOB vs bytea) and
# range scans in raw SQL).
pytestmark = [pytest.mark.pg, pytest.mark.django_db(transaction=True)]

BINARY_KEYS = [
    b"",
    b"\x00",
    b"\x00\x00",
    b"\x00\xff",
    b"\x01",
    b"\x7f",
    b"\x80",
    b"a",
    b"ab",
    b"b",
    b"\xfe\xff",
    b"\xff",
    b"\xff\x00",
    b"\xff\xff",
]


class KVContract:
    """Behaviour every way of using the actor KV must show."""

    @pytest.fixture
    def kv(self):
        raise NotImplementedError

    def rows(self):
        return ActorKV.objects.count()

    # -- basic operations ------------------------------------------------------
    def test_missing_key_reads_none(self, kv):
        assert kv.get("nope") is None
        assert kv.get_many(["a", b"b"]) == [None, None]

    def test_put_then_get_round_trips_cbor_values(self, kv):
        value = {
            "n": 1,
            "f": 1.5,
            "list": [1, "two", None, True],
            "bytes": b"\x00\x01",
            "at": datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
        }
        kv.put("doc", value)
        assert kv.get("doc") == value

    def test_str_keys_are_their_utf8_bytes(self, kv):
        kv.put("é", 1)
        assert kv.get("é".encode()) == 1

    def test_put_overwrites(self, kv):
        kv.put("k", 1)
        kv.put("k", 2)
        assert kv.get("k") == 2
        assert self.rows() == 1

    def test_raw_codec_stores_bytes_as_they_are(self, kv):
        kv.put(b"raw", b"\x00\xffdata", codec="raw")
        assert kv.get(b"raw", codec="raw") == b"\x00\xffdata"
        assert bytes(ActorKV.objects.get().value) == b"\x00\xffdata"

    def test_get_many_keeps_order_and_reports_missing(self, kv):
        kv.put_many([("a", 1), ("c", 3)])
        assert kv.get_many(["c", "b", "a"]) == [3, None, 1]

    def test_put_many_accepts_a_dict_and_upserts(self, kv):
        kv.put("a", 0)
        kv.put_many({"a": 1, "b": 2})
        assert kv.get_many(["a", "b"]) == [1, 2]

    def test_delete_and_delete_many(self, kv):
        kv.put_many([("a", 1), ("b", 2), ("c", 3)])
        kv.delete("a")
        kv.delete("missing")
        kv.delete_many(["b", "zzz"])
        assert kv.list() == [(b"c", 3)]

    # -- ordering and listing --------------------------------------------------------
    def test_list_orders_binary_keys_bytewise(self, kv):
        shuffled = BINARY_KEYS[::3] + BINARY_KEYS[1::3] + BINARY_KEYS[2::3]
        kv.put_many([(key, i) for i, key in enumerate(shuffled)])
        assert [key for key, _ in kv.list()] == sorted(BINARY_KEYS)
        assert [key for key, _ in kv.list(reverse=True)] == sorted(BINARY_KEYS)[::-1]

    def test_list_with_prefix_strips_it(self, kv):
        kv.put_many([("user:1", "ann"), ("user:2", "bob"), ("users", 0), ("v", 0)])
        assert kv.list(prefix="user:") == [("1", "ann"), ("2", "bob")]
        assert kv.list(prefix=b"user:") == [(b"1", "ann"), (b"2", "bob")]

    def test_list_prefix_of_ff_bytes_reaches_the_end_of_the_keyspace(self, kv):
        kv.put_many([(key, 0) for key in BINARY_KEYS])
        assert [k for k, _ in kv.list(prefix=b"\xff")] == [b"", b"\x00", b"\xff"]
        assert [k for k, _ in kv.list(prefix=b"\xff\xff")] == [b""]

    def test_list_range_is_half_open(self, kv):
        kv.put_many([(k, 0) for k in (b"a", b"b", b"c", b"d")])
        assert [k for k, _ in kv.list(start=b"b", end=b"d")] == [b"b", b"c"]

    def test_list_start_and_end_are_relative_to_the_prefix(self, kv):
        kv.put_many([(f"log:{i:03}", i) for i in range(10)] + [("other", 0)])
        assert kv.list(prefix="log:", start="003", end="006") == [
            ("003", 3),
            ("004", 4),
            ("005", 5),
        ]

    def test_reverse_with_limit_returns_the_last_keys(self, kv):
        kv.put_many([(f"k{i}", i) for i in range(10)])
        assert kv.list(prefix="k", reverse=True, limit=3) == [
            ("9", 9),
            ("8", 8),
            ("7", 7),
        ]
        assert kv.list(limit=2) == [(b"k0", 0), (b"k1", 1)]

    def test_delete_prefix(self, kv):
        kv.put_many([("a:1", 0), ("a:2", 0), ("a;", 0), ("b", 0)])
        kv.delete_prefix("a:")
        assert [k for k, _ in kv.list()] == [b"a;", b"b"]

    def test_delete_prefix_of_ff_bytes(self, kv):
        kv.put_many([(key, 0) for key in BINARY_KEYS])
        kv.delete_prefix(b"\xff")
        assert [k for k, _ in kv.list()] == [
            k for k in sorted(BINARY_KEYS) if k[:1] != b"\xff"
        ]

    def test_delete_range_is_half_open(self, kv):
        kv.put_many([(k, 0) for k in (b"a", b"b", b"c", b"d")])
        kv.delete_range(b"b", b"d")
        assert [k for k, _ in kv.list()] == [b"a", b"d"]

    # -- limits: a clear error and nothing written ---------------------------------
    def test_key_over_2048_bytes_is_refused(self, kv):
        kv.put(b"k" * 2048, 1)
        with pytest.raises(KVKeyTooLarge) as info:
            kv.put(b"k" * 2049, 1)
        assert info.value.qualified_code == "actor/kv_key_too_large"
        assert self.rows() == 1

    def test_value_over_128_kib_is_refused(self, kv):
        kv.put("ok", b"x" * (128 * 1024), codec="raw")
        with pytest.raises(KVValueTooLarge) as info:
            kv.put("big", b"x" * (128 * 1024 + 1), codec="raw")
        assert info.value.qualified_code == "actor/kv_value_too_large"
        assert kv.get("big") is None

    def test_more_than_128_keys_per_call_is_refused(self, kv):
        kv.put_many([(f"k{i}", i) for i in range(128)])
        assert self.rows() == 128
        with pytest.raises(KVTooManyKeys) as info:
            kv.put_many([(f"n{i}", i) for i in range(129)])
        assert info.value.qualified_code == "actor/kv_too_many_keys"
        with pytest.raises(KVTooManyKeys):
            kv.get_many([f"k{i}" for i in range(129)])
        with pytest.raises(KVTooManyKeys):
            kv.delete_many([f"k{i}" for i in range(129)])
        assert self.rows() == 128

    def test_put_many_over_976_kib_is_refused_whole(self, kv):
        items = [(f"k{i}", b"x" * (100 * 1024)) for i in range(10)]
        with pytest.raises(KVPayloadTooLarge) as info:
            kv.put_many(items, codec="raw")
        assert info.value.qualified_code == "actor/kv_payload_too_large"
        assert self.rows() == 0

    def test_one_bad_item_fails_the_whole_put_many(self, kv):
        with pytest.raises(KVKeyTooLarge):
            kv.put_many([("good", 1), (b"k" * 3000, 2)])
        with pytest.raises(KVValueTooLarge):
            kv.put_many([("good", b"1"), ("bad", b"x" * (200 * 1024))], codec="raw")
        assert self.rows() == 0

    def test_actor_quota_is_enforced_and_freed_by_deletes(self, kv, monkeypatch):
        monkeypatch.setattr(kv_module, "MAX_ACTOR_KV_BYTES", 1000)
        kv.put("a", b"x" * 600, codec="raw")
        with pytest.raises(KVPayloadTooLarge):
            kv.put("b", b"x" * 600, codec="raw")
        assert kv.get("b") is None
        kv.put("a", b"x" * 100, codec="raw")  # shrinking frees room
        kv.put("b", b"x" * 600, codec="raw")
        kv.delete_prefix("")
        kv.put("c", b"x" * 900, codec="raw")
        assert ActorRow.objects.get().kv_size == 901


class TestKVStore(KVContract):
    @pytest.fixture
    def kv(self):
        handle = actors.get_or_create("counter", "kv-test")
        return ActorKVStore(handle.actor_id)

    async def test_async_twins(self, kv):
        await kv.aput("a", 1)
        await kv.aput_many([("b", 2), ("c", 3)])
        assert await kv.aget("a") == 1
        assert await kv.aget_many(["b", "c"]) == [2, 3]
        assert await kv.alist(prefix="b") == [("", 2)]
        await kv.adelete("a")
        await kv.adelete_many(["b"])
        await kv.aput_many([("x1", 1), ("x2", 2), ("y", 3)])
        await kv.adelete_range("x2", "y")
        await kv.adelete_prefix("x")
        assert await kv.alist() == [(b"c", 3), (b"y", 3)]


class KVProxy(Actor):
    """Runs one KV method per action, so each call is its own invocation."""

    name = "kvProxy"

    @action
    def kv(self, ctx, method: str, args: list, kwargs: dict):
        return getattr(ctx.kv, method)(*args, **kwargs)


class ThroughInvocations:
    def __init__(self, handle):
        self.handle = handle

    def __getattr__(self, method):
        def call(*args, **kwargs):
            return self.handle.call("kv", method, list(args), kwargs)

        return call


class TestKVThroughInvocations(KVContract):
    @pytest.fixture
    def kv(self):
        with register_temporarily(KVProxy):
            yield ThroughInvocations(actors.get_or_create("kvProxy", "kv-test"))


def test_prefix_end():
    assert prefix_end(b"a") == b"b"
    assert prefix_end(b"a\xff") == b"b"
    assert prefix_end(b"\xff\xff") is None
    assert prefix_end(b"") is None


def test_kv_is_removed_with_its_actor():
    handle = actors.get_or_create("counter", "doomed")
    ActorKVStore(handle.actor_id).put("k", 1)
    handle.destroy()
    assert ActorKV.objects.count() == 0
