"""Engine-level operations on a stored workflow, outside of a run.

The Django runtime calls these (with the workflow's driver) for handle and
admin actions: cancel, recover, resume, replay from a step, read the history,
the workflow fields and the published values. None of them runs workflow
code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django_rivet import clock

from . import history, keys, schema
from .driver import EngineDriver
from .errors import EntryNotFoundError, ReplayRefusedError, error_from_info
from .fields import UNSET
from .storage import Storage
from .values import WorkflowOutcome

__all__ = [
    "WorkflowSnapshot",
    "cancel_workflow",
    "finished_outcome",
    "fork_from",
    "read_event",
    "read_history",
    "read_reply",
    "read_workflow",
    "recover_workflow",
    "replay_from",
    "resume_workflow",
    "wake_workflow",
]


@dataclass(frozen=True, slots=True)
class WorkflowSnapshot:
    """The stored workflow fields (``error`` is the stored ``{name, message}``)."""

    state: str
    output: Any
    error: dict[str, Any] | None
    input: Any


async def read_workflow(driver: EngineDriver) -> WorkflowSnapshot:
    """Return the stored state, output, error and input of the driver's workflow."""
    values: dict[int, Any] = {}
    for key, value in await driver.list(keys.pack((keys.WORKFLOW,))):
        field_id = keys.unpack(key)[1]
        values[field_id] = schema.decode_workflow_field(field_id, value)
    return WorkflowSnapshot(
        state=values.get(keys.WORKFLOW_STATE, "pending"),
        output=values.get(keys.WORKFLOW_OUTPUT),
        error=values.get(keys.WORKFLOW_ERROR),
        input=values.get(keys.WORKFLOW_INPUT),
    )


async def read_history(driver: EngineDriver) -> list[history.HistoryEntry]:
    """Return the decoded history of the driver's workflow, in creation order."""
    return history.decode_history(await driver.list(b""))


async def read_event(driver: EngineDriver, key: str) -> tuple[bool, Any]:
    """Return ``(found, value)`` of the event ``key`` the workflow published."""
    data = await driver.get(keys.event_key(key))
    if data is None:
        return False, None
    return True, schema.decode_published("event", data)


async def read_reply(driver: EngineDriver, message_id: str) -> tuple[bool, Any]:
    """Return ``(found, value)`` of the workflow's reply to ``message_id``."""
    data = await driver.get(keys.reply_key(message_id))
    if data is None:
        return False, None
    return True, schema.decode_published("reply", data)


def finished_outcome(storage: Storage) -> WorkflowOutcome:
    """Return the outcome of a workflow stored as completed or failed."""
    if storage.state == "completed":
        return WorkflowOutcome(
            "completed", output=storage.get_field(keys.WORKFLOW_OUTPUT)
        )
    error = error_from_info(storage.get_field(keys.WORKFLOW_ERROR))
    return WorkflowOutcome("failed", error=error)


async def cancel_workflow(workflow_id: str, driver: EngineDriver) -> None:
    """Mark the workflow cancelled and drop its alarm; later runs do nothing."""
    await driver.set(
        keys.workflow_key(keys.WORKFLOW_STATE),
        schema.encode_workflow_field(keys.WORKFLOW_STATE, "cancelled"),
    )
    await driver.clear_alarm(workflow_id)


async def wake_workflow(workflow_id: str, driver: EngineDriver) -> None:
    """Ask for the workflow to run now."""
    await driver.set_alarm(workflow_id, clock.now())


async def recover_workflow(workflow_id: str, driver: EngineDriver) -> bool:
    """Reset the failed and exhausted steps of a failed workflow and wake it.

    Returns False (and changes nothing) unless the workflow is ``failed``.
    """
    storage = await Storage.load(driver)
    if storage.state != "failed":
        return False
    for metadata in storage.metadata.values():
        if metadata.status in ("failed", "exhausted"):
            metadata.status = "pending"
            metadata.attempts = 0
            metadata.last_attempt_at = None
            metadata.error = None
            metadata.touch()
    for entry in storage.entries.values():
        if entry.kind not in ("join", "race"):
            continue
        branches = entry.data.get("branches", {})
        failed = [b for b, r in branches.items() if r.get("status") == "failed"]
        if failed:
            reset = {b: {"status": "pending"} for b in failed}
            storage.update(entry, "", branches={**branches, **reset})
            metadata = storage.meta(entry)
            metadata.status = "running"
            metadata.touch()
    storage.set_field(keys.WORKFLOW_ERROR, UNSET)
    storage.state = "sleeping"
    await storage.flush()
    await driver.set_alarm(workflow_id, clock.now())
    return True


async def resume_workflow(workflow_id: str, driver: EngineDriver) -> bool:
    """Let a cancelled workflow go on from where it stopped, and wake it.

    Returns False (and changes nothing) unless the workflow is ``cancelled``
    and no rollback handler ran for it: work its cancellation compensated
    must not be replayed as if it still stood.
    """
    storage = await Storage.load(driver)
    if storage.state != "cancelled":
        return False
    if any(m.rollback_completed_at is not None for m in storage.metadata.values()):
        return False
    storage.set_field(keys.WORKFLOW_ERROR, UNSET)
    storage.state = "sleeping"
    await storage.flush()
    await driver.set_alarm(workflow_id, clock.now())
    return True


async def replay_from(
    workflow_id: str,
    driver: EngineDriver,
    entry_id: str | None = None,
    *,
    schedule: bool = True,
) -> list[history.HistoryEntry]:
    """Delete a step and every entry created after it, so they run again.

    A step inside a loop rewinds its innermost enclosing loop (the loop entry
    and everything after it go), and a step inside a join or race branch
    rewinds that join or race. Without ``entry_id`` the whole history goes and
    the workflow starts over (its input is kept). Refuses while a step that
    would be kept is running. Returns the remaining history.
    """
    storage = await Storage.load(driver)
    ordered = sorted(storage.entries.values(), key=lambda entry: entry.seq)
    if entry_id is None:
        doomed = ordered
    else:
        target = next((e for e in ordered if e.id == entry_id), None)
        if target is None:
            raise EntryNotFoundError(f"No history entry has id {entry_id!r}")
        if target.kind != "step":
            raise ReplayRefusedError("The replay target must be a step")
        boundary = _boundary(storage, target)
        depth = len(boundary.location)
        doomed = [
            e
            for e in ordered
            if e.seq >= boundary.seq or e.location[:depth] == boundary.location
        ]
    doomed_ids = {entry.id for entry in doomed}
    for entry in ordered:
        metadata = storage.metadata.get(entry.id)
        if entry.id not in doomed_ids and metadata and metadata.status == "running":
            raise ReplayRefusedError(
                "Cannot replay the workflow while a step is running"
            )
    for entry in doomed:
        storage.delete_entry(entry.location)
    storage.set_field(keys.WORKFLOW_OUTPUT, UNSET)
    storage.set_field(keys.WORKFLOW_ERROR, UNSET)
    storage.state = "sleeping"
    await storage.flush()
    if schedule:
        await driver.set_alarm(workflow_id, clock.now())
    remaining = sorted(storage.entries.values(), key=lambda entry: entry.seq)
    return [
        history.history_entry(e, storage.metadata.get(e.id), storage.names)
        for e in remaining
    ]


async def fork_from(
    workflow_id: str, driver: EngineDriver, location: str
) -> list[history.HistoryEntry]:
    """Cut a copied history back to before the step at ``location``.

    For ``handle.fork``: the driver holds a copy of another workflow's
    history, which keeps what was recorded before that step (the step and
    what came after it run again, as :func:`replay_from` rewinds them) and
    the values published up to there (each event's last value before the
    step; replies belong to the original's requesters and go). Returns the
    remaining history. An unknown location or one of no step is
    :class:`EntryNotFoundError`.
    """
    storage = await Storage.load(driver)
    found = [
        entry
        for entry in storage.entries.values()
        if entry.kind == "step"
        and history.location_string(entry.location, storage.names) == location
    ]
    if not found:
        raise EntryNotFoundError(f"No step of the history is at {location!r}")
    remaining = await replay_from(workflow_id, driver, found[0].id, schedule=False)
    events = {}
    for entry in remaining:
        if entry.kind == "event":
            events[entry.data.get("key")] = entry.data.get("value")
    for key, _ in await driver.list(keys.pack((keys.PUBLISHED,))):
        await driver.delete(key)
    for name, value in events.items():
        record = schema.encode_published("event", value)
        await driver.set(keys.event_key(str(name)), record)
    return remaining


def _boundary(storage: Storage, target: schema.Entry) -> schema.Entry:
    """Return the entry a replay of ``target`` has to start from."""
    boundary = target
    location = target.location
    for depth in range(len(location) - 1, 0, -1):
        ancestor = storage.entries.get(location[:depth])
        if ancestor is None:
            continue
        if ancestor.kind == "loop":
            return ancestor
        if ancestor.kind in ("join", "race"):
            boundary = ancestor
    return boundary
