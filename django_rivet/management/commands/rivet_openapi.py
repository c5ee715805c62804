"""``manage.py rivet_openapi [-o openapi.json] [--prefix /rivet/]``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from django_rivet.transport.openapi import document, dumps


class Command(BaseCommand):
    """Write the OpenAPI document of the HTTP routes."""

    help = (
        "Write the OpenAPI 3.1 document of django-rivet's HTTP routes for the "
        "registered actor classes: each action, queue and actor route, with "
        "JSON Schemas from the annotations. The routes' "
        "prefix is where django_rivet.urls is mounted, unless --prefix says."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        """Add -o and --prefix."""
        parser.add_argument("-o", "--output", help="Write to this file.")
        parser.add_argument(
            "--prefix", help="The routes' prefix (default: where they are mounted)."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        """Build the document and write it."""
        text = dumps(document(prefix=options.get("prefix")))
        output = options.get("output")
        if output:
            Path(output).write_text(text, encoding="utf-8")
            self.stdout.write(f"Wrote the OpenAPI document to {output}.")
        else:
            self.stdout.write(text, ending="")
