"""``manage.py rivet_typescript [-o file.d.ts] [--rivetkit]``: typed clients."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from django_rivet.actors import registry
from django_rivet.actors.schemas import describe
from django_rivet.typed.jsonschema import Schemas
from django_rivet.typed.typescript import registry_module


class Command(BaseCommand):
    """Write the registry's actors as TypeScript types."""

    help = (
        "Write the registered actor classes as TypeScript types: each "
        "action's arguments and result, queue bodies and replies, declared "
        "events, state, connection parameters and creation input, from "
        "their annotations. `createClient<RivetRegistry>()` of rivet.js "
        "then checks every call; with --rivetkit the module also exports "
        "RivetKitRegistry for the official client's createClient<>() (it "
        "imports types from the `rivetkit` npm package)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        """Add -o and --rivetkit."""
        parser.add_argument(
            "-o",
            "--output",
            help="Write to this file (e.g. frontend/src/rivet-registry.d.ts) "
            "instead of standard output.",
        )
        parser.add_argument(
            "--rivetkit",
            action="store_true",
            help="Also export RivetKitRegistry, for the official RivetKit client.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        """Describe the actors and write the module."""
        schemas = Schemas()
        actors = describe(
            (cls for cls in registry.all_actors().values() if not cls.server_only),
            schemas,
        )
        text = registry_module(
            actors, schemas.finish(), rivetkit=bool(options["rivetkit"])
        )
        output = options.get("output")
        if output:
            Path(output).write_text(text, encoding="utf-8")
            self.stdout.write(f"Wrote {len(actors)} actor(s) to {output}.")
        else:
            self.stdout.write(text, ending="")
