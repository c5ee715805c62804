"""Durable workflows on Django; this package's top is the server-side client.

``from django_rivet import workflows`` gives :func:`start`, :func:`get`,
:func:`filter`, :func:`count`, their async twins and
:class:`WorkflowHandle` (see :mod:`.client`). The package is everything
Django about workflows; the engine itself (:mod:`django_rivet.workflow`)
stays free of Django:

- :mod:`.client`: the facade (handles, start, search);
- :mod:`.registry`: workflow name -> definition, discovered from apps;
- :mod:`.driver`: :class:`~.driver.DjangoDriver`, the engine driver on the
  ``WorkflowKV`` / ``WorkflowMessage`` tables, fenced by the run's lease;
- :mod:`.leases`: claim, renew (heartbeat) and release a ``Workflow`` row;
- :mod:`.execution`: run a workflow until it pauses (the Celery task, the
  in-process worker, ``run_until_idle``);
- :mod:`.wakeups`: dispatch for due workflows and their sweep step;
- :mod:`.queues`: workflow queues (admission with flow control);
- :mod:`.operations`, :mod:`.control`: cancel, recover, replay, resume,
  send, wake (handles, admin); :mod:`.children` (parents and children),
  :mod:`.published` (events and replies), :mod:`.queries` (search).

It may import dispatch, observability, storage and the foundation; never
the actor runtime (``ctx.workflows`` reaches it through the interface in
:mod:`django_rivet.actors.services`), the scheduler, upkeep or the
transport, which build on it.

The client is imported on first use (PEP 562), as the actors' is: the
runtime's modules (the registry, which the checks import) stay cheap to
import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .client import (
        MAX_ID_LENGTH,
        WorkflowHandle,
        acount,
        afilter,
        aget,
        astart,
        count,
        filter,
        get,
        start,
    )

__all__ = [
    "MAX_ID_LENGTH",
    "WorkflowHandle",
    "acount",
    "afilter",
    "aget",
    "astart",
    "count",
    "filter",
    "get",
    "start",
]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(
            f"module 'django_rivet.workflows' has no attribute {name!r}"
        )
    from . import client

    value = getattr(client, name)
    globals()[name] = value
    return value
