"""What ``rivet_typescript`` and ``rivet_openapi`` share: writing their document."""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandParser

__all__ = ["DocumentCommand"]


class DocumentCommand(BaseCommand):
    """A command that writes one generated document, to a file (-o) or stdout."""

    #: What the document describes, for the line saying where it was written.
    subject = "the document"

    def add_arguments(self, parser: CommandParser) -> None:
        """Add -o."""
        parser.add_argument(
            "-o", "--output", help="Write to this file instead of standard output."
        )

    def write_document(self, text: str, output: str | None) -> None:
        """Write ``text`` to ``output``, or to standard output."""
        if output:
            Path(output).write_text(text, encoding="utf-8")
            self.stdout.write(f"Wrote {self.subject} to {output}.")
        else:
            self.stdout.write(text, ending="")
