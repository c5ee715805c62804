"""The actor KV store (docs/actors.md, "KV") over the ``ActorKV`` table.

Every limit is checked before anything is written. Writes join the caller's
transaction (an invocation's, when used as ``ctx.kv``), so they commit or roll
back with it; outside one, each call is its own transaction.

Keys are ``bytes`` or ``str`` (UTF-8) and sort bytewise. Values go through a
codec: ``"cbor"`` (default; any CBOR-serializable value, bytes included) or
``"raw"`` (bytes stored as they are).
"""

from __future__ import annotations

import builtins
import uuid
from collections.abc import Iterable, Sequence
from typing import Any, Literal

from asgiref.sync import sync_to_async
from django.db.models import F, Sum
from django.db.models.functions import Length

from ..encoding import cbor_dumps, cbor_loads
from ..exceptions import (
    ActorReadOnly,
    KVKeyTooLarge,
    KVPayloadTooLarge,
    KVTooManyKeys,
    KVValueTooLarge,
    RivetError,
)
from ..models import Actor, ActorKV, db
from ..models.base import prefix_end

__all__ = [
    "MAX_ACTOR_KV_BYTES",
    "MAX_KEYS_PER_CALL",
    "MAX_KEY_BYTES",
    "MAX_LIST_LIMIT",
    "MAX_PUT_MANY_BYTES",
    "MAX_VALUE_BYTES",
    "ActorKVStore",
]

MAX_KEY_BYTES = 2048
MAX_VALUE_BYTES = 128 * 1024
MAX_KEYS_PER_CALL = 128
MAX_PUT_MANY_BYTES = 976 * 1024
MAX_ACTOR_KV_BYTES = 10 * 1024**3
MAX_LIST_LIMIT = 16384

Key = bytes | str
Codec = Literal["cbor", "raw"]


def _key_bytes(key: Key) -> bytes:
    if isinstance(key, str):
        data = key.encode("utf-8")
    elif isinstance(key, bytes | bytearray | memoryview):
        data = bytes(key)
    else:
        raise TypeError(f"KV keys are bytes or str, not {type(key).__name__}")
    return _within(data, MAX_KEY_BYTES, KVKeyTooLarge, "key")


def _encode_value(value: Any, codec: Codec) -> bytes:
    if codec == "raw":
        if not isinstance(value, bytes | bytearray | memoryview):
            raise TypeError("The raw codec stores bytes only")
        data = bytes(value)
    elif codec == "cbor":
        data = cbor_dumps(value, "kv value")
    else:
        raise ValueError(f"Unknown KV codec {codec!r}")
    return _within(data, MAX_VALUE_BYTES, KVValueTooLarge, "value")


def _within(data: bytes, limit: int, error: type[RivetError], what: str) -> bytes:
    """Return ``data``, or raise ``error`` if it is over ``limit`` bytes."""
    if len(data) > limit:
        raise error(
            f"KV {what} is {len(data)} bytes; the limit is {limit}",
            metadata={"size": len(data), "limit": limit},
        )
    return data


def _decode_value(data: Any, codec: Codec) -> Any:
    raw = bytes(data)
    return raw if codec == "raw" else cbor_loads(raw)


def _check_count(keys: Sequence[Any]) -> None:
    if len(keys) > MAX_KEYS_PER_CALL:
        raise KVTooManyKeys(
            f"{len(keys)} keys in one call; the limit is {MAX_KEYS_PER_CALL}",
            metadata={"count": len(keys), "limit": MAX_KEYS_PER_CALL},
        )


class ActorKVStore:
    """KV access for one actor; ``ctx.kv`` is one of these."""

    def __init__(self, actor_id: uuid.UUID | str, *, readonly: bool = False) -> None:
        self.actor_id = (
            actor_id if isinstance(actor_id, uuid.UUID) else uuid.UUID(actor_id)
        )
        # A read-only action's ctx.kv: reads work, writes are refused.
        self.readonly = readonly

    def _writable(self) -> None:
        if self.readonly:
            raise ActorReadOnly.refusing("write KV")

    def _rows(self) -> Any:
        return ActorKV.objects.filter(actor_id=self.actor_id)

    # -- reads --------------------------------------------------------------
    def get(self, key: Key, *, codec: Codec = "cbor") -> Any:
        """Return the value of ``key``, or ``None`` when missing."""
        data = _key_bytes(key)
        row = self._rows().filter(key=data).values_list("value", flat=True).first()
        return None if row is None else _decode_value(row, codec)

    def get_many(
        self, keys: Sequence[Key], *, codec: Codec = "cbor"
    ) -> builtins.list[Any]:
        """Return the values of ``keys`` in order (``None`` where missing)."""
        _check_count(keys)
        encoded = [_key_bytes(key) for key in keys]
        found = {
            bytes(k): v
            for k, v in self._rows().filter(key__in=encoded).values_list("key", "value")
        }
        return [_decode_value(found[k], codec) if k in found else None for k in encoded]

    def list(
        self,
        prefix: Key | None = None,
        start: Key | None = None,
        end: Key | None = None,
        reverse: bool = False,
        limit: int = MAX_LIST_LIMIT,
        *,
        codec: Codec = "cbor",
    ) -> builtins.list[tuple[Key, Any]]:
        """Return ``[(key, value)]`` in bytewise key order.

        With ``prefix``, ``start``/``end`` are relative to the prefix and the
        prefix is stripped from the returned keys. Keys come back as ``str``
        when the query was made with ``str`` arguments, else as ``bytes``.
        """
        if limit < 0 or limit > MAX_LIST_LIMIT:
            raise ValueError(f"limit must be between 0 and {MAX_LIST_LIMIT}")
        as_text = any(isinstance(arg, str) for arg in (prefix, start, end))
        head = _key_bytes(prefix) if prefix is not None else b""
        rows = self._rows()
        low = head + _key_bytes(start) if start is not None else head
        if low:
            rows = rows.filter(key__gte=low)
        if end is not None:
            rows = rows.filter(key__lt=head + _key_bytes(end))
        elif head:
            upper = prefix_end(head)
            if upper is not None:
                rows = rows.filter(key__lt=upper)
        rows = rows.order_by("-key" if reverse else "key")[:limit]
        result: builtins.list[tuple[Key, Any]] = []
        for raw_key, value in rows.values_list("key", "value"):
            short = bytes(raw_key)[len(head) :]
            key: Key = short
            if as_text:
                try:
                    key = short.decode("utf-8")
                except UnicodeDecodeError:
                    key = short
            result.append((key, _decode_value(value, codec)))
        return result

    # -- writes -------------------------------------------------------------
    def put(self, key: Key, value: Any, *, codec: Codec = "cbor") -> None:
        """Store ``value`` under ``key`` (upsert)."""
        self._put([(_key_bytes(key), _encode_value(value, codec))])

    def put_many(
        self,
        items: Iterable[tuple[Key, Any]] | dict[Key, Any],
        *,
        codec: Codec = "cbor",
    ) -> None:
        """Store several items in one transaction, all or nothing."""
        pairs = list(items.items()) if isinstance(items, dict) else list(items)
        _check_count(pairs)
        encoded: dict[bytes, bytes] = {}
        for key, value in pairs:
            encoded[_key_bytes(key)] = _encode_value(value, codec)
        total = sum(len(k) + len(v) for k, v in encoded.items())
        if total > MAX_PUT_MANY_BYTES:
            raise KVPayloadTooLarge(
                f"put_many payload is {total} bytes; the limit is {MAX_PUT_MANY_BYTES}",
                metadata={"size": total, "limit": MAX_PUT_MANY_BYTES},
            )
        self._put(list(encoded.items()))

    def _put(self, pairs: builtins.list[tuple[bytes, bytes]]) -> None:
        self._writable()
        if not pairs:
            return
        with db.atomic(savepoint=False):
            old_sizes = {
                bytes(k): size
                for k, size in self._rows()
                .filter(key__in=[k for k, _ in pairs])
                .annotate(size=Length("key") + Length("value"))
                .values_list("key", "size")
            }
            delta = sum(len(k) + len(v) - old_sizes.get(k, 0) for k, v in pairs)
            self._account(delta)
            ActorKV.objects.bulk_create(
                [ActorKV(actor_id=self.actor_id, key=k, value=v) for k, v in pairs],
                update_conflicts=True,
                unique_fields=["actor", "key"],
                update_fields=["value"],
            )

    def _account(self, delta: int) -> None:
        """Apply a KV size change to the actor row, enforcing the quota."""
        if delta == 0:
            return
        actors = Actor.objects.filter(pk=self.actor_id)
        if delta > 0:
            actors = actors.filter(kv_size__lte=MAX_ACTOR_KV_BYTES - delta)
        if not actors.update(kv_size=F("kv_size") + delta) and delta > 0:
            raise KVPayloadTooLarge(
                f"The actor's KV would exceed {MAX_ACTOR_KV_BYTES} bytes",
                metadata={"limit": MAX_ACTOR_KV_BYTES},
            )

    def _delete_rows(self, rows: Any) -> None:
        self._writable()
        with db.atomic(savepoint=False):
            size = rows.aggregate(size=Sum(Length("key") + Length("value")))["size"]
            if size:
                self._account(-size)
                rows.delete()

    def delete(self, key: Key) -> None:
        """Delete ``key`` (missing keys are fine)."""
        self._delete_rows(self._rows().filter(key=_key_bytes(key)))

    def delete_many(self, keys: Sequence[Key]) -> None:
        """Delete several keys in one transaction."""
        _check_count(keys)
        encoded = [_key_bytes(key) for key in keys]
        if encoded:
            self._delete_rows(self._rows().filter(key__in=encoded))

    def delete_prefix(self, prefix: Key) -> None:
        """Delete every key starting with ``prefix``."""
        head = _key_bytes(prefix)
        rows = self._rows().filter(key__gte=head) if head else self._rows()
        upper = prefix_end(head) if head else None
        if upper is not None:
            rows = rows.filter(key__lt=upper)
        self._delete_rows(rows)

    def delete_range(self, start: Key, end: Key) -> None:
        """Delete the keys in the half-open range ``[start, end)``."""
        self._delete_rows(
            self._rows().filter(key__gte=_key_bytes(start), key__lt=_key_bytes(end))
        )

    # -- async twins ----------------------------------------------------------
    # thread_sensitive: inside an invocation they hop back to the invoking
    # thread, so they share its connection and transaction.
    async def aget(self, key: Key, *, codec: Codec = "cbor") -> Any:
        """Async :meth:`get`."""
        return await sync_to_async(self.get)(key, codec=codec)

    async def aget_many(
        self, keys: Sequence[Key], *, codec: Codec = "cbor"
    ) -> builtins.list[Any]:
        """Async :meth:`get_many`."""
        return await sync_to_async(self.get_many)(keys, codec=codec)

    async def alist(self, *args: Any, **kwargs: Any) -> builtins.list[tuple[Key, Any]]:
        """Async :meth:`list`."""
        return await sync_to_async(self.list)(*args, **kwargs)

    async def aput(self, key: Key, value: Any, *, codec: Codec = "cbor") -> None:
        """Async :meth:`put`."""
        await sync_to_async(self.put)(key, value, codec=codec)

    async def aput_many(self, items: Any, *, codec: Codec = "cbor") -> None:
        """Async :meth:`put_many`."""
        await sync_to_async(self.put_many)(items, codec=codec)

    async def adelete(self, key: Key) -> None:
        """Async :meth:`delete`."""
        await sync_to_async(self.delete)(key)

    async def adelete_many(self, keys: Sequence[Key]) -> None:
        """Async :meth:`delete_many`."""
        await sync_to_async(self.delete_many)(keys)

    async def adelete_prefix(self, prefix: Key) -> None:
        """Async :meth:`delete_prefix`."""
        await sync_to_async(self.delete_prefix)(prefix)

    async def adelete_range(self, start: Key, end: Key) -> None:
        """Async :meth:`delete_range`."""
        await sync_to_async(self.delete_range)(start, end)
