"""The engine core imports nothing from Django."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHECK = (
    "import django_rivet.engine, sys; "
    "loaded = [m for m in sys.modules if m == 'django' or m.startswith('django.')]; "
    "assert not loaded, loaded"
)


def test_importing_the_engine_loads_no_django_module():
    result = subprocess.run(
        [sys.executable, "-c", CHECK],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    assert result.returncode == 0, result.stderr


def test_no_module_of_the_engine_mentions_django_imports():
    for path in (ROOT / "django_rivet" / "workflow").glob("*.py"):
        for line in path.read_text().splitlines():
            stripped = line.strip()
            assert not stripped.startswith(("import django", "from django ")), path
