#!/usr/bin/env python
"""Command-line utility of the example project."""

import os
import sys
from pathlib import Path


def main() -> None:
    # Run from anywhere: the project dir and the repository root (for an
    # uninstalled django_rivet) go on the path.
    here = Path(__file__).resolve().parent
    sys.path[:0] = [str(here), str(here.parent)]
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mysite.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
