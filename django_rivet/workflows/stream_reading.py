"""The stream readers users call: ``handle.read_stream`` and ``aread_stream``.

Each follows one stream with a :class:`~.stream_feeds.StreamReader` (the
process's feed of that stream); the synchronous one waits on a background
event loop of the process.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

from .stream_feeds import StreamReader

__all__ = ["StreamReading", "aread_stream", "read_stream"]


async def aread_stream(
    workflow_id: str, key: str, since: int = 0
) -> AsyncIterator[Any]:
    """Yield the values of a stream after offset ``since``, waiting for new ones.

    Ends once the stream is closed or its workflow finished, and every value
    was read. Raises ``workflow/not_found`` for a workflow that does not exist.
    """
    reader = StreamReader(workflow_id, key, since)
    try:
        while (found := await reader.next()) is not None:
            for value in found:
                yield value.decoded()
    finally:
        reader.close()


_background: asyncio.AbstractEventLoop | None = None
_background_lock = threading.Lock()


def _background_loop() -> asyncio.AbstractEventLoop:
    """Return the process's loop for synchronous readers (started on first use)."""
    global _background
    with _background_lock:
        if _background is None or _background.is_closed():
            _background = asyncio.new_event_loop()
            thread = threading.Thread(
                target=_background.run_forever, name="rivet-streams", daemon=True
            )
            thread.start()
        return _background


def read_stream(workflow_id: str, key: str, since: int = 0) -> Iterator[Any]:
    """Synchronous :func:`aread_stream` (the waiting happens on a background loop)."""
    loop = _background_loop()

    async def open_reader() -> StreamReader:
        return StreamReader(workflow_id, key, since)

    reader = asyncio.run_coroutine_threadsafe(open_reader(), loop).result()
    try:
        while True:
            found = asyncio.run_coroutine_threadsafe(reader.next(), loop).result()
            if found is None:
                return
            for value in found:
                yield value.decoded()
    finally:
        loop.call_soon_threadsafe(reader.close)


class StreamReading:
    """The stream readers of a workflow handle (``WorkflowHandle`` has them)."""

    workflow_id: str

    def read_stream(self, key: str, since: int = 0) -> Iterator[Any]:
        """Iterate over the values of stream ``key`` after offset ``since``.

        Blocks for new values as the workflow writes them (``ctx.write_stream``)
        and ends once the stream is closed or the workflow finished, and
        every value was read. Offsets count from 1: ``since=120`` starts at
        the 121st value.
        """
        return read_stream(self.workflow_id, key, since)

    def aread_stream(self, key: str, since: int = 0) -> AsyncIterator[Any]:
        """Async :meth:`read_stream` (``async for value in ...``)."""
        return aread_stream(self.workflow_id, key, since)
