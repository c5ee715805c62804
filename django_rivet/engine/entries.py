"""The simple entries: ``sleep``, ``rollback_checkpoint``, ``removed``, ``get_version``.

Each is one entry at one location of a :class:`~.scope.Scope`, recorded the
first time and replayed from history after.
"""

from __future__ import annotations

from collections.abc import Callable

from django_rivet import clock

from . import live
from .errors import SleepError, diverged
from .execution import RollbackStop, complete
from .scope import Scope

__all__ = ["run_get_version", "run_removed", "run_rollback_checkpoint", "run_sleep"]


async def run_sleep(scope: Scope, name: str, deadline_of: Callable[[], float]) -> None:
    """Sleep until the recorded deadline (``deadline_of()`` the first time)."""
    run = scope.run
    storage = run.storage
    location = scope.visit(name)
    entry = scope.existing(location, "sleep")
    if entry is not None:
        if entry.data["state"] != "pending":
            return
        if run.rollback:
            raise RollbackStop()
        deadline = float(entry.data["deadline"])
    else:
        if run.rollback:
            raise RollbackStop()
        deadline = deadline_of()
        entry = storage.create_entry(
            location, "sleep", {"deadline": deadline, "state": "pending"}
        )
        await storage.flush()
    remaining = deadline - clock.now()
    if remaining > 0:
        if remaining < run.driver.worker_poll_interval:
            await run.until_evicted(clock.wait_until(deadline))
        elif run.live_for(remaining):
            # Within the live window: sleep here, history in memory.
            if not await live.sleep(run, deadline):
                raise SleepError(deadline)  # the host closed the window
        else:
            raise SleepError(deadline)
    complete(storage, entry, state="completed")
    if remaining <= 0:
        await storage.flush()


async def run_rollback_checkpoint(scope: Scope, name: str) -> None:
    """Record the checkpoint; steps after it in this scope may have rollbacks."""
    location = scope.visit(name)
    entry = scope.existing(location, "rollback_checkpoint")
    if entry is None:
        if scope.run.rollback:
            raise RollbackStop()
        storage = scope.run.storage
        entry = storage.create_entry(location, "rollback_checkpoint", {"name": name})
        complete(storage, entry)
        await storage.flush()
    scope.checkpoint = True


async def run_removed(scope: Scope, name: str, original_type: str) -> None:
    """Stand in for a retired entry: history under it is not replayed."""
    run = scope.run
    location = scope.visit(name)
    storage = run.storage
    entry = storage.entries.get(location)
    run.cover(location)
    if entry is not None:
        if entry.kind not in ("removed", original_type):
            where = storage.location_string(location)
            raise diverged(
                f'Expected a removed {original_type} at "{where}", history '
                f"has a {entry.kind}",
                where,
            )
        return
    if run.check:
        return  # the run would record a placeholder here and go on
    if run.rollback:
        raise RollbackStop()
    data = {"original_type": original_type, "original_name": name}
    complete(storage, storage.create_entry(location, "removed", data))


async def run_get_version(scope: Scope, name: str, latest: int) -> int:
    """Return the recorded version, or record ``latest`` (1 for older history)."""
    run = scope.run
    location = scope.visit(name)
    entry = scope.existing(location, "version_check")
    if entry is not None:
        return int(entry.data["version"])
    if run.rollback and not run.check:
        raise RollbackStop()
    storage = run.storage
    # History recorded in this scope by an earlier run predates the gate:
    # that instance started on the old code, so it is pinned to version 1.
    loaded = storage.loaded_locations
    in_flight = any(loc in loaded for loc in storage.entries_under(scope.location))
    version = 1 if in_flight else int(latest)
    if run.check:
        return version  # what the run would record; a check writes nothing
    entry = storage.create_entry(location, "version_check", {"version": version})
    complete(storage, entry)
    return version
