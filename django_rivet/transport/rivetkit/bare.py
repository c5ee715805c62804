"""BARE codec of the RivetKit client protocol (versions 1-4), and nothing else.

The official client's ``bare`` encoding prefixes every payload with its
schema version as a little-endian ``u16`` (the ``vbare`` envelope) followed
by a BARE message. Fields typed ``data`` carry CBOR (action arguments and
outputs, event arguments, error metadata), which this module hands over as
raw bytes: decoding them is :mod:`.values`' job.

Reading accepts versions 1 to 4: the messages a client sends (``ToServer``,
``HttpActionRequest``, and ``HttpQueueSendRequest`` from version 3 on) have
the same layout in all of them. Writing always produces version 4, the one
``rivetkit`` 2.3.x sends and reads; version 4 differs from 3 only by the
optional ``actor`` of errors, which this server leaves out.

The reader is strict like ``@rivetkit/bare-ts``: non-canonical or oversized
varints, booleans other than 0/1, invalid UTF-8, truncated input and
trailing bytes are refused with ``request/malformed``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from ...exceptions import MalformedRequest

__all__ = [
    "CURRENT_VERSION",
    "READABLE_VERSIONS",
    "ActionRequest",
    "ActionResponse",
    "Error",
    "Event",
    "Init",
    "QueueSendRequest",
    "SubscriptionRequest",
    "ToClient",
    "ToServer",
    "read_action_request",
    "read_queue_send_request",
    "read_to_server",
    "write_action_request",
    "write_action_response",
    "write_http_error",
    "write_queue_send_request",
    "write_queue_send_response",
    "write_to_client",
    "write_to_server",
]

CURRENT_VERSION = 4
READABLE_VERSIONS = frozenset({1, 2, 3, 4})
# HttpQueueSendRequest/Response first appear in version 3.
QUEUE_VERSIONS = frozenset({3, 4})
UINT_MAX_BYTES = 10
U64_MAX = 2**64 - 1

T = TypeVar("T")


# -- messages ------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ActionRequest:
    """``ToServer.ActionRequest``: call ``name`` with CBOR ``args``."""

    id: int
    name: str
    args: bytes


@dataclass(frozen=True, slots=True)
class SubscriptionRequest:
    """``ToServer.SubscriptionRequest``: start or stop receiving an event."""

    event_name: str
    subscribe: bool


ToServer = ActionRequest | SubscriptionRequest


@dataclass(frozen=True, slots=True)
class Init:
    """``ToClient.Init``: the connection is admitted."""

    actor_id: str
    connection_id: str


@dataclass(frozen=True, slots=True)
class Error:
    """``ToClient.Error``: for one action (``action_id``) or the connection."""

    group: str
    code: str
    message: str
    metadata: bytes | None = None
    action_id: int | None = None


@dataclass(frozen=True, slots=True)
class ActionResponse:
    """``ToClient.ActionResponse``: the CBOR output of action ``id``."""

    id: int
    output: bytes


@dataclass(frozen=True, slots=True)
class Event:
    """``ToClient.Event``: a broadcast, arguments as a CBOR list."""

    name: str
    args: bytes


ToClient = Init | Error | ActionResponse | Event


@dataclass(frozen=True, slots=True)
class QueueSendRequest:
    """``HttpQueueSendRequest``; ``timeout`` in milliseconds."""

    body: bytes
    name: str | None = None
    wait: bool | None = None
    timeout: int | None = None


# -- primitives ----------------------------------------------------------------------
class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = memoryview(data)
        self.offset = 0

    def _take(self, size: int) -> memoryview:
        end = self.offset + size
        if size < 0 or end > len(self.data):
            raise MalformedRequest("Malformed BARE: truncated message")
        chunk = self.data[self.offset : end]
        self.offset = end
        return chunk

    def u8(self) -> int:
        return self._take(1)[0]

    def u16(self) -> int:
        value: int = struct.unpack("<H", self._take(2))[0]
        return value

    def u64(self) -> int:
        value: int = struct.unpack("<Q", self._take(8))[0]
        return value

    def uint(self) -> int:
        value = 0
        for index in range(UINT_MAX_BYTES):
            byte = self.u8()
            value |= (byte & 0x7F) << (7 * index)
            if byte < 0x80:
                if index > 0 and byte == 0:
                    raise MalformedRequest("Malformed BARE: non-canonical varint")
                if value > U64_MAX:
                    raise MalformedRequest("Malformed BARE: varint over 64 bits")
                return value
        raise MalformedRequest("Malformed BARE: varint over 10 bytes")

    def bool(self) -> bool:
        byte = self.u8()
        if byte > 1:
            raise MalformedRequest("Malformed BARE: a bool is 0 or 1")
        return byte == 1

    def data_(self) -> bytes:
        return bytes(self._take(self.uint()))

    def string(self) -> str:
        raw = self._take(self.uint())
        try:
            return str(raw, "utf-8")
        except UnicodeDecodeError as exc:
            raise MalformedRequest("Malformed BARE: invalid UTF-8") from exc

    def end(self) -> None:
        if self.offset != len(self.data):
            raise MalformedRequest("Malformed BARE: trailing bytes")


class _Writer:
    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def u8(self, value: int) -> None:
        self.parts.append(bytes((value,)))

    def u16(self, value: int) -> None:
        self.parts.append(struct.pack("<H", value))

    def u64(self, value: int) -> None:
        self.parts.append(struct.pack("<Q", value))

    def uint(self, value: int) -> None:
        if not 0 <= value <= U64_MAX:
            raise ValueError(f"BARE uint out of range: {value}")
        out = bytearray()
        while value >= 0x80:
            out.append((value & 0x7F) | 0x80)
            value >>= 7
        out.append(value)
        self.parts.append(bytes(out))

    def bool(self, value: bool) -> None:
        self.u8(1 if value else 0)

    def data_(self, value: bytes) -> None:
        self.uint(len(value))
        self.parts.append(bytes(value))

    def string(self, value: str) -> None:
        self.data_(value.encode("utf-8"))

    def optional(self, value: T | None, write: Callable[[T], None]) -> None:
        """Write BARE ``optional<T>``: a presence flag, then ``value``."""
        self.bool(value is not None)
        if value is not None:
            write(value)

    def bytes(self) -> bytes:
        return b"".join(self.parts)


def _open(data: bytes, versions: frozenset[int] = READABLE_VERSIONS) -> _Reader:
    reader = _Reader(data)
    version = reader.u16()
    if version not in versions:
        raise MalformedRequest(
            f"Unsupported protocol version {version}",
            metadata={"version": version, "supported": sorted(versions)},
        )
    return reader


def _versioned() -> _Writer:
    writer = _Writer()
    writer.u16(CURRENT_VERSION)
    return writer


# -- client -> server ------------------------------------------------------------------
def read_to_server(data: bytes) -> ToServer:
    """Decode a WebSocket frame from the client."""
    reader = _open(data)
    tag = reader.u8()
    message: ToServer
    if tag == 0:
        message = ActionRequest(reader.uint(), reader.string(), reader.data_())
    elif tag == 1:
        message = SubscriptionRequest(reader.string(), reader.bool())
    else:
        raise MalformedRequest(f"Malformed BARE: unknown ToServer tag {tag}")
    reader.end()
    return message


def read_action_request(data: bytes) -> bytes:
    """Decode an ``HttpActionRequest``; return its CBOR ``args``."""
    reader = _open(data)
    args = reader.data_()
    reader.end()
    return args


def read_queue_send_request(data: bytes) -> QueueSendRequest:
    """Decode an ``HttpQueueSendRequest`` (versions 3 and 4)."""
    reader = _open(data, QUEUE_VERSIONS)
    body = reader.data_()
    name = reader.string() if reader.bool() else None
    wait = reader.bool() if reader.bool() else None
    timeout = reader.u64() if reader.bool() else None
    reader.end()
    return QueueSendRequest(body, name, wait, timeout)


def write_to_server(message: ToServer) -> bytes:
    """Encode a client frame (what the client sends; for tests and tools)."""
    writer = _versioned()
    if isinstance(message, ActionRequest):
        writer.u8(0)
        writer.uint(message.id)
        writer.string(message.name)
        writer.data_(message.args)
    else:
        writer.u8(1)
        writer.string(message.event_name)
        writer.bool(message.subscribe)
    return writer.bytes()


def write_action_request(args: bytes) -> bytes:
    """Encode an ``HttpActionRequest`` (for tests and tools)."""
    writer = _versioned()
    writer.data_(args)
    return writer.bytes()


def write_queue_send_request(request: QueueSendRequest) -> bytes:
    """Encode an ``HttpQueueSendRequest`` (for tests and tools)."""
    writer = _versioned()
    writer.data_(request.body)
    writer.optional(request.name, writer.string)
    writer.optional(request.wait, writer.bool)
    writer.optional(request.timeout, writer.u64)
    return writer.bytes()


# -- server -> client ------------------------------------------------------------------
def write_to_client(message: ToClient) -> bytes:
    """Encode a WebSocket frame for the client (version 4)."""
    writer = _versioned()
    if isinstance(message, Init):
        writer.u8(0)
        writer.string(message.actor_id)
        writer.string(message.connection_id)
    elif isinstance(message, Error):
        writer.u8(1)
        writer.string(message.group)
        writer.string(message.code)
        writer.string(message.message)
        writer.optional(message.metadata, writer.data_)
        writer.optional(message.action_id, writer.uint)
        writer.bool(False)  # actor: ActorSpecifier (v4), not sent
    elif isinstance(message, ActionResponse):
        writer.u8(2)
        writer.uint(message.id)
        writer.data_(message.output)
    else:
        writer.u8(3)
        writer.string(message.name)
        writer.data_(message.args)
    return writer.bytes()


def write_action_response(output: bytes) -> bytes:
    """Encode an ``HttpActionResponse`` carrying CBOR ``output``."""
    writer = _versioned()
    writer.data_(output)
    return writer.bytes()


def write_queue_send_response(status: str, response: bytes | None) -> bytes:
    """Encode an ``HttpQueueSendResponse`` (``completed`` or ``timedOut``)."""
    writer = _versioned()
    writer.string(status)
    writer.optional(response, writer.data_)
    return writer.bytes()


def write_http_error(
    group: str, code: str, message: str, metadata: bytes | None
) -> bytes:
    """Encode an ``HttpResponseError`` (version 4, no ``actor``)."""
    writer = _versioned()
    writer.string(group)
    writer.string(code)
    writer.string(message)
    writer.optional(metadata, writer.data_)
    writer.bool(False)
    return writer.bytes()
