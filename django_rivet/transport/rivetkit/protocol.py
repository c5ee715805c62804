"""The RivetKit client protocol in its three encodings: JSON, CBOR and BARE.

Each message has one shape, the one ``rivetkit`` 2.3.x validates with its
zod schemas (``client-protocol-zod.ts``); JSON and CBOR carry it directly and
BARE through :mod:`.bare` with CBOR-encoded payload fields. Values go through
:mod:`.values` both ways. Decoding uses :mod:`django_rivet.encoding` (CBOR tag
allow-list, depth limit); callers check sizes before calling in.

WebSocket frames are ``{body: {tag, val}}``. Action ids are JavaScript
bigints: ``["$BigInt", "7"]`` in JSON and an 8-byte unsigned integer in CBOR
(what the client's CBOR decoder turns into a bigint; its zod schema refuses a
plain number and the call would never settle).
"""

from __future__ import annotations

import json as _json
from dataclasses import dataclass
from typing import Any, Literal

from ...domain import check_value
from ...encoding import decode, encode, json_dumps
from ...exceptions import InvalidArgs, InvalidEncoding, MalformedRequest, RivetError
from ...splicing import cbor_map
from . import bare
from .values import prepare, revive

__all__ = [
    "ENCODINGS",
    "ActionCall",
    "QueueSend",
    "Subscription",
    "WireEncoding",
    "decode_action_args",
    "decode_frame",
    "decode_queue_send",
    "encode_action_output",
    "encode_action_response",
    "encode_error",
    "encode_event",
    "encode_http_error",
    "encode_init",
    "encode_output_value",
    "encode_queue_result",
    "parse_encoding",
]

WireEncoding = Literal["json", "cbor", "bare"]
ENCODINGS: tuple[WireEncoding, ...] = ("json", "cbor", "bare")


def parse_encoding(value: str | None, default: WireEncoding = "json") -> WireEncoding:
    """Validate an encoding name sent by the client."""
    if value is None or value == "":
        return default
    for encoding in ENCODINGS:
        if value == encoding:
            return encoding
    raise InvalidEncoding(
        f"Unsupported encoding {value[:32]!r}; use json, cbor or bare",
        metadata={"encoding": value[:32]},
    )


# -- decoding what the client sends ----------------------------------------------
@dataclass(frozen=True, slots=True)
class ActionCall:
    """An ``ActionRequest`` frame, decoded."""

    id: int
    name: str
    args: list[Any]


@dataclass(frozen=True, slots=True)
class Subscription:
    """A ``SubscriptionRequest`` frame, decoded."""

    event: str
    subscribe: bool


@dataclass(frozen=True, slots=True)
class QueueSend:
    """An HTTP queue send, decoded; ``timeout`` in milliseconds."""

    body: Any
    name: str | None
    wait: bool
    timeout: int | None


def _map(value: Any, what: str, keys: tuple[str, ...] | None = None) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise MalformedRequest(f"{what} must be a map")
    if keys is not None:
        for key in value:
            if key not in keys:
                # Ignored, it would run the call with its defaults.
                raise InvalidArgs(
                    f"Unknown key {key[:64]!r} in {what.lower()}; it takes "
                    + ", ".join(keys),
                    metadata={"key": key[:64], "allowed": list(keys)},
                )
    return value


def _decode_value(data: bytes | str, encoding: WireEncoding) -> Any:
    # The client writes JavaScript's undefined as CBOR undefined (revived as
    # None, like ["$Undefined", 0] in JSON); everything else JSON cannot
    # carry is refused.
    if encoding == "json":
        return revive(decode(data, "json"))
    if isinstance(data, str):
        raise MalformedRequest(f"{encoding} data must be binary")
    return revive(decode(data, "cbor", undefined=True))


def _cbor_payload(data: bytes) -> Any:
    """Decode a BARE ``data`` field (CBOR written by the client)."""
    return revive(decode(data, "cbor", undefined=True))


def _cbor_wire(value: Any) -> bytes:
    """Encode a wire value or frame part as CBOR (no storage depth check)."""
    return encode(value, "cbor")


def _args(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise InvalidArgs("args must be a list")
    return value


def decode_action_args(data: bytes, encoding: WireEncoding) -> list[Any]:
    """Decode an HTTP action body; return the argument list."""
    if encoding == "bare":
        return _args(_cbor_payload(bare.read_action_request(data)))
    body = _map(_decode_value(data, encoding), "The body", ("args",))
    return _args(body.get("args", []))


def _uint(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise MalformedRequest(f"{what} must be a non-negative integer")
    return value


def decode_queue_send(data: bytes, encoding: WireEncoding) -> QueueSend:
    """Decode an HTTP queue send body."""
    if encoding == "bare":
        request = bare.read_queue_send_request(data)
        return QueueSend(
            _cbor_payload(request.body),
            request.name,
            bool(request.wait),
            request.timeout,
        )
    body = _map(
        _decode_value(data, encoding), "The body", ("body", "name", "wait", "timeout")
    )
    name = body.get("name")
    wait = body.get("wait", False)
    timeout = body.get("timeout")
    if name is not None and not isinstance(name, str):
        raise MalformedRequest("name must be a string")
    if wait is None:
        wait = False
    if not isinstance(wait, bool):
        raise MalformedRequest("wait must be true or false")
    return QueueSend(
        body.get("body"),
        name,
        wait,
        None if timeout is None else _uint(timeout, "timeout"),
    )


def decode_frame(
    data: bytes | str, encoding: WireEncoding
) -> ActionCall | Subscription:
    """Decode a WebSocket frame from the client."""
    if encoding == "bare":
        if isinstance(data, str):
            raise MalformedRequest("bare frames must be binary")
        message = bare.read_to_server(data)
        if isinstance(message, bare.ActionRequest):
            args = _cbor_payload(message.args)
            return ActionCall(message.id, message.name, _args(args))
        return Subscription(message.event_name, message.subscribe)
    frame = _map(_decode_value(data, encoding), "A frame")
    body = _map(frame.get("body"), "body")
    tag = body.get("tag")
    val = _map(body.get("val"), "body.val")
    if tag == "ActionRequest":
        name = val.get("name")
        if not isinstance(name, str):
            raise MalformedRequest("An action request needs a string name")
        return ActionCall(_uint(val.get("id"), "id"), name, _args(val.get("args", [])))
    if tag == "SubscriptionRequest":
        event, subscribe = val.get("eventName"), val.get("subscribe")
        if not isinstance(event, str) or not isinstance(subscribe, bool):
            raise MalformedRequest("A subscription needs eventName and subscribe")
        return Subscription(event, subscribe)
    raise MalformedRequest(
        f"Unknown message tag {str(tag)[:64]!r}", metadata={"tag": str(tag)[:64]}
    )


# -- encoding what the server sends ------------------------------------------------
def _cbor_bigint(value: int) -> bytes:
    """An unsigned integer in 8 bytes: the client decodes it as a bigint."""
    return b"\x1b" + value.to_bytes(8, "big")


def _cbor(value: Any) -> bytes:
    return _cbor_wire(prepare(value, json=False))


def _json_bytes(value: Any) -> bytes:
    return json_dumps(value).encode("utf-8")


def _json_bigint(value: int) -> list[str]:
    return ["$BigInt", str(value)]


def _frame(tag: str, val: dict[str, Any]) -> bytes:
    return _json_bytes({"body": {"tag": tag, "val": val}})


def _cbor_frame(tag: str, val: list[tuple[str, bytes]]) -> bytes:
    return cbor_map(
        [("body", cbor_map([("tag", _cbor_wire(tag)), ("val", cbor_map(val))]))]
    )


def encode_init(actor_id: str, conn_id: str, encoding: WireEncoding) -> bytes:
    """Encode ``Init``."""
    if encoding == "bare":
        return bare.write_to_client(bare.Init(actor_id, conn_id))
    if encoding == "json":
        return _frame("Init", {"actorId": actor_id, "connectionId": conn_id})
    return _cbor_frame(
        "Init",
        [("actorId", _cbor_wire(actor_id)), ("connectionId", _cbor_wire(conn_id))],
    )


def encode_output_value(value: Any, encoding: WireEncoding) -> bytes:
    """Check an action's output against the value domain; encode it for the client.

    JSON as the client's JSON conventions; CBOR for the ``cbor`` and
    ``bare`` encodings (BARE carries the output as CBOR). Raises
    ``InvalidValue`` naming the path (``output.price``).
    """
    check_value(value, "output")
    if encoding == "json":
        return _json_bytes(prepare(value, json=True))
    return _cbor(value)


def encode_action_response(
    action_id: int, output: bytes, encoding: WireEncoding
) -> bytes:
    """Encode ``ActionResponse`` around an output from :func:`encode_output_value`."""
    if encoding == "bare":
        return bare.write_to_client(bare.ActionResponse(action_id, output))
    if encoding == "json":
        return (
            b'{"body":{"tag":"ActionResponse","val":{"id":'
            + _json_bytes(_json_bigint(action_id))
            + b',"output":'
            + output
            + b"}}}"
        )
    return _cbor_frame(
        "ActionResponse", [("id", _cbor_bigint(action_id)), ("output", output)]
    )


def encode_event(name: str, args: list[Any], encoding: WireEncoding) -> bytes:
    """Encode ``Event`` (arguments as a list)."""
    if encoding == "bare":
        return bare.write_to_client(bare.Event(name, _cbor(args)))
    if encoding == "json":
        return _frame("Event", {"name": name, "args": prepare(args, json=True)})
    return _cbor_frame("Event", [("name", _cbor_wire(name)), ("args", _cbor(args))])


def _safe_metadata(metadata: Any, encoding: WireEncoding) -> Any:
    """Return the metadata if the encoding can carry it, else ``None``."""
    try:
        if encoding == "json":
            prepared = prepare(metadata, json=True)
            json_dumps(prepared)
            return prepared
        return _cbor(metadata)
    except (TypeError, ValueError):
        return None


def encode_error(
    error: RivetError, action_id: int | None, encoding: WireEncoding
) -> bytes:
    """Encode ``Error`` for one action (``action_id``) or the connection."""
    metadata = _safe_metadata(error.metadata, encoding)
    if encoding == "bare":
        return bare.write_to_client(
            bare.Error(
                error.group,
                error.code,
                error.message,
                None if error.metadata is None else metadata,
                action_id,
            )
        )
    if encoding == "json":
        return _frame(
            "Error",
            {
                "group": error.group,
                "code": error.code,
                "message": error.message,
                "metadata": metadata,
                "actionId": None if action_id is None else _json_bigint(action_id),
            },
        )
    return _cbor_frame(
        "Error",
        [
            ("group", _cbor_wire(error.group)),
            ("code", _cbor_wire(error.code)),
            ("message", _cbor_wire(error.message)),
            ("metadata", metadata if metadata is not None else _cbor_wire(None)),
            (
                "actionId",
                _cbor_wire(None) if action_id is None else _cbor_bigint(action_id),
            ),
        ],
    )


def encode_action_output(output: bytes, encoding: WireEncoding) -> bytes:
    """Encode an HTTP action's ``{output}`` around an encoded output."""
    if encoding == "bare":
        return bare.write_action_response(output)
    if encoding == "json":
        return b'{"output":' + output + b"}"
    return cbor_map([("output", output)])


def encode_queue_result(
    status: str, response: Any, has_response: bool, encoding: WireEncoding
) -> bytes:
    """Encode an HTTP queue send's ``{status, response?}``."""
    if encoding == "bare":
        return bare.write_queue_send_response(
            status, _cbor(response) if has_response else None
        )
    body: dict[str, Any] = {"status": status}
    if has_response:
        body["response"] = prepare(response, json=encoding == "json")
    if encoding == "json":
        return _json_bytes(body)
    return _cbor_wire(body)


def encode_http_error(error: RivetError, encoding: WireEncoding) -> bytes:
    """Encode an HTTP error body ``{group, code, message, metadata?}``."""
    metadata = _safe_metadata(error.metadata, encoding)
    if encoding == "bare":
        return bare.write_http_error(
            error.group,
            error.code,
            error.message,
            None if error.metadata is None else metadata,
        )
    body: dict[str, Any] = {
        "group": error.group,
        "code": error.code,
        "message": error.message,
    }
    if encoding == "json":
        if metadata is not None:
            body["metadata"] = metadata
        return _json_bytes(body)
    encoded = [(key, _cbor_wire(value)) for key, value in body.items()]
    if metadata is not None:
        encoded.append(("metadata", metadata))
    return cbor_map(encoded)


def json_error_body(group: str, code: str, message: str) -> bytes:
    """A minimal JSON error, for paths that cannot fail further."""
    return _json.dumps({"group": group, "code": code, "message": message}).encode()
