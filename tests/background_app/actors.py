from django_rivet import Actor, action, queue_handler

from .apps import record


class BackgroundFlaky(Actor):
    """Work that fails its first ``fail_until`` attempts (-1: always)."""

    name = "backgroundFlaky"
    initial_state = {"done": []}

    @action
    def plan(self, ctx, seconds: float, fail_until: int, max_retries=None):
        return ctx.schedule.after(seconds, "work", fail_until, max_retries=max_retries)

    @action
    def work(self, ctx, fail_until: int):
        info = ctx.fire_info
        record(
            {
                "key": list(ctx.key),
                "attempt": info["attempt"],
                "scheduled_at": info["scheduled_at"].timestamp(),
            }
        )
        ctx.state["done"].append(info["attempt"])
        if fail_until < 0 or info["attempt"] <= fail_until:
            raise RuntimeError(f"attempt {info['attempt']} fails")

    @queue_handler("jobs", max_retries=2)
    def on_job(self, ctx, body):
        record(
            {"key": list(ctx.key), "message": body, "attempt": ctx.fire_info["attempt"]}
        )
        raise RuntimeError(f"{body} fails")
