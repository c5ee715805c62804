"""Storage of actors: identity and state, KV, connections, the event log."""

from __future__ import annotations

import uuid
from typing import Any

from django.db import models

from ..encoding import cbor_loads
from . import base


class Actor(models.Model):
    """One actor instance, identified by ``(name, key)`` and by ``id``."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(max_length=64)
    # Canonical form of the key parts (compact JSON list), unique per name.
    key = models.TextField()
    key_parts = models.JSONField(default=list)
    state = models.BinaryField(default=b"")
    # Bumped on every state write; lets a process reuse its decoded state.
    version = models.PositiveBigIntegerField(default=0)
    # The actor class's state_version when the state was written (typed,
    # versioned state: docs/types.md); older states migrate when loaded.
    state_version = models.PositiveIntegerField(default=1)
    # Last event sequence number handed out (the replayable event log).
    event_seq = models.PositiveBigIntegerField(default=0)
    # Bytes of KV keys and values, for the per-actor KV quota.
    kv_size = models.PositiveBigIntegerField(default=0)
    created_at = models.DateTimeField(default=base.now)
    updated_at = models.DateTimeField(default=base.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["name", "key"], name="rivet_actor_unique_name_key"
            ),
        ]
        indexes = [
            # actors.filter(), newest first: by class, and across classes.
            models.Index(fields=["name", "-created_at"], name="rivet_actor_name_new"),
            models.Index(fields=["-created_at"], name="rivet_actor_newest"),
            # actors.filter(key_prefix=...): key LIKE '<parts>,%' within a
            # class. On PostgreSQL the pattern operator classes serve LIKE
            # whatever the database's collation; elsewhere they are ignored
            # (the unique (name, key) index serves the name).
            models.Index(
                fields=["name", "key"],
                name="rivet_actor_key_prefix",
                opclasses=["varchar_pattern_ops", "text_pattern_ops"],
            ),
        ]
        ordering = ["name", "key"]

    def __str__(self) -> str:
        return f"{self.name}{self.key}"

    @property
    def key_tuple(self) -> tuple[str, ...]:
        """Return the key parts as a tuple of str."""
        return tuple(self.key_parts)

    def decoded_state(self) -> Any:
        """Return the decoded state (``None`` before creation finished)."""
        data = bytes(self.state)
        return cbor_loads(data) if data else None


class ActorKV(base.KVRow):
    """One key of an actor's KV store."""

    owner_field = "actor"
    actor = models.ForeignKey(
        Actor, on_delete=models.CASCADE, related_name="kv_entries", db_index=False
    )

    class Meta:
        verbose_name = "actor KV entry"
        verbose_name_plural = "actor KV entries"
        constraints = [
            # Also the index that serves ordered prefix and range scans.
            models.UniqueConstraint(
                fields=["actor", "key"], name="rivet_actorkv_unique_key"
            ),
        ]


class Connection(models.Model):
    """A live WebSocket connection to an actor, in whichever process holds it."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    actor = models.ForeignKey(
        Actor, on_delete=models.CASCADE, related_name="connections"
    )
    # Channel-layer name of the consumer holding the socket.
    channel_name = models.CharField(max_length=255)
    # Identifies the process, for the liveness sweep of crashed processes.
    server_id = models.CharField(max_length=128, db_index=True)
    params = models.BinaryField(default=b"")
    state = models.BinaryField(default=b"")
    subscriptions = models.JSONField(default=list)
    encoding = models.CharField(max_length=8, default="json")
    created_at = models.DateTimeField(default=base.now)
    last_seen_at = models.DateTimeField(default=base.now, db_index=True)

    class Meta:
        ordering = ["created_at"]

    def __str__(self) -> str:
        return f"connection {self.id} to {self.actor_id}"


class ActorEvent(models.Model):
    """One broadcast, kept in the bounded per-actor replay log."""

    id = models.BigAutoField(primary_key=True)
    actor = models.ForeignKey(
        Actor, on_delete=models.CASCADE, related_name="events", db_index=False
    )
    seq = models.PositiveBigIntegerField()
    name = models.CharField(max_length=255)
    args = models.BinaryField()
    created_at = models.DateTimeField(default=base.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["actor", "seq"], name="rivet_actorevent_unique_seq"
            ),
        ]
        ordering = ["actor", "seq"]

    def __str__(self) -> str:
        return f"event {self.seq} {self.name} of {self.actor_id}"
