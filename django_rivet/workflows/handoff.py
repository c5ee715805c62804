"""Messages handed to a live run in process: a wake without an inbox read.

A run waiting in its live window (:mod:`.live`) is woken in process by a
message sent here; without a hand-off it then reads its inbox to receive
it, a round trip that finds what the sender just wrote. With one, the
sender hands the message itself over (:func:`hand`, after its commit) and
the run takes it without the read, when it can tell the read would have
returned exactly that:

- every send moves the workflow row's ``wake_signal`` by one, in the
  commit that inserts its message, so messages' ids follow the signal
  (each send takes the row's lock before its insert);
- the run's last read tells the row's signal and whether the inbox held
  nothing more than the read returned (:meth:`InboxKnowledge.learn`);
- the messages handed since then, their signals one more each without a
  gap, are then the whole inbox: the oldest of them matching what the run
  waits for is what a read would return (:meth:`InboxKnowledge.take`).

Anything else moving the signal (a send that was not handed here: another
process's, one in a transaction, a wake, a cancel, a child's end) leaves a
gap, and the run reads. An answer of "nothing" always comes from a read:
a message from another process is found by the next one (the poll).

Only PostgreSQL's lone send (one statement in autocommit, which returns
the row's new signal) hands messages over; a send also returns the row's
lease token and pending cancel, which stand in for the read's cancel
check (:mod:`.fencing`).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..engine import Message, schema

__all__ = [
    "SETTLE",
    "Handed",
    "InboxKnowledge",
    "Mailbox",
    "close",
    "hand",
    "open_mailbox",
    "sending",
]


@dataclass(frozen=True, slots=True)
class Handed:
    """A message as its send committed it, with the workflow row's state then."""

    signal: int  # the row's wake_signal after the send
    pk: int
    name: str
    body: bytes
    created_at: float  # epoch seconds, as a read of the row returns them
    lease_token: str  # the row's, at the send
    cancel_requested: bool
    at: float = field(default_factory=time.monotonic)  # when the send returned

    def message(self) -> Message:
        """Return the message as the engine receives it from a read."""
        return Message(
            str(self.pk), self.name, schema.loads(self.body), self.created_at
        )


class Mailbox:
    """Messages handed to one run of a workflow in this process (thread-safe).

    Bounded: past :attr:`LIMIT` unclaimed messages it drops them and says
    so (:meth:`drain`), and the run reads its inbox instead. It also counts
    the sends to the workflow under way here (:func:`sending`): their
    commit may be visible to a read before their sender hands the message
    over (the sender's thread waits for the interpreter), so the run waits
    for them, briefly, rather than read what they wrote.
    """

    LIMIT = 32

    def __init__(self) -> None:
        self._changed = threading.Condition(threading.Lock())
        self._items: list[Handed] = []
        self._overflowed = False
        self._sending = 0

    def put(self, handed: Handed) -> None:
        """Keep a message handed over (a sender's thread, after its commit)."""
        with self._changed:
            if len(self._items) >= self.LIMIT:
                self._items.clear()
                self._overflowed = True
            else:
                self._items.append(handed)

    def begin(self) -> None:
        """Count a send to the workflow under way (see :func:`sending`)."""
        with self._changed:
            self._sending += 1

    def end(self) -> None:
        """A send under way ended (its message handed over, or not sent)."""
        with self._changed:
            self._sending -= 1
            if not self._sending:
                self._changed.notify_all()

    def drain(self, settle: float = 0.0) -> tuple[list[Handed], bool]:
        """Return the messages handed since the last drain; whether some were lost.

        ``settle``: wait up to that many seconds for the sends under way to
        end first.
        """
        with self._changed:
            if self._sending and settle > 0:
                self._changed.wait_for(lambda: not self._sending, settle)
            items, self._items = self._items, []
            overflowed, self._overflowed = self._overflowed, False
        return items, overflowed


_lock = threading.Lock()
_boxes: dict[str, list[Mailbox]] = {}

#: How long a run waits for a send under way here before it reads instead
#: (seconds): a send's round trip, with room for its thread to get the
#: interpreter back. A send held up longer (a lock held elsewhere) costs
#: the run this much at each look while it lasts, then the read.
SETTLE = 0.005


def open_mailbox(workflow_id: str) -> Mailbox:
    """Open a mailbox for a run of ``workflow_id`` here (until :func:`close`)."""
    mailbox = Mailbox()
    with _lock:
        _boxes.setdefault(workflow_id, []).append(mailbox)
    return mailbox


def close(workflow_id: str, mailbox: Mailbox) -> None:
    """Stop handing messages to ``mailbox``."""
    with _lock:
        found = _boxes.get(workflow_id)
        if found is not None and mailbox in found:
            found.remove(mailbox)
            if not found:
                del _boxes[workflow_id]


def hand(workflow_id: str, handed: Handed) -> None:
    """Hand a committed message to the runs of ``workflow_id`` here (if any)."""
    for mailbox in _open(workflow_id):
        mailbox.put(handed)


class _Sending:
    """A send under way to the runs whose mailboxes are ``boxes``."""

    def __init__(self, boxes: list[Mailbox]) -> None:
        self.boxes = boxes

    def __enter__(self) -> None:
        for mailbox in self.boxes:
            mailbox.begin()

    def __exit__(self, *exc: object) -> None:
        for mailbox in self.boxes:
            mailbox.end()


_NOBODY = contextlib.nullcontext()


def sending(workflow_id: str) -> contextlib.AbstractContextManager[None]:
    """Count a send to ``workflow_id`` under way (see :class:`Mailbox`).

    Hand its message over (:func:`hand`) before the block ends. Every lone
    send on PostgreSQL enters one: without a live run here it costs a
    lookup.
    """
    boxes = _open(workflow_id)
    return _Sending(boxes) if boxes else _NOBODY


def _open(workflow_id: str) -> list[Mailbox]:
    if workflow_id not in _boxes:  # (the usual case: no live run here)
        return []
    with _lock:
        return list(_boxes.get(workflow_id, ()))


class InboxKnowledge:
    """What one run knows of its inbox without reading it.

    ``signal``: the row's wake signal up to which the run knows the inbox
    (None: it knows nothing); ``known``: the messages in the inbox then that
    the run has not received, by id.
    """

    def __init__(self, mailbox: Mailbox) -> None:
        self.mailbox = mailbox
        self.signal: int | None = None
        self.known: dict[int, Handed] = {}
        self._waiting: dict[int, Handed] = {}  # handed, not yet in the chain

    def learn(self, signal: int | None, complete: bool) -> None:
        """A read saw the row at ``signal``; ``complete``: it returned the whole inbox.

        (Everything it returned is received, or completed as stale.)
        """
        self._collect()
        self.known = {}
        self.signal = signal if complete and signal is not None else None
        self._chain()

    def forget(self) -> None:
        """Know nothing until the next read."""
        self._collect()
        self.signal, self.known = None, {}

    def take(
        self, names: Iterable[str] | None, count: int, settle: bool = False
    ) -> list[Handed]:
        """Return the oldest known messages named ``names``, up to ``count``.

        Empty when a read must answer: nothing known, a gap in the handed
        messages' signals, or no known message matches. ``settle``: wait
        for sends under way here, up to :data:`SETTLE` seconds.
        """
        self._collect(SETTLE if settle and self.signal is not None else 0.0)
        self._chain()
        if self.signal is None or self._waiting:
            return []
        wanted = None if names is None else set(names)
        matching = sorted(
            pk for pk, m in self.known.items() if wanted is None or m.name in wanted
        )[:count]
        return [self.known.pop(pk) for pk in matching]

    def _collect(self, settle: float = 0.0) -> None:
        items, overflowed = self.mailbox.drain(settle)
        if overflowed:
            self.signal, self.known, self._waiting = None, {}, {}
        for handed in items:
            self._waiting[handed.signal] = handed
        if len(self._waiting) > Mailbox.LIMIT:  # (reads never learn: a full inbox)
            self._waiting.clear()

    def _chain(self) -> None:
        """Move handed messages that follow the known signal into ``known``."""
        if self.signal is None:
            return
        while self.signal + 1 in self._waiting:
            handed = self._waiting.pop(self.signal + 1)
            self.known[handed.pk] = handed
            self.signal += 1
        # Handed before what the run knows was read: the read saw them.
        for signal in [s for s in self._waiting if s <= self.signal]:
            del self._waiting[signal]
