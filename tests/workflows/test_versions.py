"""Application versions (issue 44): RIVET["APP_VERSION"], start/fork(version=).

The tests named after DBOS Transact's (tests/test_dbos.py test_app_version,
tests/test_queue.py, tests/test_workflow_management.py test_fork_version,
tests/test_workflow_introspection.py) are translations of them. A deploy is
simulated by changing ``RIVET["APP_VERSION"]`` in this process: the worker
of version A is this process under ``APP_VERSION="A"``.

Deliberate differences from DBOS, each explained in docs/workflows.md
("Application versions"):

* No version unless one is set: DBOS computes one from the workflows'
  source by default; here ``APP_VERSION`` is opt-in and ``None`` (the
  default) runs every workflow, as before versions existed.
* No table of versions (DBOS's list/get/set_latest_application_version):
  a versioned worker runs unversioned workflows whatever other versions
  exist, where DBOS runs them only on its latest version.
* Admission is not per version: a queued workflow of another version is
  admitted as any (``pending``, not DBOS's ``ENQUEUED``) and waits for a
  worker of its version.
"""

from __future__ import annotations

import pytest
from django.core.checks import run_checks
from django.test import override_settings

from django_rivet import workflows
from django_rivet.conf import rivet_settings
from django_rivet.models import Workflow
from django_rivet.testing import run_due, run_until_idle
from django_rivet.workflows import execution, wakeups

# pg: the PostgreSQL leg runs this module (the version condition is in the
# claim's raw SQL).
pytestmark = [pytest.mark.pg, pytest.mark.django_db]

QUEUES = {"queue": {}, "one_here": {"worker_concurrency": 1}}


def version(name: str | None, **more):
    """Settings of a process deployed at version ``name`` (None: unversioned)."""
    return override_settings(
        RIVET={"APP_VERSION": name, "WORKFLOW_QUEUES": QUEUES, **more}
    )


def test_app_version():
    """DBOS test_app_version: each run records the version it started on."""
    with version(None):
        unversioned = workflows.start("greet", {"name": "a"})
        assert unversioned.version is None
        assert run_until_idle(unversioned) == "completed"
    with version("2026.12.1"):
        handle = workflows.start("greet", {"name": "b"})
        assert handle.version == "2026.12.1"
        assert Workflow.objects.get(pk=handle.workflow_id).version == "2026.12.1"
        assert run_until_idle(handle) == "completed"
    # Difference: no version computed from the source by default (docs).
    assert rivet_settings.APP_VERSION is None


def test_enqueue_version():
    """DBOS test_enqueue_version: started on another version, it waits for a
    worker of that version, which runs it."""
    with version("current"):
        handle = workflows.start(
            "greet", {"name": "x"}, queue="queue", version="future"
        )
        assert handle.version == "future"
        run_due()
        assert handle.status == "pending"  # admitted; no worker of "future"
        assert run_until_idle(handle) == "pending"
    with version("future"):
        assert run_until_idle(handle) == "completed"
    assert handle.result() == "hello x"


@pytest.mark.django_db(transaction=True)  # a thread: its own connection
async def test_enqueue_version_async():
    """DBOS test_enqueue_version_async."""
    with version("current"):
        handle = await workflows.astart("greet", {"name": "y"}, version="future")
        assert await handle.aversion() == "future"
        assert await handle.astatus() == "pending"
    with version("future"):
        from asgiref.sync import sync_to_async

        assert await sync_to_async(run_until_idle)(handle) == "completed"


def test_worker_concurrency_across_versions():
    """DBOS test_worker_concurrency_across_versions: a run of another version
    takes no slot of this worker's ``worker_concurrency``."""
    with version("current"):
        other = workflows.start(
            "greet", {"name": "o"}, queue="one_here", version="other"
        )
        mine = workflows.start("greet", {"name": "m"}, queue="one_here")
        run_due()
        assert mine.status == "completed"
        # Difference: admitted (pending), where DBOS leaves it ENQUEUED.
        assert other.status == "pending"
    with version("other"):
        run_due()
    assert other.result() == "hello o"


def test_dequeue_no_version_requires_latest():
    """DBOS test_dequeue_no_version_requires_latest, with this project's rule:
    a versioned worker runs unversioned workflows (no "latest version" here)."""
    with version(None):
        versionless = workflows.start("greet", {"name": "n"}, queue="queue")
    with version("current"):
        versioned = workflows.start("greet", {"name": "v"}, queue="queue")
        run_due()
        assert versioned.result() == "hello v"
        # Difference: DBOS would leave it ENQUEUED unless "current" is the latest.
        assert versionless.result() == "hello n"


def test_fork_version():
    """DBOS test_fork_version: fork(version=) moves a run to a new version."""
    with version("old"):
        original = workflows.start("rowWriter", {"steps": 2}, id="orig")
        assert run_until_idle(original) == "completed"
        fork = original.fork("s1", version="my_new_version")
        assert fork.version == "my_new_version"
        assert run_until_idle(fork) == "pending"  # "old" leaves it alone
        default = original.fork("s1")
        assert default.version == "old"  # a fork runs the code deployed now
        assert run_until_idle(default) == "completed"
    with version("my_new_version"):
        assert run_until_idle(fork) == "completed"
    assert fork.result() == original.result()


def test_a_deploy_moves_work_from_the_old_version_to_the_new():
    """Tested across a simulated deploy: the worker of A leaves a run of B
    alone (it is not even due for it: no busy loop), the worker of B runs
    it, and each version's sleeping runs wake on their own version."""
    with version("A"):
        a_run = workflows.start("greet", {"name": "a"})
        b_run = workflows.start("greet", {"name": "b"}, version="B")
        assert execution.run(b_run.workflow_id) is None  # the claim refuses it
        assert run_due() == 1
        assert a_run.status == "completed" and b_run.status == "pending"
        assert wakeups.next_due_at() is None  # nothing due for A
        assert execution.run_due() == 0
    with version("B"):
        assert wakeups.next_due_at() is not None
        assert run_due() == 1
        assert b_run.result() == "hello b"
    with version(None):  # an unversioned process runs every version's
        c_run = workflows.start("greet", {"name": "c"}, version="C")
        assert run_until_idle(c_run) == "completed"


def test_operations_act_on_any_version():
    """Cancel is not a run: a worker of A cancels a run of B."""
    with version("A"):
        handle = workflows.start("approval", {}, version="B")
        assert handle.cancel() is True
        assert handle.status == "cancelled"


def test_search_by_version():
    """DBOS test_workflow_introspection (list_workflows(app_version=...))."""
    with version("v1"):
        first = workflows.start("greet", {"name": "1"})
    with version(None):
        bare = workflows.start("greet", {"name": "2"})
    second = workflows.start("greet", {"name": "3"}, version="v2")
    assert workflows.filter(version="no") == []
    assert workflows.filter(version="v1") == [first]
    assert workflows.filter(version=["v1", "no"]) == [first]
    assert workflows.filter(version=["no", "also_no"]) == []
    assert set(workflows.filter(version=["v1", "v2"])) == {first, second}
    assert workflows.filter(version="") == [bare]
    assert workflows.count(version="v2") == 1


def test_a_version_is_a_short_string():
    with pytest.raises(ValueError, match="1 to 64"):
        workflows.start("greet", {"name": "x"}, version="")
    with pytest.raises(ValueError, match="1 to 64"):
        workflows.start("greet", {"name": "x"}, version="v" * 65)
    with override_settings(RIVET={"APP_VERSION": 2026}):
        errors = [e for e in run_checks() if "APP_VERSION" in e.msg]
    assert [e.id for e in errors] == ["rivet.E004"]
