"""Value objects the workflow API hands out and takes in."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Generic, Literal, TypedDict, TypeVar

__all__ = [
    "CHILD_WAKE_PREFIX",
    "ChildOutcome",
    "ChildStart",
    "Failure",
    "FirstFinished",
    "Loop",
    "LoopBreak",
    "LoopContinue",
    "Message",
    "Queued",
    "ReplayDivergence",
    "RollbackContext",
    "RollbackErrorEvent",
    "StepErrorEvent",
    "StepResult",
    "WorkflowDefinition",
    "WorkflowErrorEvent",
    "WorkflowOutcome",
    "child_wake_name",
    "seconds",
    "workflow",
]

T = TypeVar("T")
S = TypeVar("S")

OutcomeState = Literal["completed", "sleeping", "failed", "cancelled", "rolling_back"]


@dataclass(frozen=True, slots=True)
class LoopContinue(Generic[S]):
    """Run another iteration with ``state``."""

    state: S


@dataclass(frozen=True, slots=True)
class LoopBreak(Generic[T]):
    """Leave the loop with ``value``."""

    value: T


class Loop:
    """Results a ``ctx.loop`` body returns."""

    @staticmethod
    def continue_(state: Any = None) -> LoopContinue[Any]:
        """Continue with the next iteration and ``state``."""
        return LoopContinue(state)

    @staticmethod
    def break_(value: Any = None) -> LoopBreak[Any]:
        """Finish the loop with ``value``."""
        return LoopBreak(value)


@dataclass(frozen=True, slots=True)
class Message:
    """A message sent to a workflow, as ``ctx.messages`` returns it."""

    id: str
    name: str
    body: Any
    created_at: float


# A parent waiting for a child waits for this name plus the child's id.
CHILD_WAKE_PREFIX = "child:"


def child_wake_name(child_id: str) -> str:
    """Return the name a parent waiting for ``child_id`` waits for."""
    return CHILD_WAKE_PREFIX + child_id


class Queued(TypedDict, total=False):
    """How ``ctx.child``/``ctx.start_child`` start a child on a workflow queue."""

    queue: str | None
    priority: int
    dedup_key: str | None
    partition_key: str | None


@dataclass(frozen=True, slots=True)
class ChildStart:
    """What a parent asks its host to start (``ctx.child``/``ctx.start_child``).

    Starting is idempotent per ``child_id``: a replay asks again with the
    same id, and the host starts nothing new.
    """

    parent_id: str
    child_id: str
    workflow: str
    input: Any
    detached: bool = False
    timeout: float | None = None
    # A child started on a workflow queue: where (the host enqueues it).
    queued: Queued | None = None


@dataclass(frozen=True, slots=True)
class ChildOutcome:
    """How a child workflow ended: ``completed``, ``failed`` or ``cancelled``."""

    state: str
    output: Any = None
    error: dict[str, Any] | None = None
    # When it ended (epoch seconds; 0: the host does not say): of several
    # that ended since it last looked, ``ctx.wait_first`` takes the earliest.
    finished_at: float = 0.0


@dataclass(frozen=True, slots=True)
class FirstFinished(ChildOutcome):
    """What ``ctx.wait_first`` returns: how the first of several ended, and
    which one it was (``child_id``)."""

    child_id: str = ""


@dataclass(frozen=True, slots=True)
class ReplayDivergence:
    """What a replay check found: the recorded history no longer fits the code.

    ``location`` is where (``sum/~3/fetch``; empty for the root), ``reason``
    why, and ``code`` the error's code (``history_diverged``, or the code of
    another error the replay raised, such as ``entry_in_progress``).
    """

    workflow_id: str
    location: str
    reason: str
    code: str = "history_diverged"


@dataclass(frozen=True, slots=True)
class Failure:
    """Why a ``try_step`` or ``try_block`` did not succeed.

    ``kind`` is ``"critical"``, ``"timeout"``, ``"exhausted"``, ``"rollback"``,
    ``"join"`` or ``"race"``; ``name`` is the failing entry's name.
    """

    kind: str
    name: str
    attempts: int
    error: BaseException


@dataclass(frozen=True, slots=True)
class StepResult(Generic[T]):
    """The result of ``try_step``/``try_block``: a value or a failure."""

    ok: bool
    value: T | None = None
    failure: Failure | None = None


@dataclass(frozen=True, slots=True)
class WorkflowOutcome:
    """Where one ``run_workflow`` call left the workflow."""

    state: OutcomeState
    output: Any = None
    error: BaseException | None = None
    sleep_until: float | None = None
    waiting_for: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class StepErrorEvent:
    """A step attempt failed (reported once per failed attempt)."""

    workflow_id: str
    step_name: str
    attempt: int
    max_retries: int
    remaining_retries: int
    will_retry: bool
    retry_delay: float | None
    retry_at: float | None
    error: BaseException


@dataclass(frozen=True, slots=True)
class RollbackErrorEvent:
    """A rollback handler failed."""

    workflow_id: str
    step_name: str
    error: BaseException


@dataclass(frozen=True, slots=True)
class WorkflowErrorEvent:
    """The workflow failed."""

    workflow_id: str
    error: BaseException


ErrorEvent = StepErrorEvent | RollbackErrorEvent | WorkflowErrorEvent
ErrorHook = Callable[[ErrorEvent], Awaitable[None] | None]


@dataclass(frozen=True, slots=True)
class RollbackContext:
    """What a rollback handler receives as its first argument."""

    workflow_id: str
    is_evicted: Callable[[], bool]


@dataclass(frozen=True, slots=True)
class WorkflowDefinition:
    """A workflow function with its registered name.

    ``timeout`` (seconds) is the default deadline of each instance, counted
    from its start; None: no deadline.
    """

    name: str
    fn: Callable[..., Awaitable[Any]]
    # A cron expression: the runtime starts one workflow per tick, in the
    # IANA zone ``tz`` (None: the project's TIME_ZONE).
    cron: str | None = None
    tz: str | None = None
    # Seconds each instance may live before it is cancelled (None: forever).
    timeout: float | None = None
    # Who may read its streams over HTTP: (request, workflow_id, key) -> bool
    # (sync or async). None: nobody (the SSE route answers 403).
    can_read_stream: Callable[..., Any] | None = None

    def __call__(self, ctx: Any, input: Any) -> Awaitable[Any]:
        return self.fn(ctx, input)


# Every definition ``@workflow`` made, in order: the Django runtime names
# the ones it never registered when a caller asks for an unknown name.
defined: list[WorkflowDefinition] = []


def seconds(value: float | timedelta | None) -> float | None:
    """Return ``value`` in seconds (a number or a timedelta); None stays None."""
    if value is None:
        return None
    if isinstance(value, timedelta):
        return value.total_seconds()
    return float(value)


def workflow(
    fn: Callable[..., Awaitable[Any]] | None = None,
    *,
    name: str | None = None,
    cron: str | None = None,
    tz: str | None = None,
    timeout: float | timedelta | None = None,
    can_read_stream: Callable[..., Any] | None = None,
) -> Any:
    """Mark ``fn`` as a workflow: ``@workflow`` or ``@workflow(name="order")``.

    ``cron="0 2 * * *"`` (with ``tz``) also starts it on that schedule, with
    the input ``{"scheduled_at": <the tick, ISO 8601 UTC>}``. ``timeout``
    (seconds or a timedelta) gives every instance a deadline: when it
    passes, the instance is cancelled with reason ``timeout`` (its rollbacks
    run). ``can_read_stream(request, workflow_id, key)`` (sync or async)
    decides who may follow its streams over HTTP (Server-Sent Events);
    without it they are not readable over HTTP at all. Registers nothing:
    the Django runtime keeps the registry and the schedule.
    """
    if cron is not None and not isinstance(cron, str):
        raise TypeError("cron is a cron expression string")
    if tz is not None and not isinstance(tz, str):
        raise TypeError("tz is an IANA time zone name")
    limit = seconds(timeout)
    if limit is not None and limit <= 0:
        raise ValueError("A workflow timeout must be positive")
    if can_read_stream is not None and not callable(can_read_stream):
        raise TypeError("can_read_stream is a function (request, workflow_id, key)")

    def wrap(func: Callable[..., Awaitable[Any]]) -> WorkflowDefinition:
        definition = WorkflowDefinition(
            name=name or func.__name__,
            fn=func,
            cron=cron,
            tz=tz,
            timeout=limit,
            can_read_stream=can_read_stream,
        )
        defined.append(definition)
        return definition

    return wrap(fn) if fn is not None else wrap
