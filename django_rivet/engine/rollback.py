"""Rollbacks: replay to collect a failed workflow's handlers, run them newest first.

A rollback is resumable: each handler that completes is marked in its step's
metadata and flushed, so a rollback evicted or failed half way continues
with the handlers still to run when the workflow is woken again.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import Any

from django_rivet import clock

from .context import WorkflowContext
from .driver import EngineDriver, call_maybe_async
from .errors import EvictedError, StorageError, WorkflowInterrupt, error_info
from .execution import RollbackStop, Run
from .shapes import workflow_shapes
from .values import RollbackContext, RollbackErrorEvent, WorkflowOutcome

__all__ = ["run_rollbacks"]

logger = logging.getLogger("django_rivet.workflow")


async def run_rollbacks(
    run: Run, fn: Callable[..., Any], input: Any, error: BaseException
) -> WorkflowOutcome | None:
    """Run the rollback handlers of ``run``'s completed steps, newest first.

    ``run`` is a rollback run (replay only). Return None once every handler
    ran, or the ``rolling_back`` outcome the rollback stops at: evicted
    (with ``error``) or a handler's failure (with that failure).
    """
    storage = run.storage
    scope = WorkflowContext.root_scope(run)
    try:
        await fn(scope.context, workflow_shapes(fn).load_input(input))
    except EvictedError:
        return WorkflowOutcome("rolling_back", error=error)
    except StorageError:
        raise
    except (RollbackStop, WorkflowInterrupt, Exception):
        pass  # the replay only collects handlers; it ends where history ends
    finally:
        scope.abandon()
    context = RollbackContext(run.workflow_id, run.evicted)
    actions = sorted(run.rollback_actions, key=lambda a: a.seq, reverse=True)
    for action in actions:
        metadata = storage.metadata.get(action.entry_id)
        if metadata is None or metadata.rollback_completed_at is not None:
            continue
        try:
            await run.until_evicted(
                _call_handler(run.driver, action.handler, context, action.output)
            )
        except EvictedError:
            return WorkflowOutcome("rolling_back", error=error)
        except Exception as rollback_error:
            metadata.rollback_error = error_info(rollback_error)["message"]
            metadata.touch()
            await storage.flush()
            logger.warning(
                "workflow rollback failed workflow=%s step=%s",
                run.workflow_id,
                action.name,
            )
            await run.emit(
                RollbackErrorEvent(run.workflow_id, action.name, rollback_error)
            )
            return WorkflowOutcome("rolling_back", error=rollback_error)
        metadata.rollback_completed_at = clock.now()
        metadata.rollback_error = None
        metadata.touch()
        await storage.flush()
    return None


async def _call_handler(
    driver: EngineDriver, fn: Callable[..., Any], *args: Any
) -> Any:
    """Run a rollback handler; sync ones go through the driver's ``call_sync``.

    Handlers do I/O like steps do (a refund), so a host that must keep
    blocking code off the event loop gets them the same way.
    """
    call_sync = getattr(driver, "call_sync", None)
    if inspect.iscoroutinefunction(fn) or call_sync is None:
        return await call_maybe_async(fn, *args)
    result = await call_sync(lambda: fn(*args))
    return await result if inspect.isawaitable(result) else result
