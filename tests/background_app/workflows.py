import time

from django_rivet.workflows import workflow
from tests.testapp.models import StepRow


@workflow(name="queueProbe")
async def queue_probe(ctx, input):
    """Take ``seconds`` of a worker's time; return when the work began and ended."""

    def work():
        began = time.time()
        time.sleep(input["seconds"])
        return [began, time.time()]

    return await ctx.step("work", work)


@workflow(name="everyMinute", cron="* * * * *", tz="UTC")
async def every_minute(ctx, tick):
    def mark():
        StepRow.objects.create(workflow_id=ctx.workflow_id, step="tick")
        return tick["scheduled_at"]

    return await ctx.step("mark", mark, transaction=True)
