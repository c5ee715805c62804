"""What the model modules share: clock-following timestamps, the KV row."""

from __future__ import annotations

from typing import Any, ClassVar

from django.db import models

from .. import clock

__all__ = ["KVRow", "now", "prefix_end"]


def now() -> Any:
    """Return the project clock's now (record timestamps follow frozen time)."""
    return clock.now_datetime()


class KVRow(models.Model):
    """One key of a KV namespace: key bytes to value bytes, unique per owner.

    The rows of :class:`~.actors.ActorKV` (an actor's ``ctx.kv``) and
    :class:`~.workflows.WorkflowKV` (a workflow's history). A concrete
    subclass adds the foreign key to the namespace's owner, named by
    :attr:`owner_field`, and the named unique constraint on
    ``(owner, key)``, which is also the index of ordered prefix and range
    scans.
    """

    # The name of the subclass's foreign key to the namespace's owner.
    owner_field: ClassVar[str]

    id = models.BigAutoField(primary_key=True)
    key = models.BinaryField()
    value = models.BinaryField()

    class Meta:
        abstract = True

    def __str__(self) -> str:
        owner_id = getattr(self, f"{self.owner_field}_id")
        return f"{owner_id}:{bytes(self.key)!r}"


def prefix_end(prefix: bytes) -> bytes | None:
    """Return the smallest key greater than every key starting with ``prefix``.

    The upper bound of a prefix scan over :class:`KVRow` keys; None when
    no key is greater (``prefix`` is empty or all ``0xFF``).
    """
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])
