"""Workflows of the test app; discovered by the workflow registry."""

import json
import os
import time
from datetime import timedelta

from django_rivet import actors, workflows
from django_rivet.models import Workflow
from django_rivet.workflows import CriticalError, Loop, RollbackError, workflow

from .models import StepRow


def record(workflow_id, step, transactional=False):
    StepRow.objects.create(
        workflow_id=workflow_id, step=step, transactional=transactional
    )


@workflow(name="greet")
async def greet(ctx, input):
    return await ctx.step("greet", lambda: f"hello {input['name']}")


@workflow(name="napper")
async def napper(ctx, input):
    await ctx.sleep("nap", input.get("seconds", 60))
    return await ctx.step("after", lambda: "rested")


@workflow(name="approval")
async def approval(ctx, input):
    message = await ctx.messages.next(
        "wait-approval", names=["approve"], timeout=input.get("timeout")
    )
    return {"approved_by": message.body["by"]}


@workflow(name="sleepThenApprove")
async def sleep_then_approve(ctx, input):
    """A sleep, then a message wait: the real-Celery round trip."""
    await ctx.sleep("pause", input.get("seconds", 2))
    message = await ctx.messages.next("wait-go", names=["go"])
    return await ctx.step("finish", lambda: {"go": message.body})


@workflow(name="flaky")
async def flaky(ctx, input):
    """One step failing its first ``fail`` attempts (each attempt leaves a row)."""

    def attempt():
        record(ctx.workflow_id, "attempt")
        count = StepRow.objects.filter(
            workflow_id=ctx.workflow_id, step="attempt"
        ).count()
        if count <= input["fail"]:
            raise RuntimeError(f"attempt {count} failed")
        return count

    return await ctx.step(
        "flaky",
        attempt,
        max_retries=input.get("max_retries", 5),
        retry_backoff_base=input.get("base", 1.0),
        retry_backoff_max=60,
    )


@workflow(name="doomed")
async def doomed(ctx, input):
    def boom():
        raise CriticalError("no way")

    await ctx.step("before", lambda: "fine")
    return await ctx.step("boom", boom)


@workflow(name="recoverable")
async def recoverable(ctx, input):
    """Fails until a row named ``allow`` exists (recover() then succeeds)."""

    def guarded():
        if not StepRow.objects.filter(
            workflow_id=ctx.workflow_id, step="allow"
        ).exists():
            raise CriticalError("not allowed yet")
        return "allowed"

    await ctx.step("first", lambda: record(ctx.workflow_id, "first"))
    return await ctx.step("guarded", guarded)


@workflow(name="rowWriter")
async def row_writer(ctx, input):
    """``steps`` steps writing one row each; even ones are ``transaction=True``."""
    count = input.get("steps", 20)
    delay = input.get("delay", 0)
    for index in range(count):
        transactional = index % 2 == 0

        def write(index=index, transactional=transactional):
            if delay:
                time.sleep(delay)  # a slow step, so a test can kill the worker
            record(ctx.workflow_id, f"s{index}", transactional)
            return index

        await ctx.step(f"s{index}", write, transaction=transactional)
    return count


@workflow(name="asyncWriter")
async def async_writer(ctx, input):
    """A transactional step whose function is async (ORM via the async API)."""

    async def write():
        await StepRow.objects.acreate(
            workflow_id=ctx.workflow_id, step="async", transactional=True
        )
        if input.get("fail"):
            raise RollbackError("undo the row")
        return "written"

    return await ctx.step("write", write, transaction=True, max_retries=1)


@workflow(name="callsActor")
async def calls_actor(ctx, input):
    """Steps calling an actor through the server-side client, sync and async."""

    def bump():
        return actors.get_or_create("counter", input["key"]).call("increment", 2)

    async def abump():
        handle = await actors.aget_or_create("counter", input["key"])
        return await handle.acall("increment", 3)

    first = await ctx.step("bump", bump)
    second = await ctx.step("abump", abump)
    return [first, second]


@workflow(name="refunds")
async def refunds(ctx, input):
    """A charge with a rollback handler, then a step that rolls everything back."""
    await ctx.rollback_checkpoint("start")

    def refund(rollback_ctx, output):
        record(ctx.workflow_id, f"refund:{output}")

    await ctx.step("charge", lambda: "ch_1", rollback=refund)

    def decline():
        raise RollbackError("declined")

    return await ctx.step("ship", decline)


@workflow(name="pruner")
async def pruner(ctx, input):
    """A loop of ``n`` steps pruning its history every 2 iterations."""

    async def body(ctx, index):
        await ctx.step("tick", lambda: index)
        if index + 1 >= input["n"]:
            return Loop.break_(index + 1)
        return Loop.continue_(index + 1)

    return await ctx.loop("ticks", body, state=0, history_prune_interval=2)


@workflow(name="bulky")
async def bulky(ctx, input):
    """``count`` ephemeral steps of ``size`` bytes, then one more, recorded."""
    blob = "b" * input["size"]
    for index in range(input["count"]):
        await ctx.step(f"e{index}", lambda: blob, ephemeral=True)

    def last():
        record(ctx.workflow_id, "last")
        return blob

    return len(await ctx.step("last", last))


@workflow(name="crashWriter")
async def crash_writer(ctx, input):
    """``steps`` slow steps writing a row each (even ones transactionally),
    each appending who ran it -- pid and lease token -- to the file named by
    ``RIVET_TEST_LEASE_LOG`` (the Celery crash test reads it back).
    """
    log = os.environ.get("RIVET_TEST_LEASE_LOG")
    for index in range(input["steps"]):
        transactional = index % 2 == 0

        def write(index=index, transactional=transactional):
            started = time.time()
            token = (
                Workflow.objects.filter(pk=ctx.workflow_id)
                .values_list("lease_token", flat=True)
                .first()
            )
            time.sleep(input.get("delay", 0))
            record(ctx.workflow_id, f"s{index}", transactional)
            if log:
                line = {
                    "workflow": ctx.workflow_id,
                    "step": index,
                    "pid": os.getpid(),
                    "token": token,
                    "start": started,
                    "end": time.time(),
                }
                with open(log, "a") as out:
                    out.write(json.dumps(line) + "\n")
            return index

        await ctx.step(f"s{index}", write, transaction=transactional)
    return input["steps"]


@workflow(name="messageRows")
async def message_rows(ctx, input):
    """Takes ``count`` "row" messages; each one's transactional step writes a row."""
    for index in range(input["count"]):
        message = await ctx.messages.next(f"m{index}", names=["row"])

        def write(index=index, body=message.body):
            record(ctx.workflow_id, f"m{index}:{body}", transactional=True)
            return index

        await ctx.step(f"s{index}", write, transaction=True)
    return input["count"]


@workflow(name="twoSteps")
async def two_steps(ctx, input):
    """Two steps, the second failing its first attempt (observability tests)."""
    first = await ctx.step("first", lambda: f"hello {input['name']}")

    def second():
        failed = StepRow.objects.filter(workflow_id=ctx.workflow_id, step="second")
        if not failed.exists():
            StepRow.objects.create(workflow_id=ctx.workflow_id, step="second")
            raise RuntimeError("first attempt fails")
        return first.upper()

    return await ctx.step("second", second, retry_backoff_base=0.01)


# -- children, replies, events, deadlines (issue 27) ---------------------------------
@workflow(name="waitsForChild")
async def waits_for_child(ctx, input):
    """Starts a ``napper`` child and waits for it (the real-Celery test too)."""
    rested = await ctx.child("nap", "napper", {"seconds": input.get("seconds", 60)})
    return {"child": rested}


@workflow(name="parentOfDoomed")
async def parent_of_doomed(ctx, input):
    """Waits for a child that fails; with ``guard``, inside a try_block."""
    if input.get("guard"):
        result = await ctx.try_block("guard", lambda c: c.child("boom", "doomed"))
        return {"ok": result.ok, "kind": result.failure.kind}
    return await ctx.child("boom", "doomed")


async def charge_then_wait_for_go(ctx):
    """Charge (with a refund as rollback), then wait for a "go" message."""
    await ctx.rollback_checkpoint("start")

    def refund(rollback_ctx, output):
        record(ctx.workflow_id, f"refund:{output}")

    await ctx.step("charge", lambda: "ch_1", rollback=refund)
    await ctx.messages.next("wait-go", names=["go"])


@workflow(name="refundingChild")
async def refunding_child(ctx, input):
    """Charges (with a refund as rollback), then waits for "go"."""
    await charge_then_wait_for_go(ctx)
    return "charged"


@workflow(name="family")
async def family(ctx, input):
    """A detached child, an attached one, then waits for the refunding child."""
    await ctx.start_child("audit", "approval", {}, detached=True)
    await ctx.start_child("helper", "approval", {})
    return await ctx.child("refunder", "refundingChild", {})


@workflow(name="asker")
async def asker(ctx, input):
    """Answers one "approve" request, then sleeps (so a later run replays)."""
    message = await ctx.messages.next("ask", names=["approve"])
    await ctx.reply("answer", message, {"ok": True, "by": message.body["by"]})
    await ctx.sleep("after", 60)
    return "done"


@workflow(name="silent")
async def silent(ctx, input):
    """Takes an "approve" message and ends without replying."""
    await ctx.messages.next("ask", names=["approve"])
    return "ignored"


@workflow(name="publisher")
async def publisher(ctx, input):
    """Publishes progress 1, waits for "next", publishes 2."""
    await ctx.set_event("progress", {"done": 1})
    await ctx.messages.next("wait", names=["next"])
    await ctx.set_event("progress", {"done": 2})
    return "published"


@workflow(name="deadlined", timeout=timedelta(minutes=5))
async def deadlined(ctx, input):
    """Charges (refund as rollback) and waits for "go": its deadline is 5 min."""
    await charge_then_wait_for_go(ctx)
    return "in time"


@workflow(name="divider")
async def divider(ctx, input):
    """A step dividing by zero, retried once."""

    def ratio():
        return 1 / input.get("by", 0)

    return await ctx.step("ratio", ratio, max_retries=input.get("retries", 0))


@workflow(name="asksAnother")
async def asks_another(ctx, input):
    """Asks another workflow (``asker``) for approval, in a step."""

    def ask():
        target = workflows.get(input["target"])
        return target.request("approve", {"by": ctx.workflow_id}, timeout=20)

    return await ctx.step("ask", ask, max_retries=0)


@workflow(name="listener")
async def listener(ctx, input):
    """Takes "ping" messages one at a time, forever; each wake-up replays them."""
    index = 0
    while True:
        await ctx.messages.next(f"ping-{index}", names=["ping"])
        index += 1


def may_read_stream(request, workflow_id, key):
    """Who may follow the ``streamer``'s streams over HTTP (the SSE tests)."""
    return key != "secret" and request.headers.get("X-Refuse") is None


@workflow(name="streamer", can_read_stream=may_read_stream)
async def streamer(ctx, input):
    """Write ``count`` values (0, 1, 2...) to stream ``n``, then close it.

    Before each group of ``every`` values a step sleeps ``delay`` seconds: a
    replay skips the sleeps it recorded, and a worker killed mid-stream
    leaves a history to resume from. ``hold``: wait for the message
    ``release`` before closing. ``pad``: write ``[index, "x" * pad]`` instead.
    """
    every, delay = input.get("every", 50), input.get("delay", 0)
    pad = "x" * input.get("pad", 0)
    for index in range(input["count"]):
        if delay and index % every == 0:
            await ctx.step(f"pause-{index}", lambda: time.sleep(delay))
        await ctx.write_stream("n", [index, pad] if pad else index)
    if input.get("hold"):
        await ctx.messages.next("hold", names=["release"])
    await ctx.close_stream("n")
    return input["count"]


@workflow(name="blockedBetweenSteps")
async def blocked_between_steps(ctx, input):
    """A charge, then a wait in the workflow's own code, then more work.

    The wait is not a step: the code creates the file ``input["entered"]``
    and polls for ``input["gate"]`` (files, so a test can hold a Celery
    worker's run there). ``then`` is what follows: ``step``, ``transaction``
    (a ``transaction=True`` step), ``child`` (a child started), or
    ``nothing``. With ``refund`` the charge has a rollback handler; every
    step and handler records a ``StepRow``.
    """
    if input.get("refund"):
        await ctx.rollback_checkpoint("start")

    def charge():
        record(ctx.workflow_id, "charge")
        return "ch_1"

    def refund(rollback_ctx, output):
        record(ctx.workflow_id, f"refund:{output}")

    await ctx.step("charge", charge, rollback=refund if input.get("refund") else None)
    if not os.path.exists(input["gate"]):
        open(input["entered"], "w").close()  # noqa: SIM115 - an empty marker
        deadline = time.monotonic() + 60
        while not os.path.exists(input["gate"]) and time.monotonic() < deadline:
            time.sleep(0.02)
    then = input.get("then", "step")
    if then == "child":
        await ctx.start_child("child", "greet", {"name": "late"})
    elif then != "nothing":
        await ctx.step(
            "after",
            lambda: record(ctx.workflow_id, "after"),
            transaction=then == "transaction",
        )
    return "done"


@workflow(name="tenantJob")
async def tenant_job(ctx, input):
    """One slow step that logs when it ran, for whom and where (``input["log"]``)."""

    def work():
        started = time.time()
        time.sleep(input.get("delay", 0.05))
        line = {"key": input["key"], "pid": os.getpid(), "start": started}
        line["end"] = time.time()
        with open(input["log"], "a") as out:
            out.write(json.dumps(line) + "\n")
        return input["key"]

    return await ctx.step("work", work)
