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
