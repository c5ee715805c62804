"""``WorkflowHandle``: a reference to one workflow instance and what it can do.

``workflows.start``/``get``/``filter`` (:mod:`.client`) return handles;
each method reads or drives the workflow through the operations modules
and has an ``a``-prefixed async twin.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from asgiref.sync import sync_to_async

from ..engine import HistoryEntry, Message, ReplayDivergence
from ..engine.ops import WorkflowSnapshot
from ..models import db
from . import attributes as workflow_attributes
from . import control, forks, operations, published, results, sends
from .stream_reading import StreamReading

__all__ = ["WorkflowHandle"]


class WorkflowHandle(StreamReading):
    """A reference to one workflow instance."""

    def __init__(self, workflow_id: str, name: str) -> None:
        self.workflow_id = workflow_id
        self.name = name

    def __repr__(self) -> str:
        return f"<WorkflowHandle {self.name} {self.workflow_id}>"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, WorkflowHandle) and other.workflow_id == self.workflow_id
        )

    def __hash__(self) -> int:
        return hash(self.workflow_id)

    # Status and result -----------------------------------------------------------

    @property
    def status(self) -> str:
        """Return the current status (read from the database)."""
        return operations.status(self.workflow_id)

    async def astatus(self) -> str:
        """Async :attr:`status`."""
        return await sync_to_async(operations.status)(self.workflow_id)

    def result(self, timeout: float | None = None) -> Any:
        """Wait for the workflow to finish; return its output or raise its failure.

        A failed workflow raises its error (the original workflow exception
        class when it is one of django-rivet's, else
        :class:`~django_rivet.engine.RecordedError` carrying the original
        name); a cancelled one raises ``WorkflowCancelled`` (code
        ``cancelled``), or ``WorkflowTimeout`` (``workflow/timeout``) when its
        deadline passed. Raises ``TimeoutError`` after ``timeout`` seconds
        (real time: this waits for workers); its message says when the
        workflow never started, which means no worker runs. Something must
        run the workflow meanwhile: a Celery worker, ``rivet_worker``, the
        embedded worker, or in tests :func:`django_rivet.testing.run_until_idle`.
        Inside an actor invocation it does not wait: a workflow that has not
        finished raises ``WorkflowCannotWait`` (``workflow/cannot_wait``).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = results.POLL_FIRST
        while True:
            finished = results.finished(self.workflow_id, self.name)
            if finished is not None:
                return results.outcome(self.workflow_id, *finished)
            if db.in_invocation():
                raise published.refuse_wait("handle.result()", self.workflow_id)
            pause = results.pause(deadline, delay)
            if pause is None:
                raise results.timed_out(self.workflow_id, timeout)
            time.sleep(pause)
            delay = min(delay * 2, results.POLL_MAX)

    async def aresult(self, timeout: float | None = None) -> Any:
        """Async :meth:`result`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = results.POLL_FIRST
        while True:
            finished = await sync_to_async(results.finished)(
                self.workflow_id, self.name
            )
            if finished is not None:
                return results.outcome(self.workflow_id, *finished)
            if db.in_invocation():
                raise published.refuse_wait("handle.aresult()", self.workflow_id)
            pause = results.pause(deadline, delay)
            if pause is None:
                raise await sync_to_async(results.timed_out)(self.workflow_id, timeout)
            await asyncio.sleep(pause)
            delay = min(delay * 2, results.POLL_MAX)

    def snapshot(self) -> WorkflowSnapshot:
        """Return the stored ``state``, ``output``, ``error`` and ``input``."""
        return operations.snapshot(self.workflow_id)

    async def asnapshot(self) -> WorkflowSnapshot:
        """Async :meth:`snapshot`."""
        return await sync_to_async(self.snapshot)()

    # Messages and control ---------------------------------------------------------

    def send(
        self, name: str, body: Any = None, idempotency_key: str | None = None
    ) -> str:
        """Send a message to the workflow (``ctx.messages``); return its id.

        The message is stored durably and the workflow woken (after commit)
        if it waits for that name. With ``idempotency_key`` it is sent at
        most once per key: a key used before returns the first message's
        id and sends nothing. A body that cannot be stored raises
        ``TypeError``; one over ``MAX_MESSAGE_BODY_BYTES`` encoded raises
        ``StorageLimitError`` (``workflow/storage_limit``) and sends nothing.
        """
        return sends.send(self.workflow_id, name, body, idempotency_key)

    async def asend(
        self, name: str, body: Any = None, idempotency_key: str | None = None
    ) -> str:
        """Async :meth:`send`."""
        return await sync_to_async(self.send)(name, body, idempotency_key)

    def wake(self) -> bool:
        """Run the workflow now (a sleep not yet due is slept again)."""
        return operations.wake(self.workflow_id)

    async def awake(self) -> bool:
        """Async :meth:`wake`."""
        return await sync_to_async(self.wake)()

    def cancel(self) -> bool:
        """Cancel the workflow for good; return False if it had finished.

        Its status is ``cancelled`` as soon as this returns, and no further
        step function or child starts; the step running now (if any)
        finishes. The rollback handlers of its completed steps run here when
        no worker holds it, else on that worker.
        """
        return operations.cancel(self.workflow_id)

    async def acancel(self) -> bool:
        """Async :meth:`cancel`."""
        return await sync_to_async(self.cancel)()

    def recover(self) -> bool:
        """Let a failed workflow run again from its failed steps.

        Returns False (and changes nothing) unless the workflow failed.
        """
        return operations.recover(self.workflow_id)

    async def arecover(self) -> bool:
        """Async :meth:`recover`."""
        return await sync_to_async(self.recover)()

    def resume(self) -> bool:
        """Let a cancelled workflow go on from where it stopped; start a queued one.

        A queued workflow starts at once, outside its queue's limits. Returns
        False (and changes nothing) unless it is queued, or cancelled with no
        rollback handler run for it. A resumed cancelled workflow's deadline
        is dropped.
        """
        return control.resume(self.workflow_id)

    async def aresume(self) -> bool:
        """Async :meth:`resume`."""
        return await sync_to_async(self.resume)()

    def fork(
        self,
        from_step: str,
        id: str | None = None,
        queue: str | None = None,
        version: str | None = None,
    ) -> WorkflowHandle:
        """Start a new workflow from this one's history up to a step.

        ``from_step`` is the step's location as :meth:`history` shows it
        (``charge``, ``batch/~3/fetch``): the fork replays what was recorded
        before it and runs that step and the rest with the code deployed
        now. This workflow is not touched. ``version``: the application
        version the fork runs on (default: ``RIVET["APP_VERSION"]``).
        Returns the fork's handle.
        """
        fork_id, name = forks.fork(
            self.workflow_id, from_step, id, queue=queue, version=version
        )
        return WorkflowHandle(fork_id, name)

    async def afork(
        self,
        from_step: str,
        id: str | None = None,
        queue: str | None = None,
        version: str | None = None,
    ) -> WorkflowHandle:
        """Async :meth:`fork`."""
        return await sync_to_async(self.fork)(from_step, id, queue, version)

    def delete(self, children: bool = False) -> bool:
        """Delete the finished workflow and every row it owns; tell if it did.

        ``children``: its descendants too. One that has not finished raises
        ``WorkflowActive`` (``workflow/active``): cancel it first. An id
        already deleted returns False.
        """
        return control.delete([self.workflow_id], children=children) > 0

    async def adelete(self, children: bool = False) -> bool:
        """Async :meth:`delete`."""
        return await sync_to_async(self.delete)(children)

    # Family, replies and published values --------------------------------------

    @property
    def parent_id(self) -> str | None:
        """Return the id of the workflow that started this one (None: top-level)."""
        return control.parent_of(self.workflow_id)

    async def aparent_id(self) -> str | None:
        """Async :attr:`parent_id`."""
        return await sync_to_async(control.parent_of)(self.workflow_id)

    @property
    def version(self) -> str | None:
        """Return the application version it runs on (None: unversioned)."""
        return operations.version_of(self.workflow_id)

    async def aversion(self) -> str | None:
        """Async :attr:`version`."""
        return await sync_to_async(operations.version_of)(self.workflow_id)

    def request(self, name: str, body: Any = None, timeout: float | None = None) -> Any:
        """Send message ``name`` and return the value the workflow replies.

        The workflow receives it with ``ctx.messages`` and answers with
        ``ctx.reply(..., message, value)``. Raises ``WorkflowRequestTimeout``
        (``workflow/request_timeout``) after ``timeout`` seconds (default
        ``RIVET["ACTION_TIMEOUT"]``) and ``WorkflowNoReply``
        (``workflow/no_reply``) at once if the workflow ends without
        replying. While no worker has picked the workflow up, this runs it
        here up to its reply (so it works without a worker and inside an
        action's transaction). Inside an actor invocation it never waits:
        if that run did not reply, the message is withdrawn and
        ``WorkflowCannotWait`` (``workflow/cannot_wait``) raised at once.
        """
        return published.request(self.workflow_id, name, body, timeout)

    async def arequest(
        self, name: str, body: Any = None, timeout: float | None = None
    ) -> Any:
        """Async :meth:`request`."""
        return await published.arequest(self.workflow_id, name, body, timeout)

    def get_event(self, key: str, timeout: float | None = None) -> Any:
        """Return the latest value the workflow published under ``key``.

        Without ``timeout``, None at once if it was never set; with one, wait
        up to ``timeout`` seconds for a first value (None if none came, or
        as soon as the workflow finished without setting it). Inside an
        actor invocation a wait is refused (``workflow/cannot_wait``).
        """
        return published.get_event(self.workflow_id, key, timeout)

    async def aget_event(self, key: str, timeout: float | None = None) -> Any:
        """Async :meth:`get_event`."""
        return await published.aget_event(self.workflow_id, key, timeout)

    def get_events(self) -> dict[str, Any]:
        """Return every value the workflow published, ``{key: latest value}``.

        Raises ``workflow/not_found`` for an id no workflow has (DBOS
        returns an empty mapping; see docs/workflows.md).
        """
        return published.read_events(self.workflow_id)

    async def aget_events(self) -> dict[str, Any]:
        """Async :meth:`get_events`."""
        return await sync_to_async(self.get_events)()

    def messages(self) -> list[Message]:
        """Return the messages sent to the workflow and not received yet.

        Oldest first, as :class:`~django_rivet.engine.Message` objects
        (``id``, ``name``, ``body``, ``created_at``).
        """
        return sends.inbox(self.workflow_id)

    async def amessages(self) -> list[Message]:
        """Async :meth:`messages`."""
        return await sync_to_async(self.messages)()

    @property
    def attributes(self) -> dict[str, str | int]:
        """Return the attributes the workflow was started with (``{}``: none)."""
        return workflow_attributes.read(self.workflow_id)

    async def aattributes(self) -> dict[str, str | int]:
        """Async :attr:`attributes`."""
        return await sync_to_async(workflow_attributes.read)(self.workflow_id)

    def check_replay(self) -> ReplayDivergence | None:
        """Replay the history against the deployed code, running nothing.

        Returns None if it fits, else where and why it diverges: what a run
        of this workflow would hit (``manage.py rivet_check_replay`` does
        this for every workflow in flight).
        """
        return control.check(self.workflow_id)

    async def acheck_replay(self) -> ReplayDivergence | None:
        """Async :meth:`check_replay`."""
        return await sync_to_async(self.check_replay)()

    def history(self) -> list[HistoryEntry]:
        """Return the decoded history entries, in the order they were created."""
        return operations.history(self.workflow_id)

    async def ahistory(self) -> list[HistoryEntry]:
        """Async :meth:`history`."""
        return await sync_to_async(self.history)()

    def replay_from(self, entry_id: str | None = None) -> list[HistoryEntry]:
        """Re-run from the step ``entry_id`` (every entry after it is deleted).

        Without ``entry_id`` the workflow starts over with the same input.
        Returns the remaining history; raises ``ReplayRefusedError`` while a
        worker runs the workflow.
        """
        return operations.replay(self.workflow_id, entry_id)

    async def areplay_from(self, entry_id: str | None = None) -> list[HistoryEntry]:
        """Async :meth:`replay_from`."""
        return await sync_to_async(self.replay_from)(entry_id)
