"""``ctx.write_stream`` and ``ctx.close_stream``: values readers follow as they come.

A stream is an append-only list of values per workflow and key, stored by
the driver (``driver.append_streams``, see :mod:`.stream_store`), not in
the history: a run never loads them back, and a stream of 10,000 values
adds nothing to a resume but its writes.

**Exactly once from the workflow body.** A body write carries a *source*:
its scope's location, the key and how many writes (or closes) of that key
the scope made before it -- the same on every replay of deterministic code.
The store drops a write whose source it holds, so a replay that passes a
write again appends nothing, and a crash before the write committed lets
the replay append it. **At least once from inside a step** (an ``async``
step function calling ``await ctx.write_stream(...)``): such writes have
no source, are committed before the step's output is recorded, and a
retried step writes them again (DBOS's rule). A ``transaction=True`` step
cannot write (its function runs inside the driver's transaction, where the
engine's writes cannot reach it): write from the body after it.

**Grouped commits.** Writes wait in memory (:class:`StreamBuffer`) and
commit together: :data:`FLUSH_DELAY` seconds after the first one waiting,
or as soon as :data:`FLUSH_VALUES` values or :data:`FLUSH_BYTES` bytes
wait, and with every flush the run makes anyway (a step, a sleep, its
end). A flush writes the history first and the stream values after it, so
no value is ever committed before the history it was computed from (an
ephemeral step's output, say); a failed commit keeps the values waiting
for the next one. Readers see a value only once it is committed.
"""

from __future__ import annotations

import contextvars
import hashlib
import logging
from typing import Any

from . import cbor
from .errors import CriticalError, StepOutputError
from .limits import check_record
from .scope import Scope
from .stream_buffer import FLUSH_BYTES, FLUSH_DELAY, FLUSH_VALUES, StreamBuffer
from .stream_store import StreamWrite

__all__ = [
    "FLUSH_BYTES",
    "FLUSH_DELAY",
    "FLUSH_VALUES",
    "MAX_STREAM_KEY_LENGTH",
    "check_stream_key",
    "in_step",
    "run_stream_write",
    "step_running",
    "stream_source",
]

logger = logging.getLogger("django_rivet.workflow")

MAX_STREAM_KEY_LENGTH = 255
# Set while a step function runs: "transactional" inside a transaction=True
# step, "step" inside any other (writes made there are the step's).
_step: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "rivet_workflow_step", default=None
)


def in_step(transactional: bool) -> _InStep:
    """Mark the code run inside as a step function's (see :func:`run_stream_write`)."""
    return _InStep("transactional" if transactional else "step")


class _InStep:
    """What :func:`in_step` returns: a class, as every step enters one (a
    generator's context manager costs three times as much)."""

    __slots__ = ("_token", "_value")

    def __init__(self, value: str) -> None:
        self._value = value

    def __enter__(self) -> None:
        self._token = _step.set(self._value)

    def __exit__(self, *exc: object) -> None:
        _step.reset(self._token)


def step_running() -> bool:
    """Return whether the calling code runs inside a step function."""
    return _step.get() is not None


def check_stream_key(key: str) -> None:
    """Refuse a stream key that is not a string of 1-255 characters."""
    if not isinstance(key, str) or not 0 < len(key) <= MAX_STREAM_KEY_LENGTH:
        raise ValueError(
            f"A stream key is a string of 1-{MAX_STREAM_KEY_LENGTH} characters"
        )


def stream_source(scope: Scope, what: str, key: str, count: int) -> str:
    """Return the source of the ``count``-th ``what`` (write, close) of ``key``.

    Built from names, never from positions in memory, so every replay of the
    same code computes it again.
    """
    path = scope.run.storage.location_string(scope.location)
    text = f"{path}\x00{what}\x00{key}\x00{count}"
    data = text.encode("utf-8", "surrogatepass")
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def encode_value(value: Any, key: str) -> bytes:
    """Encode a stream value, refusing what cannot be stored or is too large."""
    what = f'A value of stream "{key}"'
    try:
        cbor.check_storable(value, what)
        data = cbor.dumps(value)
    except (TypeError, ValueError) as exc:
        raise StepOutputError(str(exc)) from exc
    check_record(key.encode("utf-8", "surrogatepass"), data, what)
    return data


async def run_stream_write(
    scope: Scope, key: str, value: Any, count: int | None, close: bool
) -> None:
    """Write ``value`` to stream ``key`` (or close it).

    ``count`` is the body's count of this call (None: called inside a step).
    A replay that only reads history (a rollback, a replay check) writes
    nothing.
    """
    run = scope.run
    if run.rollback:
        return
    if _step.get() == "transactional":
        raise CriticalError(
            "ctx.write_stream and ctx.close_stream cannot run inside a "
            "transaction=True step: write from the workflow body after it"
        )
    data = b"" if close else encode_value(value, key)
    source = None
    if count is not None:
        source = stream_source(scope, "close" if close else "write", key, count)
    buffer: StreamBuffer = run.storage.streams
    buffer.add(StreamWrite(key, data, source, close))
    await buffer.settle()
