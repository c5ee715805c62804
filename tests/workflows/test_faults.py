"""The fault matrix of ``tests/engine/test_faults.py`` on ``DjangoDriver``.

The same scenarios and checks (``tests/engine/faults.py``), on the test
database: SQLite here, PostgreSQL in the PostgreSQL leg of ``make test``.
Every call number with every fault kind, as in memory: a few seconds per
leg. Both the chunked default and ``KV_ATOMIC_FLUSH``'s one transaction per
flush.
"""

from __future__ import annotations

import itertools

import pytest
from asgiref.sync import sync_to_async

from django_rivet.clock import freeze_time
from django_rivet.models import Workflow
from django_rivet.workflows.driver import DjangoDriver
from tests.engine.faults import KINDS, SCENARIOS, Scenario, check_recovery, reference

# pg: the PostgreSQL leg runs this module (rollbacks of failed flushes, in
# transactions).
pytestmark = [pytest.mark.pg, pytest.mark.django_db(transaction=True)]

_ids = itertools.count()


async def fresh_driver(atomic: bool) -> DjangoDriver:
    workflow_id = f"fault-{next(_ids)}"
    await sync_to_async(Workflow.objects.create)(id=workflow_id, name="faults")
    return DjangoDriver(workflow_id, atomic_batch=atomic)


@pytest.mark.parametrize("atomic", [False, True], ids=["chunked", "atomic"])
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
async def test_faults_at_driver_calls_are_recovered_on_the_database(
    scenario: Scenario, atomic: bool
):
    with freeze_time(1_700_000_000) as clock:
        driver = await fresh_driver(atomic)
        expected = await reference(clock, scenario, driver.workflow_id, driver)
        assert expected.calls > 5
        for at in range(1, expected.calls + 1):
            for kind in KINDS:
                driver = await fresh_driver(atomic)
                fired = await check_recovery(
                    clock, scenario, driver.workflow_id, driver, expected, at, kind
                )
                assert fired is not None, f"call {at} never happened"
