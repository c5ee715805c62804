"""``manage.py rivet_workflows``: find workflows; cancel, resume, recover, delete.

::

    manage.py rivet_workflows list --status failed --name order
    manage.py rivet_workflows cancel --name order --older-than 7d --dry-run
    manage.py rivet_workflows recover --name order          # failed ones
    manage.py rivet_workflows resume --status cancelled     # cancelled ones
    manage.py rivet_workflows delete --name order --older-than 90d   # finished ones
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from django_rivet import clock
from django_rivet.management.base import (
    RivetCommand,
    bounded_int,
    parse_duration,
    printable,
)
from django_rivet.models import (
    WORKFLOW_ACTIVE,
    WORKFLOW_FINISHED,
    Workflow,
    WorkflowStatus,
)
from django_rivet.workflows import queries
from django_rivet.workflows.client import WorkflowHandle

# Which workflows each verb can act on (a --status outside them is refused).
_TARGETS = {
    "cancel": [str(status) for status in WORKFLOW_ACTIVE],
    "recover": [WorkflowStatus.FAILED.value],
    "resume": [WorkflowStatus.CANCELLED.value],
    "delete": [str(status) for status in WORKFLOW_FINISHED],
}


class Command(RivetCommand):
    """List workflows matching filters, or act on each of them."""

    help = (
        "List workflows, or cancel (active ones), recover (failed ones), "
        "resume (cancelled ones) or delete (finished ones, with their history) "
        "every workflow matching the filters. --dry-run prints what would be done."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        """Add the verb and the filters."""
        parser.add_argument(
            "verb", choices=["list", "cancel", "resume", "recover", "delete"]
        )
        parser.add_argument("--name", help="Only workflows with this name.")
        parser.add_argument(
            "--status",
            action="append",
            choices=sorted(WorkflowStatus.values),
            help="Only workflows with this status (repeat for several).",
        )
        parser.add_argument(
            "--older-than",
            help="Only workflows created longer ago than this (90, 15m, 12h, 7d).",
        )
        parser.add_argument(
            "--waiting-for", help="Only workflows waiting for this message name."
        )
        parser.add_argument("--parent", help="Only the children of this workflow.")
        parser.add_argument(
            "--limit",
            type=bounded_int(1),
            default=None,
            help="At most this many workflows, newest first (list: 100).",
        )
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="Print what would be done, change nothing.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        """List, or act on each matching workflow, and print a summary."""
        verb = options["verb"]
        statuses = options["status"]
        if verb != "list":
            allowed = _TARGETS[verb]
            refused = sorted(set(statuses or ()) - set(allowed))
            if refused:
                raise CommandError(
                    f"{verb} acts on {', '.join(allowed)} workflows, not {refused[0]}"
                )
            statuses = statuses or allowed
        created_before = None
        if options["older_than"]:
            created_before = clock.now() - parse_duration(options["older_than"])
        rows = queries.matching(
            name=options["name"],
            status=statuses,
            waiting_for=options["waiting_for"],
            parent_id=options["parent"],
            created_before=created_before,
        ).order_by("-created_at", "-id")
        limit = options["limit"]
        if limit is None and verb == "list":
            limit = 100
        if limit is not None:
            rows = rows[:limit]
        found = list(rows)
        if verb == "list":
            self._list(found)
            return
        self._act(verb, found, options["dry_run"])

    def _list(self, rows: list[Workflow]) -> None:
        for row in rows:
            # Ids, names and message names are anyone's: one escaped field
            # each, so none can add a column, a line or a terminal escape.
            waits = ",".join(printable(name) for name in row.waiting_for or []) or "-"
            parent = printable(row.parent_id) if row.parent_id else "-"
            self.stdout.write(
                f"{printable(row.id)}\t{printable(row.name)}\t{row.status}\t"
                f"{row.created_at.isoformat()}\twaits={waits}\tparent={parent}"
            )
        self.stdout.write(f"{len(rows)} workflow(s)")

    def _act(self, verb: str, rows: list[Workflow], dry_run: bool) -> None:
        done = skipped = failed = 0
        past = {
            "cancel": "cancelled",
            "recover": "recovered",
            "resume": "resumed",
            "delete": "deleted",
        }
        for row in rows:
            shown = printable(row.id)
            if dry_run:
                name = printable(row.name)
                self.stdout.write(f"would {verb} {shown} ({name}, {row.status})")
                done += 1
                continue
            handle = WorkflowHandle(row.id, row.name)
            try:
                changed = getattr(handle, verb)()
            except Exception as exc:  # report and go on with the others
                self.stderr.write(f"could not {verb} {shown}: {printable(exc)}")
                failed += 1
                continue
            if changed:
                self.stdout.write(f"{past[verb]} {shown}")
                done += 1
            else:
                self.stdout.write(f"skipped {shown} (its status does not allow it)")
                skipped += 1
        summary = f"{past[verb] if not dry_run else 'would ' + verb}: {done}"
        self.stdout.write(f"{summary}, skipped: {skipped}, errors: {failed}")
        if failed:
            raise CommandError(f"{failed} workflow(s) could not be {past[verb]}")
