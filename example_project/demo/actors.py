"""Actors of the example project."""

from django_rivet import Actor, UserError, action


class Counter(Actor):
    """A shared counter: every connected browser sees each change."""

    initial_state = {"count": 0}

    @action
    def increment(self, ctx, by: int = 1) -> int:
        if not -1000 <= by <= 1000:
            raise UserError("That is too much at once", code="too_much")
        ctx.state["count"] += by
        ctx.broadcast("changed", ctx.state["count"])
        return ctx.state["count"]

    @action
    def count(self, ctx) -> int:
        return ctx.state["count"]


# -- scheduling demo: alarms and cron, fired by the worker ------------------------
class Clock(Actor):
    """Alarms (``ctx.schedule``) and recurring jobs (``ctx.cron``).

    ``scripts/run.sh`` creates it at start-up (``example_setup``); browsers
    may call and watch it but never create one: each new key would set up
    two more recurring jobs, forever (``create_from_clients = False``). It
    ticks every 10 seconds,
    chimes at the top of every minute (a cron expression), rings a welcome
    alarm 5 seconds after it is created, and ``remind(seconds, text)`` sets
    more alarms. Every firing is printed on the console and broadcast to
    connected browsers (events ``tick``, ``chime``, ``alarm``).
    """

    initial_state = {"ticks": 0, "chimes": 0, "alarms": []}
    create_from_clients = False

    def on_create(self, ctx, input):
        # Once, when server code creates the actor: cron jobs are durable, so
        # they need no setting again when a process loads the actor.
        ctx.schedule.after(5, "ring", "Welcome! This alarm was set 5 s ago.")
        ctx.cron.every("tick", 10, "tick")
        ctx.cron.set("chime", "* * * * *", "chime", tz="UTC")

    @action
    def tick(self, ctx) -> int:
        ctx.state["ticks"] += 1
        _announce(ctx, "tick", f"tick #{ctx.state['ticks']}")
        return ctx.state["ticks"]

    @action
    def chime(self, ctx) -> int:
        ctx.state["chimes"] += 1
        _announce(ctx, "chime", f"chime #{ctx.state['chimes']} (cron * * * * *)")
        return ctx.state["chimes"]

    @action
    def ring(self, ctx, text: str) -> str:
        ctx.state["alarms"] = (ctx.state["alarms"] + [text])[-20:]
        _announce(ctx, "alarm", f"alarm: {text}")
        return text

    @action
    def remind(self, ctx, seconds: float, text: str) -> str:
        if not 0 <= seconds <= 86400:
            raise UserError("Pick a delay between 0 and 86400 seconds", code="delay")
        if len(ctx.schedule.list()) >= 20:
            raise UserError("Twenty alarms are pending already", code="alarms")
        return ctx.schedule.after(seconds, "ring", text[:200])

    @action
    def status(self, ctx) -> dict:
        return {
            "ticks": ctx.state["ticks"],
            "chimes": ctx.state["chimes"],
            "alarms": ctx.state["alarms"],
            "pending": ctx.schedule.list(),
            "jobs": ctx.cron.list(),
            "history": ctx.cron.history("tick", limit=5),
        }


def _announce(ctx, event: str, text: str) -> None:
    info = ctx.fire_info or {}
    late = ""
    if info.get("scheduled_at") and info.get("fired_at"):
        lateness = (info["fired_at"] - info["scheduled_at"]).total_seconds()
        late = f" ({lateness * 1000:.0f} ms after its time)"
    # The demo's console is its UI when no browser is open.
    print(f"[clock] {text}{late}", flush=True)
    ctx.broadcast(event, text, info.get("scheduled_at"))
