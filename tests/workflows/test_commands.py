"""rivet_check_replay and rivet_workflows: the deploy check and bulk operations."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command, execute_from_command_line
from django.core.management.base import CommandError

from django_rivet import workflows
from django_rivet.models import Workflow
from django_rivet.testing import freeze_time, run_until_idle
from django_rivet.workflows import registry, workflow
from tests.testapp.models import StepRow

pytestmark = pytest.mark.django_db(transaction=True)


@workflow(name="evolving")
async def evolving_v1(ctx, input):
    await ctx.step("charge", lambda: "ch_1")
    message = await ctx.messages.next("wait", names=["go"])
    return message.body


@workflow(name="evolving")
async def evolving_renamed(ctx, input):
    await ctx.step("charge-card", lambda: "ch_1")  # the step's name changed
    message = await ctx.messages.next("wait", names=["go"])
    return message.body


@workflow(name="evolving")
async def evolving_extended(ctx, input):
    await ctx.step("charge", lambda: "ch_1")
    message = await ctx.messages.next("wait", names=["go"])
    await ctx.step("receipt", lambda: "sent")  # new work after the wait: fine
    return message.body


def check(*args):
    out = io.StringIO()
    try:
        call_command("rivet_check_replay", *args, stdout=out)
    except CommandError as error:
        return error.returncode, out.getvalue()
    return 0, out.getvalue()


@pytest.fixture
def in_flight():
    with registry.register_temporarily(evolving_v1):
        handle = workflows.start("evolving", {}, id="evo-1")
        assert run_until_idle(handle) == "sleeping"
        done = workflows.start("greet", {"name": "x"}, id="finished")
        run_until_idle(done)
    return handle


def test_check_replay_exits_1_on_a_renamed_step_and_0_otherwise(in_flight):
    with registry.register_temporarily(evolving_v1):
        assert check() == (0, "Checked 1 in-flight workflow(s): 0 would diverge.\n")
        assert in_flight.check_replay() is None
    with registry.register_temporarily(evolving_extended):
        assert check()[0] == 0
    with registry.register_temporarily(evolving_renamed):
        status, output = check()
        found = in_flight.check_replay()
    assert status == 1
    assert "evo-1 (evolving): diverges at 'charge' [history_diverged]" in output
    assert "1 would diverge" in output
    assert found.location == "charge" and found.code == "history_diverged"
    # Nothing ran and nothing was written: the workflow waits as it did.
    assert [e.location for e in in_flight.history()] == ["charge", "wait"]
    assert Workflow.objects.get(pk="evo-1").run_count == 1


def test_check_replay_exits_with_status_1_from_the_command_line(in_flight, capsys):
    with registry.register_temporarily(evolving_renamed):
        with pytest.raises(SystemExit) as exited:
            execute_from_command_line(["manage.py", "rivet_check_replay"])
    assert exited.value.code == 1
    streams = capsys.readouterr()
    assert "evo-1 (evolving): diverges at 'charge'" in streams.out
    assert "1 in-flight workflow(s) would diverge on this code" in streams.err


def test_check_replay_reports_a_workflow_no_deployed_code_knows(in_flight):
    status, output = check("--name", "evolving")
    assert status == 1
    assert "[not_found]" in output and "Unknown workflow 'evolving'" in output
    assert check("--name", "greet") == (
        0,
        "Checked 0 in-flight workflow(s): 0 would diverge.\n",
    )


def run(*args):
    out = io.StringIO()
    call_command("rivet_workflows", *args, stdout=out)
    return out.getvalue()


def test_rivet_workflows_lists_cancels_resumes_and_recovers_in_bulk():
    with freeze_time() as frozen:
        old = [workflows.start("approval", {}, id=f"old-{i}") for i in range(2)]
        frozen.advance(3 * 86400)
        new = workflows.start("approval", {}, id="new")
        failed = workflows.start("recoverable", {}, id="fails")
        for handle in (*old, new, failed):
            run_until_idle(handle)
        listing = run("list", "--name", "approval")
        assert [line.split("\t")[0] for line in listing.splitlines()[:-1]] == [
            "new",
            "old-1",
            "old-0",
        ]
        assert "waits=approve" in listing and listing.endswith("3 workflow(s)\n")

        dry = run("cancel", "--name", "approval", "--older-than", "2d", "--dry-run")
        assert dry.count("would cancel old-") == 2 and "would cancel: 2" in dry
        assert {h.status for h in old} == {"sleeping"}

        done = run("cancel", "--name", "approval", "--older-than", "2d")
        assert "cancelled old-0" in done and "cancelled old-1" in done
        assert done.endswith("cancelled: 2, skipped: 0, errors: 0\n")
        assert {h.status for h in old} == {"cancelled"} and new.status == "sleeping"

        resumed = run("resume", "--name", "approval")
        assert resumed.endswith("resumed: 2, skipped: 0, errors: 0\n")
        assert {run_until_idle(h) for h in old} == {"sleeping"}

        StepRow.objects.create(workflow_id="fails", step="allow")
        assert "recovered fails" in run("recover")
        assert run_until_idle(failed) == "completed"

    with pytest.raises(CommandError, match="recover acts on failed"):
        run("recover", "--status", "sleeping")
    with pytest.raises(CommandError, match="Cannot read the duration"):
        run("list", "--older-than", "soon")
