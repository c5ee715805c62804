"""``manage.py rivet_openapi [-o openapi.json] [--prefix /rivet/]``.

Writes the OpenAPI 3.1 document of django-rivet's HTTP routes for the
registered actor classes: each action, queue and actor route, with JSON
Schemas from the annotations. The routes' prefix is where
``django_rivet.urls`` is mounted, unless ``--prefix`` says.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from django_rivet.management.documents import DocumentCommand
from django_rivet.transport.openapi import document, dumps


class Command(DocumentCommand):
    """Write the OpenAPI document of the HTTP routes."""

    subject = "the OpenAPI document"
    help = "Write the OpenAPI document of the HTTP routes of the actor classes."

    def add_arguments(self, parser: CommandParser) -> None:
        """Add -o and --prefix."""
        super().add_arguments(parser)
        prefix = "The routes' prefix (default: where they are mounted)."
        parser.add_argument("--prefix", help=prefix)

    def handle(self, *args: Any, **options: Any) -> None:
        """Build the document and write it."""
        doc = document(prefix=options.get("prefix"))
        self.write_document(dumps(doc), options.get("output"))
