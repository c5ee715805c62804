"""Every driver call of every scenario fails or crashes once; the workflow recovers.

For each scenario of ``faults.SCENARIOS`` (steps, loops with pruning, join,
race, sleep, messages, rollback) the fault-free run is counted, then for
every call number N and each fault kind (fail, crash before the call, crash
after it) a fresh in-memory driver runs it with that one fault, and fresh
runs on the same storage must end exactly as the fault-free run did, with no
acknowledged step or rollback redone (see ``faults.check_recovery``). Both
a chunking driver and an atomic one; and with a live window
(``live_wait``), where the scripted messages arrive while the run waits
in process and the sleeps within the window are slept there.
"""

from __future__ import annotations

import pytest

from django_rivet.engine import InMemoryDriver

from .faults import KINDS, SCENARIOS, Scenario, check_every_fault, reference


class AtomicInMemoryDriver(InMemoryDriver):
    atomic_batch = True


@pytest.mark.parametrize("live_wait", [0.0, 120.0], ids=["yield", "live"])
@pytest.mark.parametrize("atomic", [False, True], ids=["chunked", "atomic"])
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
async def test_every_fault_at_every_driver_call_is_recovered(
    clock, scenario: Scenario, atomic: bool, live_wait: float
):
    make = AtomicInMemoryDriver if atomic else InMemoryDriver
    expected = await reference(clock, scenario, "wf", make(), live_wait)
    assert expected.outcome[0] in ("completed", "failed")
    assert expected.calls > 5
    if live_wait and scenario.messages:
        # The messages were received in the window, history in memory: one
        # load for the whole workflow.
        assert expected.called["wait_for_messages"] > 0
        assert expected.called["list"] == 1

    async def fresh():
        return "wf", make()

    faulted = await check_every_fault(clock, scenario, fresh, expected, live_wait)
    # Every kind of call the scenario makes was faulted at least once.
    assert sum(faulted.values()) == expected.calls * len(KINDS)
