"""The base of every coded error, and the ``rivet`` and ``user`` groups.

Every error a client can see derives from :class:`RivetError` and carries a
stable ``group``/``code`` pair, a message and optional metadata; its wire
form is :meth:`RivetError.to_dict`.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "InternalError",
    "RivetError",
    "UserError",
]


class RivetError(Exception):
    """Base of every coded django-rivet error."""

    group: str = "rivet"
    code: str = "error"
    http_status: int = 500
    default_message: str = "An error occurred"

    def __init__(
        self,
        message: str | None = None,
        *,
        metadata: Any = None,
        code: str | None = None,
    ) -> None:
        self.message = message if message is not None else self.default_message
        self.metadata = metadata
        if code is not None:
            self.code = code
        super().__init__(self.message)

    @property
    def qualified_code(self) -> str:
        """Return ``group/code``."""
        return f"{self.group}/{self.code}"

    def to_dict(self) -> dict[str, Any]:
        """Return the wire form ``{group, code, message, metadata}``."""
        return {
            "group": self.group,
            "code": self.code,
            "message": self.message,
            "metadata": self.metadata,
        }

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.qualified_code}: {self.message!r})"


class UserError(RivetError):
    """An error a handler raises on purpose; it reaches the client intact."""

    group = "user"
    code = "user_error"
    http_status = 400

    def __init__(
        self, message: str, code: str = "user_error", metadata: Any = None
    ) -> None:
        super().__init__(message, metadata=metadata, code=code)


class InternalError(RivetError):
    """Any unexpected failure, as the wire shows it (details in server logs)."""

    group = "rivet"
    code = "internal_error"
    http_status = 500
    default_message = "An internal error occurred"


class NoChannelLayer(RivetError):
    """A WebSocket reached a server without a channel layer: it cannot be served."""

    group = "rivet"
    code = "no_channel_layer"
    http_status = 500
    default_message = (
        "The server has no channel layer, which WebSockets need: define "
        "CHANNEL_LAYERS in the settings (RIVET['CHANNEL_LAYER'] names the alias)"
    )
