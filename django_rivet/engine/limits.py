"""How large what the engine stores may be, and the one check it all goes through.

One KV write (key plus value) is at most :data:`MAX_KV_BATCH_PAYLOAD_BYTES`,
the byte limit of a whole batch (RivetKit's; docs/storage-format.md,
"Sizes"). Every record the engine persists -- a history entry with the step
output, loop state, join or race results or received messages it carries, a
workflow field such as the input or the output -- is encoded and measured by
:func:`check_record`
at the moment the engine records it, before anything is written. Over the
limit, :class:`~.errors.StorageLimitError` (code ``workflow/storage_limit``)
names what was too big and the limit, and the record is left as it was, so
the failure itself can still be stored: the workflow fails, it does not
retry.

A message body is checked when it is sent (:func:`encode_message_body`),
against a limit leaving room for the message entry that will record it.
"""

from __future__ import annotations

from typing import Any

from . import cbor
from .errors import StorageLimitError

__all__ = [
    "MAX_CONCURRENT_DELETES",
    "MAX_KV_BATCH_ENTRIES",
    "MAX_KV_BATCH_PAYLOAD_BYTES",
    "MAX_MESSAGE_BODY_BYTES",
    "check_record",
    "encode_message_body",
]

MAX_KV_BATCH_ENTRIES = 128
MAX_KV_BATCH_PAYLOAD_BYTES = 976 * 1024
MAX_CONCURRENT_DELETES = 64
# A body this size still fits one message entry: the envelope, the entry's
# own fields and the message id, name and time take far less than 16 KiB.
MAX_MESSAGE_BODY_BYTES = MAX_KV_BATCH_PAYLOAD_BYTES - 16 * 1024


def check_record(key: bytes, value: bytes, what: str) -> None:
    """Raise :class:`StorageLimitError` if ``key`` + ``value`` is over one write."""
    size = len(key) + len(value)
    if size > MAX_KV_BATCH_PAYLOAD_BYTES:
        raise StorageLimitError(
            f"{what} is too large to store: {size} bytes encoded, over the "
            f"{MAX_KV_BATCH_PAYLOAD_BYTES} byte limit of one workflow record"
        )


def encode_message_body(body: Any) -> bytes:
    """Encode a message body for the inbox, refusing what no entry could record.

    Raises ``TypeError`` for values that cannot be stored and
    :class:`StorageLimitError` for bodies over ``MAX_MESSAGE_BODY_BYTES``.
    """
    cbor.check_storable(body, "Message body")
    data = cbor.dumps(body)
    if len(data) > MAX_MESSAGE_BODY_BYTES:
        raise StorageLimitError(
            f"Message body is too large to send: {len(data)} bytes encoded, over "
            f"the {MAX_MESSAGE_BODY_BYTES} byte limit of a workflow message"
        )
    return data
