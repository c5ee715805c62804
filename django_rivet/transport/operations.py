"""The operations both protocols' HTTP routes add to the runtime's.

Everything that runs actor code goes through the invocation spine
(:func:`~django_rivet.actors.lanes.ainvoke`); the HTTP routes of both
flavours use the runtime's operations (``CallAction``, ``EnsureActor``, the
queue's) plus these two, and the same CSRF rule for raw requests. Each
operation states what ``on_auth`` is asked (``auth``); the spine runs the
check before any actor code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.http.response import HttpResponseBase
from django.middleware.csrf import CsrfViewMiddleware

from ..actors.calls import AuthRequest
from ..actors.operations import ACTOR_AUTH
from ..exceptions import ActionNotFound
from ..models import Actor as ActorRow

if TYPE_CHECKING:
    from ..actors.definition import Actor
    from ..actors.invocation import Invocation

__all__ = ["Describe", "HandleRequest", "csrf_rejection"]


@dataclass(slots=True)
class Describe:
    """Return the actor's row as the routes describe it (after ``on_auth``).

    Run with a ``get``/``get_or_create``/``create`` reference, it is also how
    the RivetKit REST API resolves and creates actors: one invocation,
    ``on_auth`` (``info.kind == "actor"``) included.
    """

    label: str | None = "describe"
    auth = ACTOR_AUTH

    def prepare(self, definition: type[Actor]) -> None:
        """Nothing to check."""

    def run(self, invocation: Invocation) -> dict[str, Any]:
        """Return ``{actor_id, name, key, created_at, created}``."""
        created_at = (
            ActorRow.objects.filter(pk=invocation.actor_id)
            .values_list("created_at", flat=True)
            .get()
        )
        return {
            "actor_id": invocation.actor_id,
            "name": invocation.definition.name,
            "key": tuple(invocation.key),
            "created_at": created_at,
            "created": invocation.created,
        }


@dataclass(slots=True)
class HandleRequest:
    """Pass an ``HttpRequest`` to ``on_request`` (after ``on_auth``).

    The views check CSRF before invoking (:func:`csrf_rejection`).
    """

    request: HttpRequest
    label: str | None = "request"
    auth = AuthRequest("request")

    def prepare(self, definition: type[Actor]) -> None:
        """Refuse actors without ``on_request`` before any I/O."""
        if not definition.overrides("on_request"):
            raise ActionNotFound("The actor does not handle raw requests")

    def run(self, invocation: Invocation) -> HttpResponseBase:
        """Let the actor answer."""
        response = invocation.call_hook("on_request", self.request)
        if not isinstance(response, HttpResponseBase):
            raise TypeError(
                f"on_request returned {type(response).__name__}, not an HttpResponse"
            )
        return response


async def csrf_rejection(
    request: HttpRequest, definition: type[Actor]
) -> HttpResponseBase | None:
    """Run Django's CSRF check unless the actor class opted out (``csrf_exempt``).

    Checked before the invocation, so a forged request creates no actor and
    runs no actor code.
    """
    if getattr(definition, "csrf_exempt", False):
        return None
    if "django.middleware.csrf.CsrfViewMiddleware" not in settings.MIDDLEWARE:
        return None
    middleware = CsrfViewMiddleware(lambda r: HttpResponse())
    # The check may read the session (CSRF_USE_SESSIONS): sync code.
    return await sync_to_async(middleware.process_view)(
        request, _protected_view, (), {}
    )


def _protected_view(request: HttpRequest) -> HttpResponse:  # pragma: no cover
    """Stand-in view for the CSRF check (it is not ``csrf_exempt``)."""
    raise NotImplementedError
