"""Run one measure leg in this process: ``python -m bench.leg MODULE:FN JSON``.

Django is configured once per process (one database per process), so the
runner starts a fresh process per leg. The leg's result is printed as the
last line of stdout, prefixed with ``RESULT``. ``--migrate`` creates the
tables of the database the environment selects (the runner's templates).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def setup_django() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def main(argv: list[str]) -> None:
    if argv == ["--migrate"]:
        setup_django()
        from django.core.management import call_command

        call_command("migrate", run_syncdb=True, verbosity=0)
        return
    target, params = argv[0], json.loads(argv[1])
    django_needed = "--no-django" not in argv
    if django_needed:
        setup_django()
    module_name, function = target.split(":")
    fn = getattr(importlib.import_module(module_name), function)
    result = fn(**params)
    sys.stdout.flush()
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
