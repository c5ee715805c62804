"""The event log and its delivery: write, read, truncate, publish.

Every broadcast gets a per-actor increasing ``seq`` and a row in
``ActorEvent``, written by :func:`append` in the invoking transaction; the
log keeps the last ``EVENT_LOG_SIZE`` events per actor, so a client that
reconnects with ``?since=<seq>`` is replayed what it missed (:func:`read`,
:func:`window`). The log is the source of truth for delivery: after commit
the runtime hands the new events to :func:`publish`, which tells this
process's listeners at once (:func:`add_listener`: the transport's event
feeds) and sends one channel-layer message per invocation to the actor's
group, which every web process's feed has joined. A message the layer
drops is not lost: feeds notice the gap (or, for the last events, the head
seq read by their periodic check) and read the events from the log.
Connection-only messages go through :func:`send_to_channel`; workflow
streams announce their commits to :func:`workflow_group` with
:func:`send_to_group`. Messages carry
CBOR-encoded arguments so any CBOR-serializable value survives
channels_redis' msgpack transport.

A channel layer that fails (misconfigured, or Redis down) is logged once at
ERROR when the failures start and once when they stop, never per message.

This module sits below the actor runtime and the transport, which both use
it; it imports only the storage and foundation layers.
"""

from __future__ import annotations

from .layer import (
    DISCONNECT_MESSAGE,
    EVENTS_MESSAGE,
    SEND_MESSAGE,
    LayerHealth,
    actor_group,
    add_listener,
    channel_receive,
    events_message,
    get_layer,
    layer_health,
    publish,
    remove_listener,
    send_to_channel,
    send_to_group,
    serving_loop,
    workflow_group,
)
from .log import (
    READ_BATCH,
    LoggedEvent,
    append,
    encode_args,
    heads,
    log_statements,
    oldest,
    read,
    read_bounded,
    window,
)

__all__ = [
    "DISCONNECT_MESSAGE",
    "EVENTS_MESSAGE",
    "READ_BATCH",
    "SEND_MESSAGE",
    "LayerHealth",
    "LoggedEvent",
    "actor_group",
    "add_listener",
    "append",
    "channel_receive",
    "encode_args",
    "events_message",
    "get_layer",
    "heads",
    "log_statements",
    "layer_health",
    "oldest",
    "publish",
    "read",
    "read_bounded",
    "remove_listener",
    "send_to_channel",
    "send_to_group",
    "serving_loop",
    "window",
    "workflow_group",
]
