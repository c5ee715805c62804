"""Storage limits and atomic flushes through the Django runtime and DjangoDriver.

The engine's own rules (``tests/engine/test_storage_limits.py``) hold on
the database: oversized inputs and message bodies are refused to the caller
by ``workflows.start`` and ``handle.send``; a flush ``KV_ATOMIC_FLUSH``
refuses as too large fails its step once, as critical, and the workflow
``failed`` without a retry loop; pruning loops flush in one transaction.
"""

from __future__ import annotations

import pytest
from django.test import override_settings

from django_rivet import workflows
from django_rivet.engine import (
    MAX_KV_BATCH_PAYLOAD_BYTES,
    MAX_MESSAGE_BODY_BYTES,
    StorageLimitError,
)
from django_rivet.models import Workflow, WorkflowMessage
from django_rivet.testing import freeze_time, run_until_idle
from django_rivet.workflows.driver import DjangoDriver
from tests.testapp.models import StepRow

# pg: the PostgreSQL leg runs this module (atomic flushes and size limits in
# transactions).
pytestmark = [pytest.mark.pg, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def clock():
    with freeze_time(1_700_000_000) as frozen:
        yield frozen


def test_an_oversized_input_is_refused_at_start(clock):
    with pytest.raises(StorageLimitError) as refused:
        workflows.start("greet", {"name": "x" * MAX_KV_BATCH_PAYLOAD_BYTES}, id="big")
    assert refused.value.qualified_code == "workflow/storage_limit"
    assert "Workflow input" in str(refused.value)
    assert not Workflow.objects.filter(pk="big").exists()


def test_an_oversized_message_is_refused_to_the_sender(clock):
    handle = workflows.start("approval", {}, id="inbox")
    assert run_until_idle(handle) == "sleeping"
    with pytest.raises(StorageLimitError) as refused:
        handle.send("approve", {"by": "x" * MAX_MESSAGE_BODY_BYTES})
    assert f"{MAX_MESSAGE_BODY_BYTES} byte limit" in str(refused.value)
    assert not WorkflowMessage.objects.exists()
    handle.send("approve", {"by": "ann"})
    assert run_until_idle(handle) == "completed"
    assert handle.result() == {"approved_by": "ann"}


def test_an_oversized_step_output_fails_the_workflow_in_one_run(clock):
    handle = workflows.start("bulky", {"count": 11, "size": 10}, id="ok")
    assert run_until_idle(handle) == "completed"
    handle = workflows.start("bulky", {"count": 0, "size": 2**20}, id="huge")
    assert run_until_idle(handle) == "failed"
    with pytest.raises(StorageLimitError, match='Output of step "last"'):
        handle.result()
    row = Workflow.objects.get(pk="huge")
    assert row.retry_count == 0 and row.run_count == 1
    assert StepRow.objects.filter(workflow_id="huge").count() == 1


def test_a_flush_the_atomic_driver_refuses_fails_its_step_once(clock):
    # 10 ephemeral outputs of 950 KiB fit one record each; the flush writing
    # them with the last step's is over 10 MiB, and refused: the last step
    # fails, and without its output the rest fits.
    size = 950 * 1024
    with override_settings(RIVET={"KV_ATOMIC_FLUSH": True}):
        handle = workflows.start("bulky", {"count": 10, "size": size}, id="unit")
        assert run_until_idle(handle) == "failed"
        with pytest.raises(StorageLimitError, match="atomic flush"):
            handle.result()
        row = Workflow.objects.get(pk="unit")
        assert row.status == "failed" and row.retry_count == 0
        history = handle.history()
        last = history[-1]
        assert last.location == "last" and last.status == "exhausted"
        assert "output" not in last.data and last.error["kind"] == "critical"
        # The ephemeral steps before it were written with the failure.
        assert [h.status for h in history[:-1]] == ["completed"] * 10
        # Its side effect ran once; running again changes nothing.
        assert run_until_idle(handle) == "failed"
    assert StepRow.objects.filter(workflow_id="unit", step="last").count() == 1


def test_an_atomic_driver_writes_each_pruning_flush_in_one_call(clock, monkeypatch):
    calls = []
    for name in ("batch", "batch_delete", "delete_range", "delete_prefix"):
        original = getattr(DjangoDriver, name)

        async def counting(self, *args, _name=name, _original=original):
            calls.append(_name)
            return await _original(self, *args)

        monkeypatch.setattr(DjangoDriver, name, counting)
    original_flush = DjangoDriver.atomic_flush

    async def counting_flush(self, writes, deletions):
        calls.append("atomic_flush" + ("+ranges" if deletions.ranges else ""))
        return await original_flush(self, writes, deletions)

    monkeypatch.setattr(DjangoDriver, "atomic_flush", counting_flush)
    with override_settings(RIVET={"KV_ATOMIC_FLUSH": True}):
        handle = workflows.start("pruner", {"n": 9}, id="pruner")
        assert run_until_idle(handle) == "completed"
    assert handle.result() == 9
    assert set(calls) == {"atomic_flush", "atomic_flush+ranges"}
    assert calls.count("atomic_flush+ranges") == 3  # at iterations 4, 6, 8
    assert [h.location for h in handle.history()] == [
        "ticks",
        "ticks/~6/tick",
        "ticks/~7/tick",
        "ticks/~8/tick",
    ]
