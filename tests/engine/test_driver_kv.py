"""InMemoryDriver against the EngineDriver contract."""

from __future__ import annotations

from django_rivet.engine import InMemoryDriver

from .driver_contract import EngineDriverContract


class TestInMemoryDriver(EngineDriverContract):
    def make_driver(self):
        return InMemoryDriver()


async def test_in_memory_driver_is_easy_to_subclass_to_fail_calls(clock):
    class Broken(InMemoryDriver):
        async def batch(self, writes):
            raise OSError("disk full")

    driver = Broken()
    try:
        await driver.batch([(b"k", b"v")])
    except OSError:
        pass
    assert driver.kv == {}
