"""A WebSocket client that sends and never reads, and a server's peak memory.

:class:`DeafSocket` speaks just enough WebSocket on a raw socket to open a
connection (it reads the handshake's answer, nothing after it) and then only
writes: a flood from a client that never reads, which no client library can
be made to be (they read in the background, close frames included). Its
receive buffer is small, so the server's answers fill it at once.
:class:`Peak` samples a server process's resident memory from a thread.
"""

from __future__ import annotations

import base64
import os
import select
import socket
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from tests.support.servers import rss_kib

MIB = 1024 * 1024


def frame(payload: bytes | str) -> bytes:
    """A client frame (text for ``str``, binary for ``bytes``), masked with zeros.

    A zero mask leaves the payload as it is, so one frame can be sent again
    and again without masking it each time (servers cannot tell the mask was
    not random).
    """
    opcode = 0x1 if isinstance(payload, str) else 0x2
    data = payload.encode() if isinstance(payload, str) else payload
    size = len(data)
    if size < 126:
        head = bytes((0x80 | opcode, 0x80 | size))
    elif size < 1 << 16:
        head = bytes((0x80 | opcode, 0x80 | 126)) + size.to_bytes(2, "big")
    else:
        head = bytes((0x80 | opcode, 0x80 | 127)) + size.to_bytes(8, "big")
    return head + b"\0\0\0\0" + data


@dataclass
class Pushed:
    """What a flood achieved: bytes the kernel took, and why it stopped."""

    sent: int
    #: ``closed`` (the server ended the socket), ``stalled`` (the server
    #: stopped reading for ``stall`` seconds) or ``done`` (all of it sent).
    outcome: str
    seconds: float


class DeafSocket:
    """A client socket that reads the handshake's answer, then never reads."""

    def __init__(self, url: str, subprotocols: list[str] | None = None) -> None:
        parts = urlsplit(url)
        self.sock = socket.socket()
        # Small, so the server's answers fill it (and its own buffers) soon.
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.sock.connect((parts.hostname, parts.port))
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        key = base64.b64encode(os.urandom(16)).decode()
        lines = [
            f"GET {target} HTTP/1.1",
            f"Host: {parts.hostname}:{parts.port}",
            "Upgrade: websocket",
            "Connection: Upgrade",
            f"Sec-WebSocket-Key: {key}",
            "Sec-WebSocket-Version: 13",
        ]
        if subprotocols:
            lines.append("Sec-WebSocket-Protocol: " + ", ".join(subprotocols))
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        self.status = self._read_head()

    def _read_head(self) -> str:
        # Peek, then take exactly the head: what follows it stays unread.
        self.sock.settimeout(30)
        while True:
            seen = self.sock.recv(65536, socket.MSG_PEEK)
            end = seen.find(b"\r\n\r\n")
            if end >= 0:
                head = self.sock.recv(end + 4)
                return head.split(b"\r\n", 1)[0].decode()
            if not seen:
                raise ConnectionError("closed during the handshake")
            time.sleep(0.01)

    def push(
        self, data: bytes, total: int, stall: float = 3.0, deadline: float = 60.0
    ) -> Pushed:
        """Send ``data`` over and over until ``total`` bytes went, or it stops."""
        self.sock.settimeout(stall)
        sent = 0
        start = time.monotonic()
        outcome = "done"
        try:
            while sent < total:
                if time.monotonic() - start > deadline:
                    outcome = "stalled"
                    break
                self.sock.sendall(data)
                sent += len(data)
        except TimeoutError:
            outcome = "stalled"
        except OSError:  # reset, broken pipe: the server ended the socket
            outcome = "closed"
        return Pushed(sent, outcome, time.monotonic() - start)

    def closed(self, timeout: float) -> bool:
        """Wait until the server ends the socket (without reading from it)."""
        poller = select.poll()
        flags = select.POLLRDHUP | select.POLLHUP | select.POLLERR
        poller.register(self.sock, flags)
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            if any(mask & flags for _, mask in poller.poll(max(0, left) * 1000)):
                return True
            if left <= 0:
                return False

    def close(self) -> None:
        """Drop the socket (an abort: unread data makes it a reset)."""
        self.sock.close()


class Peak:
    """The highest resident memory (KiB) of process ``pid`` while in the block."""

    def __init__(self, pid: int, every: float = 0.02) -> None:
        self.pid, self.every = pid, every
        self.start = self.peak = rss_kib(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(self.every):
            self.peak = max(self.peak, rss_kib(self.pid))

    def __enter__(self) -> Peak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_kib(self.pid))

    @property
    def growth_mib(self) -> float:
        """Peak growth over the start, in MiB."""
        return (self.peak - self.start) / 1024
