"""``ctx.step`` and ``ctx.try_step``: attempts, retries, timeouts, replay."""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from django_rivet import clock

from . import observe, schema, streams
from .driver import call_maybe_async
from .errors import (
    KNOWN_ERRORS,
    ChildWorkflowError,
    CriticalError,
    JoinError,
    RaceError,
    RollbackCheckpointError,
    RollbackError,
    StepExhaustedError,
    StepFailedError,
    StepTimeoutError,
    StorageError,
    StorageLimitError,
    error_info,
    format_traceback,
    mark_reported,
)
from .execution import RollbackAction, RollbackStop
from .scope import Scope
from .storage import Storage, driver_call
from .values import Failure, StepErrorEvent, StepResult

__all__ = [
    "StepOptions",
    "backoff",
    "failure_kind",
    "no_side_effects",
    "run_step",
    "step_options",
    "try_step",
]

logger = logging.getLogger("django_rivet.workflow")


F = TypeVar("F", bound=Callable[..., Any])


def no_side_effects(fn: F) -> F:
    """Mark ``fn`` as a step function with no effect outside its output.

    The run reads the cancel flag before each step so that once
    ``cancel()`` returned no further step function acts on the world; a
    function marked here (django-rivet's own bookkeeping, such as a task
    attempt's start record) acts on nothing, so it starts without that read
    and the next step's check stands for both.
    """
    fn.__dict__["rivet_no_side_effects"] = True
    return fn


@dataclass(frozen=True, slots=True)
class StepOptions:
    """The keyword options of ``ctx.step``."""

    max_retries: int = 3
    retry_backoff_base: float = 0.1
    retry_backoff_max: float = 30
    timeout: float | None = 30
    retry_on_timeout: bool = False
    rollback: Callable[..., Any] | None = None
    ephemeral: bool = False
    transaction: bool = False


# Options already built, by their values (without a rollback handler, so
# the set stays small): a loop of steps shares one object, which costs less
# than building one (2-3 us, as much as the rest of a replayed step).
_SHARED_OPTIONS: dict[tuple[Any, ...], StepOptions] = {}


def step_options(*values: Any) -> StepOptions:
    """Return ``StepOptions(*values)``, shared with earlier calls when it can be."""
    try:
        return _SHARED_OPTIONS[values]
    except KeyError:
        pass
    except TypeError:  # an unhashable value: StepOptions checks nothing either
        return StepOptions(*values)
    options = StepOptions(*values)
    if options.rollback is None and len(_SHARED_OPTIONS) < 256:
        _SHARED_OPTIONS[values] = options
    return options


def backoff(attempts: int, base: float, maximum: float) -> float:
    """Return the retry delay after ``attempts`` attempts (no jitter: replayable)."""
    return float(min(maximum, base * 2**attempts))


# The kinds of failure ``try_step``/``try_block`` report, the first class
# that matches wins (StepTimeoutError is a CriticalError).
_FAILURE_KINDS: tuple[tuple[type[BaseException], str], ...] = (
    (StepExhaustedError, "exhausted"),
    (StepTimeoutError, "timeout"),
    (RollbackError, "rollback"),
    (CriticalError, "critical"),
    (JoinError, "join"),
    (RaceError, "race"),
    (ChildWorkflowError, "child"),
)


def failure_kind(error: BaseException) -> str | None:
    """Classify a failure for ``try_step``/``try_block``; None if it is not one."""
    for cls, kind in _FAILURE_KINDS:
        if isinstance(error, cls):
            return kind
    return None


async def try_step(
    scope: Scope, name: str, fn: Callable[[], Any], options: StepOptions
) -> StepResult[Any]:
    """Run a step, returning critical, timeout and exhausted failures."""
    try:
        value = await run_step(scope, name, fn, options)
    except (StepExhaustedError, CriticalError) as error:
        kind = failure_kind(error)
        attempts = getattr(error, "attempts", 0)
        return StepResult(False, None, Failure(str(kind), name, attempts, error))
    return StepResult(True, value, None)


async def run_step(
    scope: Scope, name: str, fn: Callable[[], Any], options: StepOptions
) -> Any:
    """Replay or execute one step attempt."""
    run = scope.run
    storage = run.storage
    if options.rollback is not None and not scope.checkpoint:
        raise RollbackCheckpointError()
    location = scope.visit(name)
    entry = scope.existing(location, "step")
    if entry is not None:
        metadata = storage.meta(entry)
        # The output first: a replayed step that has one needs nothing of
        # its metadata (loaded metadata is decoded only when read).
        if "output" in entry.data or metadata.status == "completed":
            output = entry.data.get("output")
            if run.rollback and options.rollback is not None:
                if metadata.rollback_completed_at is None:
                    run.rollback_actions.append(
                        RollbackAction(
                            entry.seq, entry.id, name, output, options.rollback
                        )
                    )
            return output
        if metadata.status == "exhausted":
            raise _recorded_failure(name, metadata.attempts, entry, metadata.error)
        if run.rollback:
            raise RollbackStop()
        if metadata.attempts > options.max_retries:
            # Retries ran out without the exhaustion being recorded (a crash,
            # or max_retries lowered since): record it now.
            info = entry.data.get("error") or metadata.error or {}
            info = {**info, "kind": "exhausted"}
            metadata.status, metadata.error = "exhausted", info
            metadata.touch()
            await storage.flush()
            raise _recorded_failure(name, metadata.attempts, entry, info)
        if metadata.status == "failed":
            delay = backoff(
                metadata.attempts,
                options.retry_backoff_base,
                options.retry_backoff_max,
            )
            retry_at = (metadata.last_attempt_at or 0.0) + delay
            if clock.now() < retry_at:
                raise StepFailedError(name, metadata.attempts, retry_at, None)
    else:
        if run.rollback:
            raise RollbackStop()
        entry = storage.create_entry(location, "step", {})

    if (
        run.check_cancel is not None
        and not options.transaction
        and not getattr(fn, "rivet_no_side_effects", False)
    ):
        # A cancel that returned stops the run before this step's function
        # (a transactional step's transaction checks it by itself).
        await driver_call(run.check_cancel(), "cancel check")
    metadata = storage.meta(entry)
    metadata.status = "running"
    metadata.attempts += 1
    metadata.last_attempt_at = clock.now()
    metadata.touch()
    fn = observe.step_attempt(run.workflow_id, name, metadata.attempts, fn)
    what = f'Output of step "{name}"'
    try:
        if options.transaction:
            with streams.in_step(transactional=True):
                return await _run_transactional(scope, name, fn, entry)
        with streams.in_step(transactional=False):
            raw = await _call_with_timeout(scope, name, fn, options.timeout)
        if storage.streams.pending:
            # What the step wrote lands before its output is recorded: a
            # crash in between re-runs the step (at least once), never loses it.
            await storage.flush()
        _record_success(storage, entry, schema.roundtrip(raw, what), what)
    except StorageError:
        raise  # the driver's trouble, not the step's: the host retries the run
    except Exception as error:
        failure = await _attempt_failed(scope, name, entry, options, error)
        if failure is error:
            raise
        raise failure from error
    output = entry.data["output"]
    if not options.ephemeral:
        try:
            await storage.flush()
        except StorageLimitError as refused:
            # The driver refused the writes as one unit too large: the step
            # fails once, as critical, without its output (RivetKit's rule).
            _undo_success(storage, entry)
            named = _refused(name, refused)
            raise await _attempt_failed(scope, name, entry, options, named) from None
    return output


def _refused(name: str, refused: StorageLimitError) -> StorageLimitError:
    """Name the step whose output the driver refused (its error does not)."""
    error = StorageLimitError(
        f'Step "{name}": the driver refused to store its output: {refused.message}'
    )
    error.__cause__ = refused
    return error


def _record_success(
    storage: Storage, entry: schema.Entry, output: Any, what: str
) -> None:
    # The metadata changes with the entry: one record, encoded once.
    storage.update(
        entry,
        what,
        remove=("error",),
        meta={"status": "completed", "error": None, "completed_at": clock.now()},
        output=output,
    )


def _undo_success(storage: Storage, entry: schema.Entry) -> None:
    storage.update(
        entry, "", remove=("output",), meta={"status": "running", "completed_at": None}
    )


async def _run_transactional(
    scope: Scope, name: str, fn: Callable[[], Any], entry: schema.Entry
) -> Any:
    storage = scope.run.storage
    done: dict[str, Any] = {}
    what = f'Output of step "{name}"'

    def make_writes(raw: Any) -> list[tuple[bytes, bytes]]:
        # Runs inside the driver's transaction: raising here rolls ``fn`` back.
        _record_success(storage, entry, schema.roundtrip(raw, what), what)
        writes, plan = storage.transactional_writes()
        done["plan"] = plan
        return writes

    try:
        await scope.run.driver.run_transactional(fn, make_writes)
    except BaseException as error:
        if "plan" in done:
            # The transaction rolled back after we recorded success: undo it.
            _undo_success(storage, entry)
            if isinstance(error, StorageLimitError):
                raise _refused(name, error) from error
        raise
    storage.acknowledge(done["plan"])
    return entry.data["output"]


async def _invoke(scope: Scope, fn: Callable[[], Any]) -> Any:
    if inspect.iscoroutinefunction(fn):
        return await fn()
    call_sync = getattr(scope.run.driver, "call_sync", None)
    if call_sync is not None:
        result = await call_sync(fn)
        return await result if inspect.isawaitable(result) else result
    return await call_maybe_async(fn)


async def _call_with_timeout(
    scope: Scope, name: str, fn: Callable[[], Any], timeout: float | None
) -> Any:
    """Run the step function, cut off after ``timeout`` seconds (clock time).

    The function runs in the calling task; a timer task, started only if the
    function suspends (a step that finishes without yielding to the loop
    pays for no task), cancels the caller at the deadline, and the
    cancellation becomes :class:`StepTimeoutError`.
    """
    if not timeout or timeout <= 0:
        return await _invoke(scope, fn)
    deadline = clock.now() + timeout
    task = asyncio.current_task()
    assert task is not None
    expired = False
    timer: asyncio.Future[None] | None = None

    async def expire() -> None:
        nonlocal expired
        await clock.wait_until(deadline)
        expired = True
        task.cancel()

    def arm() -> None:
        nonlocal timer
        timer = asyncio.ensure_future(expire())

    armed = asyncio.get_running_loop().call_soon(arm)
    try:
        result = await _invoke(scope, fn)
    except asyncio.CancelledError:
        if expired and task.uncancel() == 0:
            raise StepTimeoutError(
                f'Step "{name}" timed out after {timeout:g} seconds'
            ) from None
        raise
    finally:
        armed.cancel()
        if timer is not None:
            timer.cancel()
    if expired:
        task.uncancel()  # the function swallowed the cancellation: it finished
    return result


async def _attempt_failed(
    scope: Scope,
    name: str,
    entry: schema.Entry,
    options: StepOptions,
    error: Exception,
) -> BaseException:
    """Record a failed attempt, report it, and return what the caller raises.

    ``max_retries`` counts retries: attempt ``max_retries + 1`` is the last.
    A terminal failure (exhausted, critical, rollback, a timeout that is not
    retried) is reported here once, and the error raised is marked so that
    the workflow's failure does not report it a second time.
    """
    run = scope.run
    metadata = run.storage.meta(entry)
    attempt = metadata.attempts
    if isinstance(error, StepTimeoutError) and options.retry_on_timeout:
        kind = None
    else:
        terminal = isinstance(error, CriticalError | RollbackError)
        kind = failure_kind(error) if terminal else None
    if kind is None and attempt > options.max_retries:
        kind = "exhausted"
    info = error_info(error, kind=kind or "failed")
    # The entry keeps the traceback too (bounded); the metadata, a summary.
    detailed = {**info, "traceback": format_traceback(error)}
    status = "failed" if kind is None else "exhausted"
    run.storage.update(
        entry,
        "",
        remove=("output",),
        meta={"status": status, "error": info},
        error=detailed,
    )
    retry_delay = retry_at = None
    if kind is None:
        retry_delay = backoff(
            attempt, options.retry_backoff_base, options.retry_backoff_max
        )
        retry_at = (metadata.last_attempt_at or clock.now()) + retry_delay
    # One WARNING per failed attempt, with the traceback: with Django's
    # default logging configuration, WARNING reaches the console.
    logger.warning(
        "workflow step attempt failed workflow=%s step=%s attempt=%s "
        "will_retry=%s retry_at=%s error=%r",
        run.workflow_id,
        name,
        attempt,
        kind is None,
        retry_at,
        error,
        exc_info=error,
    )
    await run.storage.flush()
    await run.emit(
        StepErrorEvent(
            workflow_id=run.workflow_id,
            step_name=name,
            attempt=attempt,
            max_retries=options.max_retries,
            remaining_retries=(
                max(0, options.max_retries + 1 - attempt) if kind is None else 0
            ),
            will_retry=kind is None,
            retry_delay=retry_delay,
            retry_at=retry_at,
            error=error,
        )
    )
    if kind is None:
        assert retry_at is not None
        return StepFailedError(name, attempt, retry_at, error)
    if kind == "exhausted":
        return mark_reported(_exhausted(name, attempt, info))
    error.attempts = attempt  # type: ignore[attr-defined]
    return mark_reported(error)


def _exhausted(name: str, attempts: int, info: dict[str, Any]) -> StepExhaustedError:
    error = StepExhaustedError(
        f'Step "{name}" failed after {attempts} attempt(s): {info.get("message", "")}'
    )
    error.attempts = attempts  # type: ignore[attr-defined]
    error.last_error = info  # type: ignore[attr-defined]
    return error


def _recorded_failure(
    name: str,
    attempts: int,
    entry: schema.Entry,
    info: dict[str, Any] | None,
) -> BaseException:
    """Rebuild the failure of an exhausted step from history.

    It was reported when it was recorded: marked so it is not reported again.
    """
    info = entry.data.get("error") or info or {}
    kind = info.get("kind")
    if kind in ("exhausted", "failed", None):
        return mark_reported(_exhausted(name, attempts, info))
    default = {
        "timeout": StepTimeoutError,
        "rollback": RollbackError,
    }.get(kind, CriticalError)
    cls = KNOWN_ERRORS.get(str(info.get("name")))
    if cls is None or not issubclass(cls, default):
        cls = default
    error = cls(str(info.get("message", "")))
    error.attempts = attempts  # type: ignore[attr-defined]
    return mark_reported(error)
