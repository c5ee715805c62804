"""Application versions: ``RIVET["APP_VERSION"]`` and ``start(..., version=)``.

Opt-in. A workflow records the version it runs on (``Workflow.version``):
the one its start named, else the starting process's ``APP_VERSION``, else
none (""). A process with an ``APP_VERSION`` runs only workflows of that
version and unversioned ones -- the run claim checks it
(:meth:`~..models.sql.Dialect.lease_claim_sql`), and its worker does not
pick the others -- so a workflow of another version waits, ``pending``, for
a worker of its own (after a deploy: the old one drains its runs, the new
one takes the new runs). Without ``APP_VERSION`` (the default) a process
runs every workflow, as before versions existed. ``fork(..., version=)``
moves a run to another version.
"""

from __future__ import annotations

from django.db.models import Q

from ..conf import rivet_settings
from ..conf.kinds import MAX_VERSION_LENGTH, VERSION

__all__ = ["current", "resolved", "runs_here"]


def current() -> str:
    """Return this process's application version ("": none)."""
    return rivet_settings.APP_VERSION or ""


def resolved(version: str | None) -> str:
    """Return the version a new workflow records: ``version``, else this
    process's. Not a 1-64 character string is a ``ValueError``."""
    if version is None:
        return current()
    if not VERSION.accepts(version):
        raise ValueError(
            f"A workflow version is a string of 1 to {MAX_VERSION_LENGTH} characters"
        )
    return version


def runs_here() -> Q:
    """Return the condition "this process may run it" on ``Workflow`` rows."""
    mine = current()
    return Q() if not mine else Q(version__in=["", mine])
