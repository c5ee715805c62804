import enum
from dataclasses import dataclass, field
from decimal import Decimal

from django_rivet import Actor, action


class Bench(Actor):
    """Trivial actions for the invocation benchmarks."""

    initial_state = {"n": 0}

    @action
    def noop(self, ctx):
        return 1

    @action
    def increment(self, ctx):
        ctx.state["n"] += 1
        return ctx.state["n"]

    @action
    def shout(self, ctx, sent_at):
        """Broadcast one event to every subscribed connection (P7)."""
        ctx.broadcast("tick", sent_at)
        return None

    @action
    def burst(self, ctx, count):
        """Broadcast ``count`` small events in one invocation (P15)."""
        for index in range(count):
            ctx.broadcast("burst", index)
        return count


class Hot(Actor):
    """One actor many sockets call and watch (P12, P13)."""

    name = "hot"
    initial_state = {"n": 0}

    @action
    def increment(self, ctx):
        ctx.state["n"] += 1
        ctx.broadcast("changed", ctx.state["n"])
        return ctx.state["n"]

    @action(readonly=True)
    def get(self, ctx):
        """P17's read: no lock, beside the increments."""
        return ctx.state["n"]

    @action(name="getLocked")
    def get_locked(self, ctx):
        """P17's baseline: the same read, taking the actor's lock."""
        return ctx.state["n"]


class Idle(Actor):
    """A small actor that only gets loaded (P9's memory per cached actor)."""

    initial_state = {"n": 0}

    @action
    def touch(self, ctx):
        return ctx.state["n"]


class ScheduleBench(Actor):
    """Plans schedules and records how late each one ran (P8)."""

    name = "scheduleBench"
    initial_state = {"late": []}

    @action
    def plan(self, ctx, run_ats):
        from datetime import UTC, datetime

        for run_at in run_ats:
            ctx.schedule.at(datetime.fromtimestamp(run_at, UTC), "ring")
        return len(run_ats)

    @action
    def ring(self, ctx):
        import time

        due = ctx.fire_info["scheduled_at"].timestamp()
        ctx.state["late"].append(time.time() - due)

    @action
    def lateness(self, ctx):
        return ctx.state["late"]


class Big(Actor):
    """An actor holding a large state (P40): reads leave it unchanged."""

    name = "big"
    initial_state = {"items": {}}

    @action
    def fill(self, ctx, count):
        ctx.state["items"] = {str(index): index for index in range(count)}
        return len(ctx.state["items"])

    @action
    def read(self, ctx, key):
        return ctx.state["items"].get(key)

    @action
    def write(self, ctx, key):
        ctx.state["items"][key] = ctx.state["items"].get(key, 0) + 1


class Asker(Actor):
    """Asks a workflow from inside its action (P41): refused, never held."""

    name = "asker"

    @action
    def ask(self, ctx, workflow_id, timeout):
        from django_rivet.workflows import WorkflowCannotWait

        try:
            return ctx.workflows.get(workflow_id).request("question", 1, timeout)
        except (WorkflowCannotWait, TimeoutError) as error:
            return type(error).__name__


# -- typed values (P1T) -------------------------------------------------------------
class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclass
class Item:
    sku: str
    price: Decimal
    qty: int
    color: Color


@dataclass
class Receipt:
    sku: str
    total: Decimal
    count: int


class TypedBench(Actor):
    """One action typed (a dataclass with a Decimal and an Enum in and out),
    and the same work untyped, on the same state."""

    name = "typedBench"
    initial_state = {"n": 0}

    @action
    def add(self, ctx, item: Item) -> Receipt:
        ctx.state["n"] += item.qty
        return Receipt(item.sku, item.price * item.qty, ctx.state["n"])

    @action
    def add_plain(self, ctx, item: dict) -> dict:
        ctx.state["n"] += item["qty"]
        total = Decimal(item["price"]) * item["qty"]
        return {"sku": item["sku"], "total": str(total), "count": ctx.state["n"]}


@dataclass
class Tally:
    n: int = 0
    history: list[int] = field(default_factory=list)


class MigratingBench(Actor):
    """A typed state at version 2; version 1 stored ``{"count": n}``."""

    name = "migratingBench"
    state_type = Tally
    state_version = 2

    def migrate_state(self, ctx, state, from_version):
        return {"n": state["count"], "history": [state["count"]]}

    @action
    def bump(self, ctx) -> int:
        ctx.state.n += 1
        return ctx.state.n
