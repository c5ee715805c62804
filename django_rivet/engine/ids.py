"""Entry ids: what ``uuid.uuid4().hex`` gives, made for less."""

from __future__ import annotations

import os
import threading

__all__ = ["new_entry_id"]

# A version 4 UUID's variant and version bits (RFC 4122), as uuid.UUID sets them.
_UUID4_CLEAR = ~((0xC000 << 48) | (0xF000 << 64))
_UUID4_SET = (0x8000 << 48) | (4 << 76)
# Random bytes for this many ids are read at once (new_entry_id).
_IDS_PER_READ = 256


class _RandomBytes(threading.local):
    """Each thread's random bytes not yet made into entry ids."""

    def __init__(self) -> None:
        self.drop()

    def drop(self) -> None:
        """Forget the bytes read (the next id reads new ones)."""
        self.data = b""
        self.at = 0


_random = _RandomBytes()
# A forked child must not hand out the ids its parent's bytes will give.
os.register_at_fork(after_in_child=_random.drop)


def new_entry_id() -> str:
    """Return a new entry's id: what ``uuid.uuid4().hex`` gives, for less.

    The same 32 hex digits of a version 4 UUID made of 16 bytes from
    ``os.urandom``, without building a ``UUID`` (its checks and conversions
    cost more than the rest of creating a step's entry), and the bytes
    read 256 ids at a time: each read is a system call that lets go of
    the GIL, so another busy thread (a live wake's sender) could keep the
    run waiting for it.
    """
    random = _random
    at = random.at
    if at >= len(random.data):
        random.data, at = os.urandom(16 * _IDS_PER_READ), 0
    random.at = at + 16
    value = int.from_bytes(random.data[at : at + 16], "big")
    return f"{value & _UUID4_CLEAR | _UUID4_SET:032x}"
