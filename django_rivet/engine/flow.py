"""Scoped entries: ``loop``, ``join``, ``race`` and ``try_block``."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any

from . import keys, schema
from .driver import call_maybe_async
from .errors import (
    EntryInProgressError,
    EvictedError,
    HistoryDivergedError,
    JoinError,
    MessageWaitError,
    RaceError,
    SleepError,
    StorageError,
    WorkflowInterrupt,
    diverged,
    error_from_info,
    error_info,
)
from .execution import RollbackStop, complete
from .scope import Scope
from .steps import failure_kind
from .storage import Storage
from .values import Failure, LoopBreak, LoopContinue, StepResult

__all__ = ["merge_interrupts", "run_join", "run_loop", "run_race", "run_try_block"]

# Errors that mean the code and history disagree, or that storage is down:
# never recorded as a branch failure, never caught by try_block.
_FATAL = (HistoryDivergedError, EntryInProgressError, StorageError)


def merge_interrupts(interrupts: list[WorkflowInterrupt]) -> WorkflowInterrupt:
    """Merge branch pauses: the earliest deadline and every awaited name."""
    if any(isinstance(i, EvictedError) for i in interrupts):
        return EvictedError()
    deadlines = [i.deadline for i in interrupts if i.deadline is not None]
    names = [name for i in interrupts for name in i.names]
    deadline = min(deadlines) if deadlines else None
    if deadline is None:
        return MessageWaitError(None, names)
    return SleepError(deadline, names)


# --- loop ------------------------------------------------------------------------


async def run_loop(
    scope: Scope,
    name: str,
    fn: Callable[..., Any],
    state: Any,
    interval: int,
    size: int,
) -> Any:
    """Run a durable loop (see ``WorkflowContext.loop``)."""
    run = scope.run
    storage = run.storage
    location = scope.visit(name)
    loop_index = location[-1]
    assert isinstance(loop_index, int)
    entry = scope.existing(location, "loop")
    if entry is not None:
        if "output" in entry.data:
            run.cover(location)
            return entry.data["output"]
        state = entry.data["state"]
        iteration = int(entry.data["iteration"])
        # Iterations before the committed one are history, not replayed.
        for old in range(int(entry.data["pruned_before"]), iteration):
            run.cover((*location, (loop_index, old)))
    else:
        if run.rollback:
            raise RollbackStop()
        state = schema.roundtrip(state, f'State of loop "{name}"')
        iteration = 0
        data = {"state": None, "iteration": 0, "pruned_before": 0}
        entry = storage.create_entry(location, "loop", data, status="running")
        storage.update(entry, f'State of loop "{name}"', state=state)

    def prune(current: int) -> None:
        if interval <= 0 or size <= 0 or current == 0 or current % interval:
            return
        keep_from = max(0, current - size)
        start = int(entry.data["pruned_before"])
        if keep_from > start:
            storage.delete_iterations(location, loop_index, start, keep_from)
            storage.update(entry, what, pruned_before=keep_from)

    what = f'State of loop "{name}"'
    while True:
        if run.evicted():
            raise EvictedError()
        child = scope.child((*location, (loop_index, iteration)))
        try:
            result = await call_maybe_async(fn, child.context, state)
        except BaseException:
            child.abandon()
            raise
        child.finish()
        if isinstance(result, LoopBreak):
            value = schema.roundtrip(result.value, f'Output of loop "{name}"')
            if run.rollback:
                return value
            complete(
                storage,
                entry,
                f'Loop "{name}" (its output and state)',
                output=value,
                state=state,
                iteration=iteration,
            )
            prune(iteration + 1)
            await storage.flush()
            return value
        if isinstance(result, LoopContinue):
            state = schema.roundtrip(result.state, what)
        elif result is not None:
            raise TypeError(
                f'Loop "{name}" body must return Loop.continue_(state) or '
                f"Loop.break_(value), not {type(result).__name__}"
            )
        iteration += 1
        if run.rollback:
            continue
        # Every finished iteration is saved with the next flush (the one the
        # next iteration's first entry makes, or a pause's): a resume goes on
        # after it. Pruning points flush here.
        storage.update(entry, what, state=state, iteration=iteration)
        if interval > 0 and iteration % interval == 0:
            prune(iteration)
            await storage.flush()


# --- join and race ------------------------------------------------------------


async def _branch(scope: Scope, fn: Callable[..., Any], location: keys.Location) -> Any:
    child = scope.child(location)
    try:
        result = await call_maybe_async(fn, child.context)
    except BaseException:
        child.abandon()
        raise
    child.finish()
    return result


def _branch_records(
    scope: Scope,
    entry: schema.Entry,
    names: list[str],
    location: keys.Location,
) -> dict[str, dict[str, Any]]:
    recorded = entry.data["branches"]
    unknown = [branch for branch in recorded if branch not in names]
    if unknown:
        where = scope.run.storage.location_string(location)
        raise diverged(
            f'"{where}" recorded branches {unknown} the code no longer has', where
        )
    # A working copy: the entry changes through ``_save_branches`` only,
    # after the size check.
    working = {branch: dict(record) for branch, record in recorded.items()}
    for branch in names:
        working.setdefault(branch, {"status": "pending"})
    return working


def _save_branches(
    storage: Storage,
    entry: schema.Entry,
    what: str,
    recorded: dict[str, dict[str, Any]],
    **data: Any,
) -> None:
    """Record the branch statuses (a copy) in the entry, size-checked."""
    copy = {branch: dict(record) for branch, record in recorded.items()}
    storage.update(entry, what, branches=copy, **data)


async def _settle(tasks: dict[str, asyncio.Future[Any]]) -> None:
    """Wait for every task; if we are cancelled, cancel them first."""
    try:
        if tasks:
            await asyncio.wait(tasks.values())
    finally:
        await _cancel_all(tasks.values())


async def _cancel_all(tasks: Iterable[asyncio.Future[Any]]) -> None:
    """Cancel the unfinished tasks and wait until they have stopped."""
    pending = [task for task in tasks if not task.done()]
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.gather(*pending, return_exceptions=True)


async def _replay_for_rollback(
    scope: Scope,
    branches: dict[str, Callable[..., Any]],
    location: keys.Location,
) -> bool:
    """Replay branches one by one to collect rollback handlers; False if stopped."""
    storage = scope.run.storage
    finished = True
    for branch, fn in branches.items():
        index = storage.name_index(branch)
        if index is None:
            finished = False
            continue
        try:
            await _branch(scope, fn, (*location, index))
        except RollbackStop:
            finished = False
        except _FATAL:
            if scope.run.check:
                raise  # what a replay check is looking for
        except Exception:  # noqa: S110 - failures are history now
            pass
    return finished


async def run_join(
    scope: Scope, name: str, branches: dict[str, Callable[..., Any]]
) -> dict[str, Any]:
    """Run every branch in parallel (see ``WorkflowContext.join``)."""
    run = scope.run
    storage = run.storage
    location = scope.visit(name)
    entry = scope.existing(location, "join")
    if entry is None:
        if run.rollback:
            raise RollbackStop()
        data = {"branches": {b: {"status": "pending"} for b in branches}}
        entry = storage.create_entry(location, "join", data, status="running")
    recorded = _branch_records(scope, entry, list(branches), location)
    if run.rollback:
        done = all(recorded[b]["status"] == "completed" for b in branches)
        if not await _replay_for_rollback(scope, branches, location) or not done:
            raise RollbackStop()
        return {b: recorded[b].get("output") for b in branches}

    results: dict[str, Any] = {}
    errors: dict[str, BaseException] = {}
    tasks: dict[str, asyncio.Future[Any]] = {}
    for branch, fn in branches.items():
        status = recorded[branch]
        where = (*location, storage.register_name(branch))
        if status["status"] == "completed":
            results[branch] = status.get("output")
            run.cover(where)
        elif status["status"] == "failed":
            errors[branch] = error_from_info(status.get("error"))
            run.cover(where)
        else:
            status["status"] = "running"
            tasks[branch] = asyncio.ensure_future(_branch(scope, fn, where))
    what = f'Results of join "{name}"'
    _save_branches(storage, entry, what, recorded)
    await _settle(tasks)

    interrupts: list[WorkflowInterrupt] = []
    for branch, task in tasks.items():
        status = recorded[branch]
        error = task.exception()
        if error is None:
            try:
                value = schema.roundtrip(task.result(), f'Output of branch "{branch}"')
            except Exception as exc:
                error = exc
            else:
                recorded[branch] = {"status": "completed", "output": value}
                results[branch] = value
                continue
        if isinstance(error, _FATAL) or not isinstance(
            error, Exception | WorkflowInterrupt
        ):
            raise error
        if isinstance(error, WorkflowInterrupt):
            recorded[branch] = {**status, "status": "pending"}
            interrupts.append(error)
            continue
        recorded[branch] = {"status": "failed", "error": error_info(error)}
        errors[branch] = error
    # One size check for the join's record, all branch results together.
    _save_branches(storage, entry, what, recorded)
    if interrupts:
        await storage.flush()
        raise merge_interrupts(interrupts)
    metadata = storage.meta(entry)
    if errors:
        metadata.status = "failed"
        metadata.touch()
        await storage.flush()
        raise JoinError(name, {b: errors[b] for b in branches if b in errors})
    complete(storage, entry)
    await storage.flush()
    return {branch: results[branch] for branch in branches}


async def run_race(
    scope: Scope, name: str, branches: dict[str, Callable[..., Any]]
) -> tuple[str, Any]:
    """Run branches in parallel; the first to finish wins (see ``ctx.race``)."""
    run = scope.run
    storage = run.storage
    location = scope.visit(name)
    entry = scope.existing(location, "race")
    if entry is not None and entry.data.get("winner") is not None:
        recorded_winner = str(entry.data["winner"])
        run.cover(location)
        if run.rollback and recorded_winner in branches:
            replay = {recorded_winner: branches[recorded_winner]}
            await _replay_for_rollback(scope, replay, location)
        output = entry.data["branches"].get(recorded_winner, {}).get("output")
        return recorded_winner, output
    if run.rollback:
        if entry is not None:
            # Unfinished race: its branches' completed steps still roll back.
            await _replay_for_rollback(scope, branches, location)
        raise RollbackStop()
    if entry is None:
        data = {
            "winner": None,
            "branches": {b: {"status": "pending"} for b in branches},
        }
        entry = storage.create_entry(location, "race", data, status="running")
    recorded = _branch_records(scope, entry, list(branches), location)

    errors: dict[str, BaseException] = {}
    tasks: dict[str, asyncio.Future[Any]] = {}
    branch_locations: dict[str, keys.Location] = {}
    for branch, fn in branches.items():
        branch_locations[branch] = (*location, storage.register_name(branch))
        if recorded[branch]["status"] == "failed":
            errors[branch] = error_from_info(recorded[branch].get("error"))
            run.cover(branch_locations[branch])
            continue
        recorded[branch]["status"] = "running"
        task = asyncio.ensure_future(_branch(scope, fn, branch_locations[branch]))
        tasks[branch] = task
    what = f'Result of race "{name}"'
    _save_branches(storage, entry, what, recorded)

    winner: str | None = None
    value: Any = None
    interrupts: list[WorkflowInterrupt] = []
    pending = set(tasks.values())
    try:
        while pending and winner is None:
            done, pending = await asyncio.wait(
                pending, return_when=asyncio.FIRST_COMPLETED
            )
            for branch in [b for b in branches if tasks.get(b) in done]:
                error = tasks[branch].exception()
                if error is None and winner is None:
                    try:
                        value = schema.roundtrip(
                            tasks[branch].result(), f'Output of branch "{branch}"'
                        )
                        winner = branch
                        continue
                    except Exception as exc:
                        error = exc
                if error is None:
                    continue  # finished too, but after the winner
                if isinstance(error, _FATAL) or not isinstance(
                    error, Exception | WorkflowInterrupt
                ):
                    raise error
                if isinstance(error, WorkflowInterrupt):
                    interrupts.append(error)
                    recorded[branch]["status"] = "pending"
                else:
                    errors[branch] = error
                    recorded[branch].update(status="failed", error=error_info(error))
    finally:
        await _cancel_all(pending)

    if winner is not None:
        for branch in branches:
            if branch != winner and recorded[branch]["status"] != "failed":
                recorded[branch] = {"status": "cancelled"}
        recorded[winner] = {"status": "completed", "output": value}
        # The record is measured before anything changes: an oversized
        # winning value fails the race with its losers' history intact.
        copy = {branch: dict(record) for branch, record in recorded.items()}
        complete(storage, entry, what, winner=winner, branches=copy)
        for branch in branches:
            if branch != winner:
                storage.delete_subtree(branch_locations[branch])
        await storage.flush()
        return winner, value
    _save_branches(storage, entry, what, recorded)
    if interrupts:
        await storage.flush()
        raise merge_interrupts(interrupts)
    metadata = storage.meta(entry)
    metadata.status = "failed"
    metadata.touch()
    await storage.flush()
    raise RaceError(name, {b: errors[b] for b in branches if b in errors})


# --- try_block -------------------------------------------------------------------


async def run_try_block(
    scope: Scope,
    name: str,
    fn: Callable[..., Any],
    catch: tuple[str | type[BaseException], ...],
) -> StepResult[Any]:
    """Run ``fn`` in its own scope, turning caught failures into a result."""
    location = scope.visit(name)
    if location in scope.run.storage.entries:
        entry = scope.run.storage.entries[location]
        where = scope.run.storage.location_string(location)
        raise diverged(
            f'Expected a try block at "{where}", history has a {entry.kind}', where
        )
    try:
        value = await _branch(scope, fn, location)
    except _FATAL:
        raise
    except Exception as error:
        kind = failure_kind(error)
        kinds = {c for c in catch if isinstance(c, str)}
        types = tuple(c for c in catch if isinstance(c, type))
        if not ((kind is not None and kind in kinds) or isinstance(error, types)):
            raise
        attempts = getattr(error, "attempts", 0)
        return StepResult(False, None, Failure(kind or "error", name, attempts, error))
    return StepResult(True, value, None)
