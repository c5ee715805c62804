"""The actor runtime; this package's top is the server-side client.

``from django_rivet import actors`` gives :func:`get`, :func:`get_or_create`,
:func:`create`, :func:`get_by_id`, :func:`filter`, :func:`count` and their
async twins (see
:mod:`.client`). The package owns what actors are and how they run:

- :mod:`.definition` and :mod:`.registry`: ``Actor``, ``@action``,
  ``@queue_handler`` and the name registry;
- :mod:`.spine`: ``invoke``, the one invocation path; :mod:`.invocation`
  (the run), :mod:`.operations` (shared operations), :mod:`.cache` (the
  process cache), :mod:`.errors` (wire mapping);
- :mod:`.context` (``ctx``, ``Conn``), :mod:`.kv` (``ctx.kv``), :mod:`.rows`
  (identity and the row statements), :mod:`.services` and :mod:`.handles`
  (the interfaces of ``ctx`` members other layers provide), :mod:`.calls`
  (``Origin``, what ``on_auth`` is asked).

Inside, the modules import one way, from the calls down to the definitions:
client, spine, operations, invocation, cache and registry, definition,
context, services, handles and calls. Where a lower module must reach a higher one
it states what it needs as a Protocol (``context.Running``,
``handles.ActorHandleAPI``).

It may import the event log, dispatch, storage and the foundation; never
the scheduler, the workflow runtime or the transport, which build on it.

The client is imported on first use (PEP 562): actor modules import
``django_rivet.actors.definition`` (through ``from django_rivet import
Actor``) before Django's models are ready, and that must stay cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_from

if TYPE_CHECKING:
    from .client import (
        ActorHandle,
        acount,
        acreate,
        afilter,
        aget,
        aget_by_id,
        aget_or_create,
        count,
        create,
        filter,
        get,
        get_by_id,
        get_or_create,
    )

__all__ = [
    "ActorHandle",
    "acount",
    "acreate",
    "afilter",
    "aget",
    "aget_by_id",
    "aget_or_create",
    "count",
    "create",
    "filter",
    "get",
    "get_by_id",
    "get_or_create",
]

__getattr__ = lazy_from("django_rivet.actors.client", __all__, globals())
