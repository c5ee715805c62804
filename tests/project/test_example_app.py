"""The example project's own test suite passes (example_project/tests).

It runs in a pytest of its own, with the example's settings and the pytest
configuration docs/testing.md recommends (example_project/pytest.ini), the
way a project using django-rivet runs its tests.
"""

import os
import subprocess
import sys

from tests.support.servers import ROOT


def test_the_example_projects_tests_pass():
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("DJANGO_", "RIVET_", "PYTEST_"))
        and name not in ("DATABASE_URL", "REDIS_URL", "SQLITE_PATH")
    }
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q"],
        cwd=ROOT / "example_project",
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]
    assert " passed" in result.stdout
