"""The ``request/*`` errors: a request or frame refused before anything ran."""

from __future__ import annotations

from .base import RivetError

__all__ = [
    "InvalidArgs",
    "InvalidEncoding",
    "MalformedRequest",
    "MethodNotAllowed",
    "RequestTooLarge",
    "TooManyFrames",
]


class InvalidEncoding(RivetError):
    """The request names an encoding other than ``json`` or ``cbor``."""

    group = "request"
    code = "invalid_encoding"
    http_status = 400
    default_message = "Invalid encoding"


class MalformedRequest(RivetError):
    """The body or frame could not be decoded or has the wrong shape."""

    group = "request"
    code = "malformed"
    http_status = 400
    default_message = "Malformed request"


class RequestTooLarge(RivetError):
    """The body, frame or connection parameters exceed their size limit."""

    group = "request"
    code = "too_large"
    http_status = 413
    default_message = "Request too large"


class InvalidArgs(RivetError):
    """The arguments do not fit the handler's signature."""

    group = "request"
    code = "invalid_args"
    http_status = 400
    default_message = "Invalid arguments"


class TooManyFrames(RivetError):
    """A socket sent more frames than ``MAX_PENDING_FRAMES`` ahead of the answers."""

    group = "request"
    code = "too_many_frames"
    http_status = 429
    default_message = "Too many frames waiting to be handled; wait for the answers"


class MethodNotAllowed(RivetError):
    """The route does not answer this HTTP method."""

    group = "request"
    code = "method_not_allowed"
    http_status = 405
    default_message = "Method not allowed"
