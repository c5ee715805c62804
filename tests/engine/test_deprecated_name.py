"""``django_rivet.workflow``, the engine's name before 0.2, still imports.

In a subprocess: the alias installs an import hook and warns once per
process, which the rest of the suite must not inherit.
"""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support.servers import ROOT

SCRIPT = """
import json, sys, warnings
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    import django_rivet.workflow as old
    from django_rivet.workflow.errors import StepFailedError
    from django_rivet.workflow import workflow, CriticalError
import django_rivet.engine as new
import django_rivet.engine.errors as new_errors
print(json.dumps({
    "warnings": [str(w.category.__name__) + ": " + str(w.message) for w in caught],
    "same_class": StepFailedError is new_errors.StepFailedError,
    "same_module": sys.modules["django_rivet.workflow.errors"] is new_errors,
    "same_names": sorted(old.__all__) == sorted(new.__all__),
    "decorator": workflow is new.workflow and CriticalError is new.CriticalError,
}))
"""


def test_the_old_engine_name_imports_the_same_objects_and_warns_once():
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    report = json.loads(done.stdout)
    assert report["same_class"] and report["same_module"]
    assert report["same_names"] and report["decorator"]
    [warning] = report["warnings"]
    assert warning.startswith("DeprecationWarning: django_rivet.workflow was renamed")
    assert "from django_rivet.workflows import workflow" in warning
