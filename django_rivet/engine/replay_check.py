"""Replay recorded history against the current code, without running anything.

:func:`check_replay` is what a deploy runs before new code meets in-flight
workflows (``manage.py rivet_check_replay``, ``handle.check_replay()``, the
admin). It replays a workflow as a rollback does -- recorded entries give
their recorded results, no step runs, nothing waits, nothing is written --
and stops at the first entry that history does not have finished, which is
where a real run would start doing new work.

It reports what a real run would trip over: a ``HistoryDivergedError`` (a
duplicate name, a different entry kind at a location, a recorded branch the
code no longer has, a recorded entry left unvisited when a scope ends), an
``EntryInProgressError``, or any other exception the code raises on
recorded values. It is stricter than a run in one way: when it stops at new
work, every entry the stopping scope recorded must have been replayed by
then. A renamed or removed entry would otherwise surface only when the
scope ends (maybe days later), and an inserted or moved one would run out
of its recorded order; both are incompatible with the in-flight instance.
"""

from __future__ import annotations

from typing import Any

from django_rivet.exceptions import RivetError

from . import keys
from .context import WorkflowContext
from .driver import EngineDriver
from .errors import (
    EntryInProgressError,
    HistoryDivergedError,
    StorageError,
    WorkflowError,
    WorkflowInterrupt,
)
from .execution import RollbackStop, Run
from .storage import Storage
from .values import ReplayDivergence

__all__ = ["check_replay"]

WorkflowFn = Any


async def check_replay(
    workflow_id: str, fn: WorkflowFn, driver: EngineDriver
) -> ReplayDivergence | None:
    """Replay ``workflow_id``'s history with ``fn``; return what diverged, or None.

    Reads the history once through ``driver`` and never writes.
    """
    storage = await Storage.load(driver)
    input = storage.get_field(keys.WORKFLOW_INPUT)
    run = Run(workflow_id, storage, driver, rollback=True, check=True)
    scope = WorkflowContext.root_scope(run)
    try:
        await fn(scope.context, input)
        scope.finish()
    except RollbackStop:
        return None  # reached new work: everything before it replays
    except (HistoryDivergedError, EntryInProgressError) as error:
        where = getattr(error, "location", None)
        return ReplayDivergence(
            workflow_id,
            where if where is not None else _last(run),
            error.message,
            error.code,
        )
    except WorkflowInterrupt:
        return None  # cannot happen in a replay; nothing to report
    except StorageError:
        raise  # reading history failed: no verdict
    except WorkflowError:
        # A failure history recorded (an exhausted step the code does not
        # catch): the real run meets the same, as it did before the deploy.
        return None
    except Exception as error:
        code = error.code if isinstance(error, RivetError) else "replay_error"
        return ReplayDivergence(
            workflow_id,
            _last(run),
            f"The code raised {type(error).__name__} on recorded values: {error}",
            code,
        )
    finally:
        scope.abandon()
    return None


def _last(run: Run) -> str:
    """Return the location of the newest entry the replay visited."""
    storage = run.storage
    visited = [storage.entries[loc] for loc in run.visited if loc in storage.entries]
    if not visited:
        return ""
    newest = max(visited, key=lambda entry: entry.seq)
    return storage.location_string(newest.location)
