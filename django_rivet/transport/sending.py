"""Sending on a socket: frames under flow control, errors, and closing.

:class:`Sender` is the part of :class:`~.sockets.ConnectionConsumer` that
talks to the client: every frame goes through the socket's
:class:`~.flow.Outbound` (a client that does not read for
``SLOW_CONSUMER_TIMEOUT`` is closed with 4408), an error frame is encoded
by the flavour's codec, and a close waits for the answer of the action
running on the socket (the caller learns the outcome of the action that
closed its own socket), then is sent even to a client that does not read.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import uuid
from typing import Any, ClassVar

from ..conf import rivet_settings
from ..exceptions import RivetError
from .flow import Inbound, Outbound
from .frames import CLOSE_SLOW_CONSUMER, CLOSE_TIMEOUT
from .subscriptions import Subscriptions

logger = logging.getLogger("django_rivet.transport")

__all__ = ["Sender"]


class Sender:
    """Frames out, and the close, of one connection (mixed into the consumer)."""

    flavour: ClassVar[str]
    closed: bool
    conn_id: uuid.UUID | None
    inbound: Inbound
    outbound: Outbound | None
    subscriptions: Subscriptions
    _in_action: bool
    _close_after_action: tuple[int, str] | None
    _stopped: asyncio.Event

    def encode_error(self, error: RivetError, action_id: Any) -> bytes:
        """Encode an error frame (the flavour's codec)."""
        raise NotImplementedError

    def text_frames(self) -> bool:
        """Whether frames travel as text (the flavour's codec)."""
        raise NotImplementedError

    # -- sending ------------------------------------------------------------------
    async def send_error_frame(
        self, error: RivetError, action_id: Any = None, urgent: bool = False
    ) -> None:
        try:
            data = self.encode_error(error, action_id)
        except (TypeError, ValueError):  # unencodable metadata
            error = copy.copy(error)
            error.metadata = None
            data = self.encode_error(error, action_id)
        await self.send_frame(data, urgent)

    async def send_frame(self, data: bytes, urgent: bool = False) -> None:
        """Send an encoded frame, as text or binary as the codec says.

        ``urgent``: before a close -- no room awaited, ``CLOSE_TIMEOUT`` at
        most, and a client that does not take it is not closed as slow (the
        close follows anyway).
        """
        if self.closed:
            return
        message: dict[str, Any] = (
            {"type": "websocket.send", "text": data.decode("utf-8")}
            if self.text_frames()
            else {"type": "websocket.send", "bytes": data}
        )
        await self.send_message(message, urgent)

    async def send_message(self, message: dict[str, Any], urgent: bool = False) -> None:
        """Send a ``websocket.send`` message under flow control."""
        if self.closed:
            return
        assert self.outbound is not None
        timeout = CLOSE_TIMEOUT if urgent else rivet_settings.SLOW_CONSUMER_TIMEOUT
        try:
            taken = await self.outbound.send(message, timeout, room=not urgent)
        except OSError:
            # The client is gone (uvicorn raises ClientDisconnected); the
            # server's websocket.disconnect follows and cleans up.
            self.closed = True
            return
        if not taken and not urgent:
            # The client does not read: give up on it; it reconnects with
            # since and catches up from the log.
            logger.warning(
                "closing a slow consumer flavour=%s conn_id=%s",
                self.flavour,
                self.conn_id,
            )
            await self._close(CLOSE_SLOW_CONSUMER, "rivet.slow_consumer")

    async def _close_when_answered(self, code: int, reason: str) -> None:
        if self._in_action:
            # Possibly this connection's own action: answer it first.
            self._close_after_action = (code, reason)
            return
        await self._close(code, reason)

    async def _close(self, code: int, reason: str = "") -> None:
        if self.closed:
            return
        self.closed = True
        self.inbound.close()
        assert self.outbound is not None
        # Sent even when the socket is full. Not cancelled: a server whose
        # send waits (uvicorn) ends a socket that does not take its close
        # frame in its own time; if that takes longer than CLOSE_TIMEOUT the
        # connection's cleanup runs without waiting for the server.
        closing = asyncio.ensure_future(self._send_close(code, reason))
        if not (await asyncio.wait({closing}, timeout=CLOSE_TIMEOUT))[0]:
            logger.info("close frame not taken, ending conn_id=%s", self.conn_id)
            self._stopped.set()
        self.outbound.close()  # sends waiting for room end, unsent
        await self.subscriptions.stop()  # nothing more to send

    async def _send_close(self, code: int, reason: str) -> None:
        assert self.outbound is not None
        with contextlib.suppress(OSError):  # the client is already gone
            await self.outbound.send(
                {"type": "websocket.close", "code": code, "reason": reason},
                None,
                room=False,
            )
