"""The fault matrix of ``tests/engine/test_faults.py`` on ``DjangoDriver``.

The same scenarios and checks (``tests/engine/faults.py``), on the test
database: SQLite here, PostgreSQL in the PostgreSQL leg of ``make test``.
Every call number with every fault kind, as in memory: a few seconds per
leg. Both the chunked default and ``KV_ATOMIC_FLUSH``'s one transaction per
flush; and with ``WORKFLOW_LIVE_WAIT`` on, the scripted messages sent while
the run waits in its live window (woken by the in-process signal).
"""

from __future__ import annotations

import itertools

import pytest
from asgiref.sync import sync_to_async
from django.test import override_settings

from django_rivet.clock import freeze_time
from django_rivet.models import Workflow
from django_rivet.workflows.driver import DjangoDriver
from tests.engine.faults import SCENARIOS, Scenario, check_every_fault, reference

# pg: the PostgreSQL leg runs this module (rollbacks of failed flushes, in
# transactions).
pytestmark = [pytest.mark.pg, pytest.mark.django_db(transaction=True)]

_ids = itertools.count()


async def fresh_driver(atomic: bool) -> DjangoDriver:
    workflow_id = f"fault-{next(_ids)}"
    await sync_to_async(Workflow.objects.create)(id=workflow_id, name="faults")
    return DjangoDriver(workflow_id, atomic_batch=atomic)


@pytest.mark.parametrize("live_wait", [0.0, 120.0], ids=["yield", "live"])
@pytest.mark.parametrize("atomic", [False, True], ids=["chunked", "atomic"])
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
async def test_faults_at_driver_calls_are_recovered_on_the_database(
    scenario: Scenario, atomic: bool, live_wait: float
):
    with (
        freeze_time(1_700_000_000) as clock,
        override_settings(RIVET={"WORKFLOW_LIVE_WAIT": live_wait}),
    ):
        driver = await fresh_driver(atomic)
        expected = await reference(
            clock, scenario, driver.workflow_id, driver, live_wait
        )
        assert expected.calls > 5
        if live_wait and scenario.messages:
            assert expected.called["wait_for_messages"] > 0
            assert expected.called["list"] == 1  # every wait was served live

        async def fresh():
            driver = await fresh_driver(atomic)
            return driver.workflow_id, driver

        await check_every_fault(clock, scenario, fresh, expected, live_wait)
