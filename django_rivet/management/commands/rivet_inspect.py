"""``manage.py rivet_inspect``: list actors and workflows, or show one.

::

    manage.py rivet_inspect                         # recent actors and workflows
    manage.py rivet_inspect workflows --status failed
    manage.py rivet_inspect workflow order-42       # fields, input/output, history
    manage.py rivet_inspect actors --name chatRoom
    manage.py rivet_inspect actor chatRoom acme general   # or an actor id
    manage.py rivet_inspect workflow order-42 --json
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from django.core.management.base import CommandError, CommandParser

from django_rivet import clock
from django_rivet.actors.rows import canonical_key, normalize_key
from django_rivet.encoding import json_dumps
from django_rivet.management.base import RivetCommand, bounded_int, printable
from django_rivet.models import Actor, Workflow
from django_rivet.workflows.client import WorkflowHandle

# Stored user values: always shown as JSON, so a string output reads "like this".
_VALUES = ("input", "output", "error", "state")


# JSON escapes C0 controls in strings itself, not DEL and C1: escape those.
_HIGH_CONTROLS = {code: f"\\u{code:04x}" for code in range(0x7F, 0xA0)}
# Rows one list shows at most.
MAX_LIMIT = 10_000


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _stamp(value: float | None) -> str | None:
    return None if value is None else clock.to_datetime(value).isoformat()


class Command(RivetCommand):
    """Print actors and workflows, or one of them in detail."""

    help = (
        "List actors and workflows, or show one: its state, or its status, "
        "input, output, error and decoded history."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        """Add what to show and the filters."""
        parser.add_argument(
            "what",
            nargs="?",
            choices=["actors", "workflows", "actor", "workflow"],
            help="What to show (default: recent actors and workflows).",
        )
        parser.add_argument(
            "ident",
            nargs="*",
            help="For 'workflow': its id. For 'actor': an actor id, or a name "
            "followed by the key parts.",
        )
        parser.add_argument("--name", help="Only actors/workflows with this name.")
        parser.add_argument("--status", help="Only workflows with this status.")
        parser.add_argument(
            "--limit",
            type=bounded_int(1, MAX_LIMIT),
            default=20,
            help=f"Rows per list (default 20, at most {MAX_LIMIT}).",
        )
        parser.add_argument("--json", action="store_true", help="Print JSON.")

    def _write(self, text: str) -> None:
        # Stored values are anyone's input: their control characters (ESC
        # sequences, newlines) must not reach the terminal of whoever
        # inspects them; every printed value stays on its line.
        self.stdout.write(printable(text))

    def handle(self, *args: Any, **options: Any) -> None:
        """Print what was asked for."""
        what, ident = options["what"], options["ident"]
        if what in ("actor", "workflow") and not ident:
            raise CommandError(f"Which {what}? Pass its id.")
        if what == "workflow":
            data: Any = self.workflow_detail(ident[0])
        elif what == "actor":
            data = self.actor_detail(ident)
        else:
            data = {}
            if what in (None, "actors"):
                data["actors"] = self.actor_list(options)
            if what in (None, "workflows"):
                data["workflows"] = self.workflow_list(options)
        if options["json"]:
            # JSON escapes C0 controls in strings itself; not DEL and C1.
            self.stdout.write(json_dumps(data, indent=2).translate(_HIGH_CONTROLS))
        else:
            self.print_text(what, data)

    # Lists -----------------------------------------------------------------------

    def actor_list(self, options: dict[str, Any]) -> list[dict[str, Any]]:
        """Return the most recently updated actors."""

        rows = Actor.objects.order_by("-updated_at")
        if options["name"]:
            rows = rows.filter(name=options["name"])
        return [
            {
                "id": str(row.id),
                "name": row.name,
                "key": row.key_parts,
                "updated_at": _iso(row.updated_at),
            }
            for row in rows[: options["limit"]]
        ]

    def workflow_list(self, options: dict[str, Any]) -> list[dict[str, Any]]:
        """Return the most recently created workflows."""

        rows = Workflow.objects.order_by("-created_at")
        if options["name"]:
            rows = rows.filter(name=options["name"])
        if options["status"]:
            rows = rows.filter(status=options["status"])
        return [
            {
                "id": row.id,
                "name": row.name,
                "status": row.status,
                "wake_at": _iso(row.wake_at),
                "waiting_for": row.waiting_for,
                "created_at": _iso(row.created_at),
            }
            for row in rows[: options["limit"]]
        ]

    # Details -----------------------------------------------------------------------

    def workflow_detail(self, workflow_id: str) -> dict[str, Any]:
        """Return one workflow with its stored fields and history."""

        row = Workflow.objects.filter(pk=workflow_id).first()
        if row is None:
            raise CommandError(f"No workflow has id {printable(repr(workflow_id))}.")
        handle = WorkflowHandle(row.id, row.name)
        snapshot = handle.snapshot()
        return {
            "id": row.id,
            "name": row.name,
            "status": row.status,
            "created_at": _iso(row.created_at),
            "updated_at": _iso(row.updated_at),
            "finished_at": _iso(row.finished_at),
            "wake_at": _iso(row.wake_at),
            "waiting_for": row.waiting_for,
            "lease_owner": row.lease_owner or None,
            "lease_expires_at": _iso(row.lease_expires_at),
            "run_count": row.run_count,
            "retry_count": row.retry_count,
            "last_error": row.last_error or None,
            "input": snapshot.input,
            "output": snapshot.output,
            "error": snapshot.error,
            "inbox": [
                {"id": message.pk, "name": message.name}
                for message in row.messages.order_by("id")
            ],
            "history": [
                {
                    "id": entry.id,
                    "kind": entry.kind,
                    "location": entry.location,
                    "status": entry.status,
                    "attempts": entry.attempts,
                    "created_at": _stamp(entry.created_at),
                    "completed_at": _stamp(entry.completed_at),
                    "output": entry.output,
                    "error": entry.error,
                }
                for entry in handle.history()
            ],
        }

    def actor_detail(self, ident: list[str]) -> dict[str, Any]:
        """Return one actor (by id, or by name and key) with its state."""

        rows = Actor.objects.all()
        try:
            actor_id = uuid.UUID(ident[0]) if len(ident) == 1 else None
        except ValueError:
            actor_id = None
        if actor_id is not None:
            row = rows.filter(pk=actor_id).first()
        else:
            key = canonical_key(normalize_key(ident[1:]))
            row = rows.filter(name=ident[0], key=key).first()
        if row is None:
            raise CommandError(f"No actor matches {printable(repr(' '.join(ident)))}.")
        return {
            "id": str(row.id),
            "name": row.name,
            "key": row.key_parts,
            "created_at": _iso(row.created_at),
            "updated_at": _iso(row.updated_at),
            "version": row.version,
            "state": row.decoded_state(),
            "kv_keys": row.kv_entries.count(),
            "kv_bytes": row.kv_size,
            "connections": row.connections.count(),
        }

    # Text output ----------------------------------------------------------------------

    def print_text(self, what: str | None, data: dict[str, Any]) -> None:
        """Print ``data`` for people."""
        if what in ("actor", "workflow"):
            history = data.pop("history", None)
            for field, value in data.items():
                plain = isinstance(value, str) and field not in _VALUES
                shown = value if plain else json_dumps(value)
                self._write(f"{field:>17}: {shown}")
            if history is not None:
                self.stdout.write(self.style.MIGRATE_HEADING("history:"))
                for entry in history:
                    self._write(
                        f"  {entry['kind']:<20} {entry['location']:<30} "
                        f"{entry['status']:<10} attempts={entry['attempts']} "
                        f"output={json_dumps(entry['output'])}"
                        + (
                            f" error={json_dumps(entry['error'])}"
                            if entry["error"]
                            else ""
                        )
                    )
            return
        if "actors" in data:
            self.stdout.write(self.style.MIGRATE_HEADING("Actors:"))
            for actor in data["actors"]:
                self._write(
                    f"  {actor['id']}  {actor['name']}  {json_dumps(actor['key'])}"
                )
            if not data["actors"]:
                self._write("  (none)")
        if "workflows" in data:
            self.stdout.write(self.style.MIGRATE_HEADING("Workflows:"))
            for workflow in data["workflows"]:
                waiting = (
                    f" waiting_for={','.join(workflow['waiting_for'])}"
                    if workflow["waiting_for"]
                    else ""
                )
                wake = f" wake_at={workflow['wake_at']}" if workflow["wake_at"] else ""
                self._write(
                    f"  {workflow['id']}  {workflow['name']}  "
                    f"{workflow['status']}{wake}{waiting}"
                )
            if not data["workflows"]:
                self._write("  (none)")
