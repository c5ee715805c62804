"""State shared by every context of one execution of a workflow function."""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from django_rivet import clock

from . import keys, schema
from .driver import EngineDriver
from .errors import EvictedError
from .live import LiveWindow
from .storage import Storage
from .values import ErrorEvent, ErrorHook

__all__ = ["RollbackAction", "RollbackStop", "Run", "complete", "emit"]

logger = logging.getLogger("django_rivet.workflow")


class RollbackStop(BaseException):  # noqa: N818 - internal signal
    """A replay-only run reached history that was never completed.

    ``checked`` is set once a replay check validated the scope it stopped in.
    """

    def __init__(self) -> None:
        super().__init__()
        self.checked = False


@dataclass(slots=True)
class RollbackAction:
    """A completed step whose rollback handler may have to run."""

    seq: int
    entry_id: str
    name: str
    output: Any
    handler: Callable[..., Any]


@dataclass(slots=True)
class Run:
    """One execution: storage, driver, mode, and what was visited so far.

    ``visited`` holds every location (entries and scopes) reached in this
    execution: a second visit is a duplicate name, and a recorded entry that is
    neither visited nor below a ``covered`` location (history legitimately not
    replayed, such as a finished loop's iterations) means the code diverged.

    ``rollback`` runs replay only: recorded entries give their recorded
    results and the first entry that is not finished in history stops the
    replay (:class:`RollbackStop`). A rollback collects the rollback handlers
    on the way; a ``check`` only looks for divergence.
    """

    workflow_id: str
    storage: Storage
    driver: EngineDriver
    rollback: bool = False
    eviction: asyncio.Event | None = None
    on_error: ErrorHook | None = None
    # A replay check (``check_replay``): a rollback-style replay that runs
    # nothing and writes nothing, but validates every scope it leaves.
    check: bool = False
    # Called with the message id once a reply is recorded (``ctx.reply``).
    on_reply: Callable[[str], None] | None = None
    # The live window (``live_wait``): waits that begin in it wait in
    # process (``engine.live``). None: every wait unwinds at once.
    live: LiveWindow | None = None
    visited: set[keys.Location] = field(default_factory=set)
    covered: set[keys.Location] = field(default_factory=set)
    rollback_actions: list[RollbackAction] = field(default_factory=list)
    consumed_messages: set[str] = field(default_factory=set)
    # The driver's check for a cancel, run before each step attempt (an
    # optional driver extension; see EngineDriver).
    check_cancel: Callable[[], Awaitable[None]] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.check_cancel = getattr(self.driver, "check_cancel", None)
        # Messages recorded anywhere in history must never be received again.
        for entry in self.storage.entries.values():
            if entry.kind == "message":
                for message in entry.data.get("messages") or ():
                    self.consumed_messages.add(str(message.get("id")))

    def evicted(self) -> bool:
        """Return whether the host asked the run to stop."""
        return self.eviction is not None and self.eviction.is_set()

    def live_for(self, seconds: float | None = None) -> bool:
        """Tell whether a wait (of ``seconds``; None: any) may wait live."""
        window = self.live
        if window is None or self.rollback or self.check:
            return False
        return window.covers(0.0 if seconds is None else seconds)

    def cover(self, location: keys.Location) -> None:
        """Treat every entry below ``location`` as legitimately not replayed."""
        self.covered.add(tuple(location))

    async def emit(self, event: ErrorEvent) -> None:
        """Hand ``event`` to the ``on_error`` hook."""
        await emit(self.on_error, event)

    async def until_evicted(self, awaitable: Any) -> Any:
        """Await ``awaitable`` unless the run is evicted first."""
        if self.eviction is None:
            return await awaitable
        if self.eviction.is_set():
            if inspect.iscoroutine(awaitable):
                awaitable.close()
            raise EvictedError()
        work = asyncio.ensure_future(awaitable)
        stop = asyncio.ensure_future(self.eviction.wait())
        try:
            await asyncio.wait({work, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not work.done():
                work.cancel()
                await asyncio.gather(work, return_exceptions=True)
        if work.cancelled():
            raise EvictedError()
        return work.result()


async def emit(hook: ErrorHook | None, event: ErrorEvent) -> None:
    """Call ``hook(event)``; a failing hook is logged, never propagated."""
    if hook is None:
        return
    try:
        result = hook(event)
        if inspect.isawaitable(result):
            await result
    except Exception:
        logger.exception(
            "workflow on_error hook failed workflow=%s event=%s",
            event.workflow_id,
            type(event).__name__,
        )


def complete(
    storage: Storage, entry: schema.Entry, what: str = "", **data: Any
) -> None:
    """Mark ``entry`` and its metadata completed, updating ``data``.

    The update goes through the size check (``what`` names the entry in the
    error); over the limit nothing changes and ``StorageLimitError`` is raised.
    """
    storage.update(entry, what or f"The {entry.kind} entry", **data)
    metadata = storage.meta(entry)
    metadata.status = "completed"
    metadata.completed_at = clock.now()
    metadata.touch()
