"""Upkeep: the loops that keep every part of the runtime moving and bounded.

- :mod:`.sweeper`: one pass that repairs what a broker or a crash lost, for
  schedules, cron, queues, workflows and connections alike, and purges what
  retention lets go (``rivet.sweep``, ``rivet_sweep``, the worker);
- :mod:`.worker`: the in-process loop (``rivet_worker``, the embedded
  worker) that runs every kind of due work and the sweeps;
- :mod:`.retention`: what is deleted, and when (the sweeper,
  ``rivet_purge``, the admin).

This package sits above the scheduler, the workflow runtime and the actor
runtime and lists their steps in code; none of them imports it. The Celery
tasks, the management commands, the admin and ``testing`` call it.
"""
