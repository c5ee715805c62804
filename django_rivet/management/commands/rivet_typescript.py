"""``manage.py rivet_typescript [-o file.d.ts] [--rivetkit]``: typed clients.

Writes the registered actor classes as TypeScript types: each action's
arguments and result, queue bodies and replies, declared events, state,
connection parameters and creation input, from their annotations.
``createClient<RivetRegistry>()`` of rivet.js then checks every call; with
``--rivetkit`` the module also exports ``RivetKitRegistry`` for the
official client's ``createClient<>()`` (it imports types from the
``rivetkit`` npm package).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from django_rivet.actors import registry
from django_rivet.actors.schemas import describe
from django_rivet.management.documents import DocumentCommand
from django_rivet.typed.jsonschema import Schemas
from django_rivet.typed.typescript import registry_module


class Command(DocumentCommand):
    """Write the registry's actors as TypeScript types."""

    subject = "the actors' TypeScript types"
    help = "Write the actor classes as TypeScript types, for typed clients."

    def add_arguments(self, parser: CommandParser) -> None:
        """Add -o and --rivetkit."""
        super().add_arguments(parser)
        rivetkit = "Also export RivetKitRegistry, for the official RivetKit client."
        parser.add_argument("--rivetkit", action="store_true", help=rivetkit)

    def handle(self, *args: Any, **options: Any) -> None:
        """Describe the actors and write the module."""
        schemas = Schemas()
        public = (c for c in registry.all_actors().values() if not c.server_only)
        actors = describe(public, schemas)
        rivetkit = bool(options["rivetkit"])
        module = registry_module(actors, schemas.finish(), rivetkit=rivetkit)
        self.write_document(module, options.get("output"))
