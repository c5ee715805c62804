"""The statements of a message's send and of a run's inbox reads (both databases).

A send was four or five ORM statements in a transaction. Now:

- SQLite: two, in the send's transaction: the workflow row's ``UPDATE ...
  RETURNING`` (the wake signal, and the wake itself when the workflow
  waits for the name), then the message's insert guarded by the inbox's
  count.
- PostgreSQL: one data-modifying ``WITH`` doing both (``SendSQL.one``);
  and a lone send outside a transaction commits on its own, without BEGIN
  and COMMIT (``SendSQL.alone``). A statement sees only what committed
  before it began, and a send may first wait for another's row lock: the
  count it made is exact only when no send committed in between, which
  the row's wake signal tells (every send moves it). Otherwise the insert
  counts again (``one``) or nothing is written and the send goes the
  transaction's way (``alone``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from .actors import StatementCache
from .names import quote, table

__all__ = [
    "HANDED_ROW",
    "MessageSQL",
    "SendSQL",
    "inbox_read_knowing_sql",
    "inbox_read_sql",
    "send_statements",
]

#: The workflow row's columns a lone send returns after its message's id.
HANDED_ROW = ("wake_signal", "lease_token", "cancel_requested")

# json_list_contains(lhs, lhs_params, item) of the dialect.
JsonContains = Callable[[str, Sequence[Any], Any], tuple[str, tuple[Any, ...]]]


@dataclass(frozen=True, slots=True)
class SendSQL:
    """A send's statements (:meth:`.Dialect.send_sql`).

    ``signal``: parameters the workflow id; returns the row's ``status`` and
    ``waiting_for``, no row for an unknown workflow. ``signal_and_wake``:
    the same, and it also wakes the workflow when it is active and waits
    for the name; parameters per wake column the name's and ``*``'s
    :meth:`~.Dialect.json_list_contains` parameter and the column's value,
    then the id. ``insert``: parameters the workflow id, name, body,
    ``created_at``, then the workflow id and the inbox's limit; returns the
    message's id, no row when the inbox holds that many already.
    """

    signal: str
    signal_and_wake: str
    insert: str
    #: PostgreSQL: ``signal_and_wake`` and ``insert`` in one statement (a
    #: data-modifying ``WITH``); parameters those of ``signal_and_wake``,
    #: the id twice more, the message's four values and the limit. Returns
    #: status, ``waiting_for``, "counted alone" and the message's id (None:
    #: not inserted). Its count is its snapshot's, taken before it waited
    #: for the row's lock: "counted alone" says no other send changed the
    #: row meanwhile (the count is exact), else ``insert`` must count again.
    one: str | None = None
    #: PostgreSQL: a send that commits on its own (autocommit), in one
    #: round trip: it updates and inserts only when nothing can refuse it
    #: (active, room in the inbox, and no send moved the row since its
    #: snapshot), else writes nothing and returns no row, and the caller
    #: sends in a transaction (the exact answer). Parameters those of
    #: ``signal_and_wake`` without the id, the id three times, the limit,
    #: the message's four values. Returns status and ``waiting_for``
    #: (after the update), the message's id, then the row's
    #: :data:`HANDED_ROW` columns (what a hand-off to a live run needs:
    #: :mod:`django_rivet.workflows.handoff`).
    alone: str | None = None


def send_statements(
    rows_of_values: str,
    active: Sequence[str],
    wake: Sequence[str],
    contains: JsonContains,
    limit: int,
    finished: Sequence[str] | None = None,
) -> SendSQL:
    """Return a send's statements; ``wake``: the columns a wake sets.

    ``rows_of_values``: the dialect's ``SELECT`` of the message rows of a
    ``VALUES`` list, formatted with ``{values}``; ``finished``: the statuses
    that take no message, for the one-statement send (PostgreSQL).
    """
    workflows, messages = table("Workflow"), table("WorkflowMessage")
    signal = quote("wake_signal")
    bump = f"UPDATE {workflows} SET {signal} = {signal} + 1"
    end = (
        f"WHERE {quote('id')} = %s RETURNING {quote('status')}, {quote('waiting_for')}"
    )
    holds, _ = contains(quote("waiting_for"), (), "")
    statuses = ", ".join(f"'{status}'" for status in active)
    # What _deliver tests in Python too: active, and the name or "*" waited for.
    wanted = f"{quote('status')} IN ({statuses}) AND ({holds} OR {holds})"
    sets = "".join(
        f", {quote(column)} = CASE WHEN {wanted} THEN %s ELSE {quote(column)} END"
        for column in wake
    )
    columns = ", ".join(
        quote(column) for column in ("workflow_id", "name", "body", "created_at")
    )
    pending = (
        f"(SELECT COUNT(*) FROM (SELECT 1 FROM {messages} "
        f"WHERE {quote('workflow_id')} = %s LIMIT {limit + 1}) AS pending)"
    )
    return SendSQL(
        signal=f"{bump} {end}",
        signal_and_wake=f"{bump}{sets} {end}",
        insert=f"INSERT INTO {messages} ({columns}) "
        f"{rows_of_values.format(values='(%s, %s, %s, %s)')} "
        f"WHERE {pending} < %s RETURNING {quote('id')}",
        one=_one_statement(bump + sets, pending, columns, finished)
        if finished is not None
        else None,
        alone=_alone_statement(bump + sets, pending, columns, finished)
        if finished is not None
        else None,
    )


def _alone_statement(
    update: str, pending: str, columns: str, finished: Sequence[str]
) -> str:
    """Build :attr:`SendSQL.alone` (PostgreSQL)."""
    workflows, messages = table("Workflow"), table("WorkflowMessage")
    signal, id_, status = quote("wake_signal"), quote("id"), quote("status")
    ended = ", ".join(f"'{name}'" for name in finished)
    row_state = ", ".join(quote(column) for column in HANDED_ROW)
    # The subqueries are the snapshot's (computed once); a row that waited
    # for its lock is tested again as it is now: a send that committed in
    # between moved its wake signal, and it no longer matches.
    return (
        f"WITH u AS ({update} WHERE {id_} = %s AND {signal} = "
        f"(SELECT s.{signal} FROM {workflows} AS s WHERE s.{id_} = %s) "
        f"AND {status} NOT IN ({ended}) AND {pending} < %s "
        f"RETURNING {status}, {quote('waiting_for')}, {row_state}), "
        f"sent AS (INSERT INTO {messages} ({columns}) SELECT v.* FROM "
        "(VALUES (%s, %s, %s, %s)) AS v WHERE EXISTS (SELECT 1 FROM u) "
        f"RETURNING {id_}) "
        f"SELECT u.{status}, u.{quote('waiting_for')}, sent.{id_}, "
        + ", ".join(f"u.{quote(c)}" for c in HANDED_ROW)
        + " FROM u, sent"
    )


def _one_statement(
    update: str, pending: str, columns: str, finished: Sequence[str]
) -> str:
    """Build :attr:`SendSQL.one` (PostgreSQL)."""
    workflows, messages = table("Workflow"), table("WorkflowMessage")
    signal, id_ = quote("wake_signal"), quote("id")
    # The snapshot's wake signal, read beside the update: every send moves
    # it, so "ours is one more" means no send committed in between.
    seen = f"(SELECT s.{signal} FROM {workflows} AS s WHERE s.{id_} = %s)"
    ended = ", ".join(f"'{status}'" for status in finished)
    return (
        f"WITH u AS ({update} WHERE {id_} = %s RETURNING {quote('status')}, "
        f"{quote('waiting_for')}, {signal} = {seen} + 1 AS alone, "
        f"{pending} AS pending), "
        f"sent AS (INSERT INTO {messages} ({columns}) SELECT v.* FROM "
        "(VALUES (%s, %s, %s, %s)) AS v, u WHERE u.alone AND u.pending < %s "
        f"AND u.{quote('status')} NOT IN ({ended}) RETURNING {id_}) "
        f"SELECT u.{quote('status')}, u.{quote('waiting_for')}, u.alone, "
        f"(SELECT {id_} FROM sent) FROM u"
    )


def inbox_read_sql(names: int | None, held: str | None = None) -> str:
    """Return the read of a workflow's oldest messages (a run's receive).

    Parameters: (with ``held``: its parameters first), the workflow id, then
    ``names`` message names (None: any name), then how many. Columns: id,
    name, body, ``created_at``, and with ``held`` (a ``SELECT`` of the
    workflow row while the run holds it, no cancel pending) whether it
    found the row: the read then carries the next step's cancel check.
    """
    columns = ", ".join(quote(c) for c in ("id", "name", "body", "created_at"))
    if held is not None:
        columns += f", EXISTS ({held})"
    sql = (
        f"SELECT {columns} FROM {table('WorkflowMessage')} "
        f"WHERE {quote('workflow_id')} = %s"
    )
    if names is not None:
        sql += f" AND {quote('name')} IN ({', '.join(['%s'] * names)})"
    return sql + f" ORDER BY {quote('id')} LIMIT %s"


def inbox_read_knowing_sql(names: int | None) -> str:
    """Return a run's read of its oldest messages that also tells what it saw.

    PostgreSQL (a ``LATERAL`` join from the workflow row): one row at least
    while the workflow exists, its message columns NULL when none matched.
    Parameters: the run's lease token, how many of the inbox's messages to
    count at most, ``names`` message names (None: any name), how many to
    return, the workflow id. Columns: id, name, body, ``created_at``,
    whether the token holds the lease with no cancel pending, the row's
    ``wake_signal``, and the inbox's messages counted (of every name). The
    count and the signal are the statement's snapshot: with as many
    messages as it returned, the inbox held nothing else at that signal.
    """
    workflows, messages = table("Workflow"), table("WorkflowMessage")
    owner, id_ = quote("workflow_id"), quote("id")
    fields = [quote(c) for c in ("id", "name", "body", "created_at")]
    columns, picked = ", ".join(fields), ", ".join(f"m.{c}" for c in fields)
    named = ""
    if names is not None:
        named = f" AND {quote('name')} IN ({', '.join(['%s'] * names)})"
    return (
        f"SELECT {picked}, (w.{quote('lease_token')} = %s "
        f"AND NOT w.{quote('cancel_requested')}), "
        f"w.{quote('wake_signal')}, (SELECT count(*) FROM (SELECT 1 FROM {messages} "
        f"AS a WHERE a.{owner} = w.{id_} LIMIT %s) AS counted) "
        f"FROM {workflows} AS w LEFT JOIN LATERAL (SELECT {columns} FROM {messages} "
        f"WHERE {owner} = w.{id_}{named} ORDER BY {id_} LIMIT %s) AS m ON true "
        f"WHERE w.{id_} = %s"
    )


class MessageSQL(StatementCache):
    """The dialect's message statements (a base of :class:`.Dialect`)."""

    # A SELECT of the rows of a VALUES list of message rows (``{values}``).
    _message_rows: ClassVar[str] = "SELECT * FROM (VALUES {values}) AS v"
    # A send in one statement (SendSQL.one): a data-modifying WITH.
    sends_in_one_statement: ClassVar[bool] = False
    json_list_contains: JsonContains
    lease_held_sql: Callable[[], str]

    def send_sql(
        self,
        active: Sequence[str],
        finished: Sequence[str],
        wake: Sequence[str],
        limit: int,
    ) -> SendSQL:
        """Return a send's statements (:class:`SendSQL`).

        ``active``: the statuses a message wakes; ``finished``: those that
        take none; ``wake``: the columns a wake sets; ``limit``: the
        messages an inbox holds at most.
        """
        one = finished if self.sends_in_one_statement else None
        return self._cached(  # type: ignore[no-any-return]
            ("send", *active, "|", *finished, "|", *wake, limit),
            lambda: send_statements(
                self._message_rows, active, wake, self.json_list_contains, limit, one
            ),
        )

    #: Whether a run's read can tell the row's signal and the inbox's count
    #: (:func:`inbox_read_knowing_sql`), and a lone send returns the row's
    #: :data:`HANDED_ROW`: a live run here may take messages handed to it.
    hands_messages: ClassVar[bool] = False

    def inbox_read_knowing_sql(self, names: int | None) -> str:
        """Return :func:`inbox_read_knowing_sql` (only where :attr:`hands_messages`)."""
        return self._cached(  # type: ignore[no-any-return]
            ("inbox-knowing", names), lambda: inbox_read_knowing_sql(names)
        )

    def inbox_read_sql(self, names: int | None, checked: bool = False) -> str:
        """Return a run's read of its oldest messages (:func:`inbox_read_sql`).

        ``checked``: with the column telling the run holds the lease and no
        cancel is pending (its parameters first: the workflow id, the token).
        """
        return self._cached(  # type: ignore[no-any-return]
            ("inbox", names, checked),
            lambda: inbox_read_sql(names, self.lease_held_sql() if checked else None),
        )
