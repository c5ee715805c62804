"""``manage.py rivet_check_replay``: will the deployed code replay in-flight workflows?

Run it as a deploy step, with the new code, before workers pick workflows
up: it replays each in-flight workflow's recorded history against the code
without running anything (recorded outputs only, up to the first entry
history does not have finished), lists those that would diverge with where
and why, and exits with status 1 if any would.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from django_rivet.management.base import RivetCommand, bounded_int, printable
from django_rivet.models import WORKFLOW_ACTIVE, Workflow
from django_rivet.workflows import ReplayDivergence, control


class Command(RivetCommand):
    """Replay in-flight workflows against the deployed code; exit 1 on divergence."""

    help = (
        "Replay the recorded history of every in-flight workflow against the "
        "deployed code, running nothing, and list those that would diverge "
        "(where, and why). Exit status 1 if any would."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        """Add --name and --limit."""
        parser.add_argument("--name", help="Only workflows with this name.")
        parser.add_argument(
            "--limit",
            type=bounded_int(1),
            default=None,
            help="Check at most this many workflows (the oldest first).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        """Check each in-flight workflow and print what would diverge."""
        rows = Workflow.objects.filter(status__in=WORKFLOW_ACTIVE)
        if options["name"]:
            rows = rows.filter(name=options["name"])
        rows = rows.order_by("created_at", "id")
        if options["limit"] is not None:
            rows = rows[: options["limit"]]
        checked = 0
        diverged: list[tuple[str, ReplayDivergence]] = []
        for workflow_id, name in list(rows.values_list("id", "name")):
            checked += 1
            try:
                found = control.check(workflow_id)
            except Exception as exc:  # one unreadable history must not stop the rest
                found = ReplayDivergence(
                    workflow_id, "", f"{type(exc).__name__}: {exc}", "check_failed"
                )
            if found is not None:
                diverged.append((name, found))
                where = found.location or "<root>"
                reason = printable(found.reason)
                self.stdout.write(
                    f"{printable(workflow_id)} ({printable(name)}): diverges at "
                    f"{printable(repr(where))} [{found.code}]: {reason}"
                )
        self.stdout.write(
            f"Checked {checked} in-flight workflow(s): {len(diverged)} would diverge."
        )
        if diverged:
            raise CommandError(
                f"{len(diverged)} in-flight workflow(s) would diverge on this code",
                returncode=1,
            )
