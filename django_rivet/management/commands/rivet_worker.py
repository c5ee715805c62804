"""``manage.py rivet_worker``: run due work in-process, without Celery."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from typing import Any

from django.core.management.base import CommandParser

from django_rivet import dispatch
from django_rivet.management.base import RivetCommand, bounded_float
from django_rivet.upkeep.worker import Worker
from django_rivet.workflows import live


class Command(RivetCommand):
    """Fire schedules and cron, deliver queues and sweep, in a loop."""

    help = (
        "Run an in-process worker: fire due schedules and cron runs, deliver "
        "queue messages, run due workflows and sweep every SWEEP_INTERVAL "
        "seconds, until Ctrl-C. For development when no Celery worker runs."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        """Add --once and --poll-interval."""
        parser.add_argument(
            "--once",
            action="store_true",
            help="Run what is due and one sweep, then exit.",
        )
        parser.add_argument(
            "--poll-interval",
            type=bounded_float(0, 3600),
            default=1.0,
            help="Longest sleep between checks for work made by other processes "
            "(seconds, default 1).",
        )

    def execute(self, *args: Any, **options: Any) -> Any:
        """Choose the in-process dispatch, then run the checks and the loop."""
        # This process fires everything itself: wake its own loop, never send
        # Celery tasks (a project running it usually has no broker). Chosen
        # before the system checks run, so rivet.W004 ("nothing dispatches
        # due work") does not warn about the worker that does.
        dispatch.use("worker")
        return super().execute(*args, **options)

    def handle(self, *args: Any, **options: Any) -> None:
        """Run the loop until interrupted (or once)."""
        if options["verbosity"] >= 1:
            show_work_log()
        worker = Worker(poll_interval=options["poll_interval"])
        if options["once"]:
            ran = worker.run_once()
            self.stdout.write(f"ran {ran} due item(s)")
            return
        stop = threading.Event()

        def request_stop(signum: int, frame: Any) -> None:
            stop.set()
            dispatch.notify_worker()
            live.end_all()  # a run waiting in its live window yields now

        signal.signal(signal.SIGTERM, request_stop)
        signal.signal(signal.SIGINT, request_stop)
        self.stdout.write("rivet worker running; Ctrl-C to stop")
        worker.run(stop)


def show_work_log() -> None:
    """Print django-rivet's INFO lines (one per piece of work) on stderr.

    Only when the project configured no handler that would receive them:
    Django's default logging shows no INFO line of third-party loggers, and a
    worker that runs work silently looks stuck. A project with its own
    ``LOGGING`` keeps full control.
    """
    logger = logging.getLogger("django_rivet")
    if logger.hasHandlers():
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s")
    )
    logger.addHandler(handler)
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)
