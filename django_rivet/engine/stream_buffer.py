"""The stream writes of one run waiting for their commit (:class:`StreamBuffer`).

See :mod:`.streams` for what the writes are and why they are grouped.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from .flush import driver_call
from .stream_store import StreamWrite

__all__ = ["FLUSH_BYTES", "FLUSH_DELAY", "FLUSH_VALUES", "StreamBuffer"]

logger = logging.getLogger("django_rivet.workflow")

# Writes commit together: this long after the first one waiting...
FLUSH_DELAY = 0.02
# ...or at once when this many values, or bytes of values, wait.
FLUSH_VALUES = 100
FLUSH_BYTES = 256 * 1024


class StreamBuffer:
    """The stream writes of one run that wait for their commit.

    ``flush`` is the run's full flush (history, then :meth:`commit`);
    :meth:`settle` runs it now when enough waits, else arms a timer that
    runs it :data:`FLUSH_DELAY` seconds after the first write waiting.
    """

    def __init__(self, driver: Any, flush: Callable[[], Awaitable[None]]) -> None:
        self.driver = driver
        self._flush = flush
        self.pending: list[StreamWrite] = []
        self.bytes = 0
        self.failure: BaseException | None = None
        self._first_at: float | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    def add(self, write: StreamWrite) -> None:
        """Queue a write for the next commit."""
        append = getattr(self.driver, "append_streams", None)
        if append is None:
            raise NotImplementedError(
                f"{type(self.driver).__name__} does not store workflow streams "
                "(it has no append_streams method)"
            )
        if not self.pending:
            self._first_at = asyncio.get_running_loop().time()
        self.pending.append(write)
        self.bytes += len(write.value) + len(write.key)

    async def settle(self) -> None:
        """Flush now if enough waits (or the last background flush failed)."""
        failure = self.failure
        if failure is not None and not isinstance(failure, Exception):
            raise failure  # the process is going down (KeyboardInterrupt...)
        if not self.pending:
            return
        loop = asyncio.get_running_loop()
        assert self._first_at is not None
        if (
            self.failure is not None
            or len(self.pending) >= FLUSH_VALUES
            or self.bytes >= FLUSH_BYTES
            or loop.time() - self._first_at >= FLUSH_DELAY
        ):
            self.failure = None
            await self._flush()
        elif self._timer is None and (self._task is None or self._task.done()):
            self._timer = loop.call_at(self._first_at + FLUSH_DELAY, self._due)

    def _due(self) -> None:
        self._timer = None
        if self.pending and (self._task is None or self._task.done()):
            self._task = asyncio.get_running_loop().create_task(self._background())

    async def _background(self) -> None:
        # The run is waiting for something else (a step's I/O, a sleep):
        # commit what it wrote so far. A failure waits for the next write or
        # flush, which raises it in the run.
        try:
            await self._flush()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # kept for the run to raise
            self.failure = exc
            logger.debug("background stream flush failed", exc_info=True)

    async def commit(self) -> None:
        """Hand the waiting writes to the driver; keep them if it fails."""
        if not self.pending and not self._lock.locked():
            return  # nothing waits, no commit runs (every flush: a step's)
        async with self._lock:
            if self.pending:
                await self._commit()

    async def _commit(self) -> None:
        batch = list(self.pending)
        await driver_call(self.driver.append_streams(batch), "append streams")
        del self.pending[: len(batch)]
        self.bytes = sum(len(w.value) + len(w.key) for w in self.pending)
        if self.pending:
            self._first_at = asyncio.get_running_loop().time()
        else:
            self._first_at = None
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

    def stop(self) -> None:
        """Stop committing in the background (the run ended)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._task is not None and not self._task.done():
            self._task.cancel()
