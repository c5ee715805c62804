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
