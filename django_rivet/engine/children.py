"""``ctx.child`` and ``ctx.start_child``: workflows a workflow starts.

A child is one ``child`` entry. Its id defaults to ``"<parent id>/<entry
location>"``, so a replay asks the host to start the same child again, which
starts nothing new (starting is idempotent per id). The host (the driver)
starts it *before* the entry is recorded: a crash in between leaves a child
that the replay finds again, never a recorded child that was not started.

``ctx.child`` then waits for the child's end with the engine's message wait:
the parent pauses waiting for the name ``child:<child id>`` and the host
wakes it under that name when the child ends; each run of the parent asks
the host for the child's outcome (one read) and records it in the entry.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from . import keys, live, schema
from .errors import ChildWorkflowError, MessageWaitError, diverged
from .execution import RollbackStop, complete
from .limits import check_record
from .scope import Scope
from .storage import driver_call
from .values import (
    ChildOutcome,
    ChildStart,
    FirstFinished,
    Queued,
    child_wake_name,
)

__all__ = [
    "MAX_WORKFLOW_ID_LENGTH",
    "ChildHost",
    "ChildOptions",
    "child_error",
    "default_child_id",
    "run_child",
    "wait_first",
]

MAX_WORKFLOW_ID_LENGTH = 255


@runtime_checkable
class ChildHost(Protocol):
    """What a driver offers to start children (an optional driver extension)."""

    async def start_child(self, start: ChildStart) -> None:
        """Start ``start.child_id`` unless it exists (idempotent per id).

        Raises an error of its own (not a ``StorageError``) when the id is
        taken by another workflow, or the name is unknown: the parent fails.
        """

    async def child_outcome(self, child_id: str) -> ChildOutcome | None:
        """Return how the child ended, or None while it runs."""


@dataclass(frozen=True, slots=True)
class ChildOptions:
    """What ``ctx.child``/``ctx.start_child`` were asked to start."""

    workflow: str
    input: Any
    id: str | None
    detached: bool
    timeout: float | None
    queued: Queued | None = None


def default_child_id(parent_id: str, location: str) -> str:
    """Return ``"<parent id>/<location>"``, hashed when longer than an id may be."""
    candidate = f"{parent_id}/{location}"
    if len(candidate) <= MAX_WORKFLOW_ID_LENGTH:
        return candidate
    digest = hashlib.sha256(candidate.encode("utf-8")).hexdigest()[:32]
    return f"{parent_id[: MAX_WORKFLOW_ID_LENGTH - 33]}/{digest}"


def child_error(data: dict[str, Any]) -> ChildWorkflowError:
    """Rebuild the failure of a child from its recorded entry."""
    child_id = str(data.get("child_id", ""))
    state = str(data.get("state", "failed"))
    info = dict(data.get("error") or {})
    detail = info.get("message") or info.get("name") or state
    return ChildWorkflowError(
        f'Child workflow "{child_id}" {state}: {detail}',
        metadata={"child_id": child_id, "state": state, "error": info},
    )


def _host(scope: Scope) -> ChildHost:
    driver = scope.run.driver
    if not isinstance(driver, ChildHost):
        raise TypeError(
            f"{type(driver).__name__} cannot start child workflows: it needs "
            "start_child() and child_outcome()"
        )
    return driver


async def run_child(
    scope: Scope, name: str, options: ChildOptions, *, wait: bool
) -> Any:
    """Start (or find again) a child; with ``wait``, return its output."""
    run = scope.run
    storage = run.storage
    location = scope.visit(name)
    entry = scope.existing(location, "child")
    if entry is not None:
        data = entry.data
        if bool(data.get("wait", True)) != wait:
            where = storage.location_string(location)
            recorded = "ctx.child" if data.get("wait", True) else "ctx.start_child"
            raise diverged(f'"{where}" was recorded by {recorded}', where)
        child_id = str(data["child_id"])
        if not wait:
            return child_id
        if data["state"] == "completed":
            return data.get("output")
        if data["state"] in ("failed", "cancelled"):
            raise child_error(data)
        if run.rollback:
            raise RollbackStop()
        host = _host(scope)
    else:
        if run.rollback:
            raise RollbackStop()
        host = _host(scope)
        where = storage.location_string(location)
        child_id = options.id or default_child_id(run.workflow_id, where)
        if not 0 < len(child_id) <= MAX_WORKFLOW_ID_LENGTH:
            raise ValueError(f"A workflow id is 1-{MAX_WORKFLOW_ID_LENGTH} characters")
        what = f'Input of child workflow "{name}"'
        stored = schema.roundtrip(options.input, what)
        field = schema.encode_workflow_field(keys.WORKFLOW_INPUT, stored)
        check_record(keys.workflow_key(keys.WORKFLOW_INPUT), field, what)
        await host.start_child(
            ChildStart(
                run.workflow_id,
                child_id,
                options.workflow,
                stored,
                options.detached,
                options.timeout,
                options.queued,
            )
        )
        data = {
            "workflow": options.workflow,
            "child_id": child_id,
            "detached": options.detached,
            "wait": wait,
            "state": "started",
        }
        entry = storage.create_entry(location, "child", data, status="running")
        if not wait:
            complete(storage, entry)
            await storage.flush()
            return child_id
        await storage.flush()

    def look() -> Any:
        return driver_call(host.child_outcome(child_id), "child outcome")

    if run.live_for():
        # The live window: wait here for the child's end (its wake name).
        outcome = await live.wait_for(run, [child_wake_name(child_id)], None, look)
    else:
        outcome = await look()
    if outcome is None:
        raise MessageWaitError(None, [child_wake_name(child_id)])
    return await _record_outcome(scope, entry, name, outcome)


async def _record_outcome(
    scope: Scope, entry: schema.Entry, name: str, outcome: ChildOutcome
) -> Any:
    storage = scope.run.storage
    if outcome.state == "completed":
        what = f'Output of child workflow "{name}"'
        value = schema.roundtrip(outcome.output, what)
        complete(storage, entry, what, state="completed", output=value)
        await storage.flush()
        return value
    info = dict(outcome.error or {})
    info.setdefault("name", "WorkflowCancelled")
    info.setdefault("message", f"Child workflow {outcome.state}")
    info.pop("traceback", None)  # the child's own history keeps it
    storage.update(
        entry, f'Error of child workflow "{name}"', state=outcome.state, error=info
    )
    metadata = storage.meta(entry)
    metadata.status = "failed"
    metadata.error = info
    metadata.touch()
    await storage.flush()
    raise child_error(entry.data)


async def wait_first(scope: Scope, name: str, child_ids: list[str]) -> FirstFinished:
    """Wait (durably) for the first of ``child_ids`` to end; return it.

    One ``wait_first`` entry records the ids, then which one ended first
    and how: a replay returns the same one. Any workflow ids will do (the
    host wakes this workflow when each ends, its own children or not);
    when several ended since the last look, the earliest to end wins, ties
    going to the first in the list.
    """
    run = scope.run
    storage = run.storage
    ids = [str(child_id) for child_id in child_ids]
    if not ids or len(set(ids)) != len(ids):
        raise ValueError("ctx.wait_first takes one or more distinct workflow ids")
    location = scope.visit(name)
    entry = scope.existing(location, "wait_first")
    if entry is not None:
        if list(entry.data.get("children") or []) != ids:
            where = storage.location_string(location)
            raise diverged(f'"{where}" waited for other workflows', where)
        first = entry.data.get("first")
        if entry.data.get("state") == "completed" and first is not None:
            return FirstFinished(**first)
        if run.rollback:
            raise RollbackStop()
    else:
        if run.rollback:
            raise RollbackStop()
        host = _host(scope)
        watch = getattr(host, "watch_children", None)
        if watch is not None:
            await watch(ids)
        data = {"children": ids, "state": "pending"}
        entry = storage.create_entry(location, "wait_first", data, status="running")
        await storage.flush()
    host = _host(scope)

    async def look() -> list[tuple[float, int, str, ChildOutcome]]:
        ended = []
        for index, child_id in enumerate(ids):
            outcome = await driver_call(host.child_outcome(child_id), "child outcome")
            if outcome is not None:
                at = outcome.finished_at or float("inf")
                ended.append((at, index, child_id, outcome))
        return ended

    if run.live_for():
        wakes = [child_wake_name(i) for i in ids]
        ended = await live.wait_for(run, wakes, None, look)
    else:
        ended = await look()
    if not ended:
        raise MessageWaitError(None, [child_wake_name(i) for i in ids])
    _, _, child_id, outcome = min(ended, key=lambda found: found[:2])
    error = dict(outcome.error) if outcome.error else None
    if error is not None:
        error.pop("traceback", None)  # the child's own history keeps it
    what = f'Output of workflow "{child_id}" (wait_first "{name}")'
    first = {
        "child_id": child_id,
        "state": outcome.state,
        "output": schema.roundtrip(outcome.output, what),
        "error": error,
    }
    complete(storage, entry, what, state="completed", first=first)
    await storage.flush()
    return FirstFinished(**first)
