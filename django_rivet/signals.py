"""Signals of django-rivet, for alerting and metrics.

``work_failed`` is sent once when background work fails for good: a
scheduled action, a cron firing or a queue message whose retries are spent
(or whose handler raised a ``UserError``, which is never retried)::

    from django.dispatch import receiver
    from django_rivet.signals import work_failed

    @receiver(work_failed)
    def page_someone(sender, kind, actor_id, action, id, error, **kwargs):
        ...

``sender`` is the actor class (``None`` if the actor's class is no longer
registered); ``kind`` is ``"schedule"``, ``"cron"`` or ``"message"``;
``action`` is the action (schedules, cron) or the queue name (messages);
``id`` the schedule id (str), cron job id (int) or message id (int);
``error`` the exception of the last attempt. Receivers run in the process
that ran the last attempt, after its failure was recorded; an exception in a
receiver is logged, never raised into the runtime.

``socket_opened`` is the WebSocket counterpart of Django's
``request_started``: sent (``sender`` the consumer class) when a WebSocket
to an actor is opened, before its handshake is read. django-rivet starts
the embedded worker on it, so a page that only uses WebSockets runs its
schedules and workflows after every reload of the development server.

``workflow_finished`` is sent once each time a workflow ends::

    from django_rivet.signals import workflow_finished

    @receiver(workflow_finished)
    def record(sender, workflow_id, name, status, error, **kwargs):
        ...

``sender`` is the workflow's definition (``None`` if its name is no longer
registered); ``status`` is ``"completed"``, ``"failed"`` or ``"cancelled"``;
``error`` None for a completed workflow, else the stored description of
the failure or the cancel (``{"name", "message", "metadata"...}``; a
cancel's ``metadata["reason"]`` is ``cancelled``, ``parent_cancelled`` or
``timeout``). It is sent after the end was recorded and committed, in the
process that recorded it: the worker that ran the workflow to its end, or
the caller of ``cancel()`` (a workflow is cancelled at once; its rollbacks
run later and send nothing more). A receiver that raises is logged, never
raised into the runtime.
"""

from __future__ import annotations

from django.dispatch import Signal

__all__ = ["socket_opened", "work_failed", "workflow_finished"]

work_failed = Signal()
socket_opened = Signal()
workflow_finished = Signal()
