"""Shared pieces of the remote client: its errors, wire constants and key handling."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, Protocol

from ..encoding import Encoding
from ..exceptions import InvalidOutput, RivetError

MEDIA_TYPES: dict[str, str] = {"json": "application/json", "cbor": "application/cbor"}
# Close codes after which reconnecting cannot help.
FINAL_CLOSE_CODES = frozenset({1000, 4400, 4403})
# The server closed because of a frame it could not read (too large): the
# pending calls fail with the error frame it sent just before.
FRAME_CLOSE_CODE = 4413
# Frame size limit until ``init`` says otherwise (the server's default).
DEFAULT_MAX_FRAME_BYTES = 65536
Status = Literal["connecting", "connected", "disconnected"]
Handler = Callable[..., Any]


class SocketOptions(Protocol):
    """What a WebSocket connection reads of its client (a ``Client``)."""

    encoding: Encoding
    headers: dict[str, str]
    timeout: float
    origin: str


class Conversions:
    """The typed values of an actor class's actions, as a remote caller sees them.

    Given the ``Actor`` class (``client.actor(Cart, key)``), arguments of
    annotated types are sent as the wire carries them and results come back
    as the annotated types (docs/types.md), as with ``handle.call`` on the
    server. The class is read for its ``actions`` only: importing a
    project's actor module needs no settings. Without it, values go as they
    are.
    """

    def __init__(self, definition: Any = None) -> None:
        self._actions: dict[str, Any] = dict(getattr(definition, "actions", {}) or {})

    def _types(self, action: str) -> Any:
        spec = self._actions.get(action)
        return None if spec is None else getattr(spec, "types", None)

    def args(self, action: str, args: tuple[Any, ...]) -> list[Any]:
        """Return an action's arguments as the wire carries them."""
        types = self._types(action)
        if types is None or types.plain:
            return list(args)
        return list(types.dump_args(list(args)))

    def output(self, action: str, value: Any) -> Any:
        """Return an action's output as its result annotation declares it."""
        types = self._types(action)
        if types is None or types.plain or types.result is None:
            return value
        return types.result.load(value, "output", InvalidOutput)


class SocketTarget(Protocol):
    """The actor a WebSocket connection opens (an ``ActorClient``).

    The connection module knows the HTTP module only through this, as the
    HTTP module builds connections: neither imports the other's names back.
    """

    @property
    def client(self) -> SocketOptions:
        """The client whose options the connection uses."""
        ...

    @property
    def conversions(self) -> Conversions:
        """The typed values of the actor's actions."""
        ...

    def connect_url(self, params: list[tuple[str, str]]) -> str:
        """Return the URL of this actor's WebSocket route, ``params`` appended."""
        ...


class ConnectionLost(RivetError):
    """The socket closed before the call's answer arrived (it may have run)."""

    group = "client"
    code = "connection_lost"
    default_message = "The connection was lost before the answer arrived"


class HTTPError(RivetError):
    """The server answered with an error that is not a rivet error body."""

    group = "client"
    code = "http_error"


def _key_list(key: Any) -> list[str]:
    if key is None:
        return []
    if isinstance(key, str):
        return [key]
    return list(key)
