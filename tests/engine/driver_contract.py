"""The EngineDriver contract, as a mixin to run against every driver.

Subclass :class:`EngineDriverContract` in a ``Test*`` class and implement
``make_driver()`` (the Django driver's suite does the same with its database
fixtures). Each test gets a fresh driver scoped to one workflow.
"""

from __future__ import annotations

import asyncio

import pytest

from django_rivet.engine import EngineDriver, Message, keys


def k(*parts) -> bytes:
    return keys.pack(parts)


class EngineDriverContract:
    """KV, message and transaction behaviour every driver must have."""

    def make_driver(self) -> EngineDriver:
        raise NotImplementedError

    @pytest.fixture
    def subject(self, clock) -> EngineDriver:
        return self.make_driver()

    def test_declares_its_batching_and_poll_interval(self, subject):
        assert isinstance(subject, EngineDriver)
        assert isinstance(subject.atomic_batch, bool)
        assert subject.worker_poll_interval > 0

    async def test_get_set_delete(self, subject):
        assert await subject.get(k(1)) is None
        await subject.set(k(1), b"one")
        assert await subject.get(k(1)) == b"one"
        await subject.set(k(1), b"uno")
        assert await subject.get(k(1)) == b"uno"
        await subject.delete(k(1))
        await subject.delete(k(1))  # deleting a missing key is fine
        assert await subject.get(k(1)) is None

    async def test_list_returns_a_prefix_in_byte_order(self, subject):
        keys_in = [k(2, 10), k(2, 1), k(2, (1, 2), 3), k(2, "b"), k(3, 1), k(1, 2)]
        for index, key in enumerate(keys_in):
            await subject.set(key, bytes([index]))
        listed = await subject.list(k(2))
        assert [key for key, _ in listed] == sorted(
            key for key in keys_in if key.startswith(k(2))
        )
        assert dict(listed)[k(2, 1)] == bytes([1])
        everything = await subject.list(b"")
        assert [key for key, _ in everything] == sorted(keys_in)

    async def test_prefix_isolation(self, subject):
        await subject.set(k(2, 1), b"a")
        await subject.set(k(2, 256), b"b")  # shares no element with (2, 1)
        await subject.set(k(2, 1, 5), b"c")
        assert [key for key, _ in await subject.list(k(2, 1))] == [k(2, 1), k(2, 1, 5)]
        await subject.delete_prefix(k(2, 1))
        assert [key for key, _ in await subject.list(b"")] == [k(2, 256)]

    async def test_delete_range_is_half_open(self, subject):
        for index in range(6):
            await subject.set(k(2, (7, index), 1), b"x")
        await subject.delete_range(k(2, (7, 1)), k(2, (7, 4)))
        left = [keys.unpack(key)[1][1] for key, _ in await subject.list(k(2))]
        assert left == [0, 4, 5]

    async def test_batch_and_batch_delete(self, subject):
        await subject.batch([(k(4, str(i)), b"v%d" % i) for i in range(128)])
        assert len(await subject.list(k(4))) == 128
        await subject.batch_delete([k(4, str(i)) for i in range(0, 128, 2)])
        assert len(await subject.list(k(4))) == 64
        await subject.batch([])
        await subject.batch_delete([])

    async def test_values_are_bytes_in_and_bytes_out(self, subject):
        value = bytes(range(256)) * 4
        await subject.set(k(9), value)
        assert await subject.get(k(9)) == value

    async def test_messages_are_fifo_and_filtered_by_name(self, subject):
        first = await subject.add_message("a", {"n": 1})
        await subject.add_message("b", {"n": 2})
        await subject.add_message("a", {"n": 3})
        got = await subject.receive_messages(["a"], 5, False)
        assert [m.body for m in got] == [{"n": 1}, {"n": 3}]
        assert all(isinstance(m, Message) for m in got)
        assert got[0].id == first and got[0].name == "a"
        assert [m.body for m in await subject.receive_messages(None, 5, False)] == [
            {"n": 2}
        ]
        assert await subject.receive_messages(None, 5, False) == []

    async def test_completable_messages_stay_until_completed(self, subject):
        message_id = await subject.add_message("a", "body")
        [held] = await subject.receive_messages(None, 1, True)
        [again] = await subject.receive_messages(None, 1, True)
        assert held.id == again.id == message_id
        await subject.complete_message(message_id, {"ok": True})
        await subject.complete_message(message_id, None)  # unknown id: no-op
        assert await subject.receive_messages(None, 1, True) == []

    async def test_batch_completing_writes_and_completes_at_once(self, subject):
        kept = await subject.add_message("a", 1)
        taken = await subject.add_message("a", 2)
        await subject.batch_completing([(b"\x01", b"received")], [taken])
        assert await subject.get(b"\x01") == b"received"
        assert [m.id for m in await subject.receive_messages(None, 5, True)] == [kept]
        await subject.batch_completing([(b"\x02", b"x")], [taken])  # gone: no-op
        assert await subject.get(b"\x02") == b"x"

    async def test_count_limits_a_receive(self, subject):
        for index in range(3):
            await subject.add_message("m", index)
        assert [m.body for m in await subject.receive_messages(["m"], 2, True)] == [
            0,
            1,
        ]

    async def test_alarms_can_be_set_and_cleared(self, subject):
        await subject.set_alarm("wf-1", 123.0)
        await subject.set_alarm("wf-1", 456.0)
        await subject.clear_alarm("wf-1")
        await subject.clear_alarm("wf-unknown")

    async def test_run_transactional_runs_fn_then_writes(self, subject):
        order = []

        async def fn():
            order.append("fn")
            await asyncio.sleep(0)
            return "out"

        def make_writes(output):
            order.append(f"writes:{output}")
            return [(k(2, 1), b"entry"), (k(4, "id"), b"meta")]

        assert await subject.run_transactional(fn, make_writes) == "out"
        assert order == ["fn", "writes:out"]
        assert await subject.get(k(2, 1)) == b"entry"

    async def test_run_transactional_writes_nothing_when_make_writes_fails(
        self, subject
    ):
        def make_writes(output):
            raise ValueError("unstorable")

        with pytest.raises(ValueError):
            await subject.run_transactional(lambda: "out", make_writes)
        assert await subject.list(b"") == []
