"""HTTP side of the remote client: :class:`Client` and :class:`ActorClient`."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

import httpx

from ..encoding import Encoding, decode_trusted, encode
from ..exceptions import error_from_dict
from .base import (
    MEDIA_TYPES,
    Conversions,
    HTTPError,
    _key_list,
)
from .connection import AsyncConnection, Connection

logger = logging.getLogger("django_rivet.transport")


class Client:
    """Talk to a django-rivet server at ``base_url`` (the mount prefix)."""

    def __init__(
        self,
        base_url: str,
        *,
        encoding: Encoding = "json",
        headers: dict[str, str] | None = None,
        timeout: float = 30.0,
        origin: str | None = None,
        http: httpx.Client | None = None,
        ahttp: httpx.AsyncClient | None = None,
    ) -> None:
        """Configure the client; ``http``/``ahttp`` replace the httpx clients."""
        self.base_url = base_url.rstrip("/")
        self.encoding: Encoding = encoding
        self.headers = dict(headers or {})
        self.timeout = timeout
        parts = urlsplit(self.base_url)
        # Browsers always send Origin; sending the server's own origin keeps
        # this client within the default ALLOWED_HOSTS rule.
        self.origin = origin or f"{parts.scheme}://{parts.netloc}"
        self._http: httpx.Client | None = http
        self._ahttp: httpx.AsyncClient | None = ahttp

    def actor(
        self,
        name: str | type,
        key: Any = None,
        *,
        actor_id: str | None = None,
        create: bool = True,
    ) -> ActorClient:
        """Address an actor by name and key (or ``actor_id``).

        ``name`` may be the ``Actor`` class itself: its actions' annotated
        arguments and results are then converted (docs/types.md).
        """
        definition: Any = None if isinstance(name, str) else name
        wire_name = name if isinstance(name, str) else str(definition.name)
        return ActorClient(
            self,
            wire_name,
            _key_list(key),
            actor_id=actor_id,
            create=create,
            conversions=Conversions(definition),
        )

    # -- HTTP plumbing --------------------------------------------------------------
    @property
    def http(self) -> httpx.Client:
        """The shared sync ``httpx.Client`` (created on first use)."""
        if self._http is None:
            self._http = httpx.Client(headers=self.headers, timeout=self.timeout)
        return self._http

    @property
    def ahttp(self) -> httpx.AsyncClient:
        """The shared ``httpx.AsyncClient`` (created on first use)."""
        if self._ahttp is None:
            self._ahttp = httpx.AsyncClient(headers=self.headers, timeout=self.timeout)
        return self._ahttp

    def _body(self, body: Any) -> tuple[bytes, dict[str, str]]:
        return encode(body, self.encoding), {
            "Content-Type": MEDIA_TYPES[self.encoding],
            "Accept": MEDIA_TYPES[self.encoding],
        }

    def _result(self, response: httpx.Response) -> Any:
        content_type = response.headers.get("content-type", "").split(";")[0]
        value: Any = None
        if content_type in ("application/json", "application/cbor") and (
            response.content
        ):
            value = decode_trusted(
                response.content, "cbor" if content_type.endswith("cbor") else "json"
            )
        if response.status_code >= 400:
            if isinstance(value, dict) and "group" in value and "code" in value:
                raise error_from_dict(value)
            raise HTTPError(
                f"HTTP {response.status_code} from {response.request.url}",
                metadata={"status": response.status_code},
            )
        return value

    def _request(
        self, method: str, path: str, params: list[tuple[str, str]], body: Any
    ) -> dict[str, Any]:
        """Return the arguments of ``httpx``'s ``request`` for one API request."""
        content, headers = self._body(body) if body is not None else (None, {})
        return {
            "method": method,
            "url": self.base_url + path,
            "params": tuple(params),
            "content": content,
            "headers": headers or {"Accept": MEDIA_TYPES[self.encoding]},
        }

    def request_json(
        self, method: str, path: str, params: list[tuple[str, str]], body: Any = None
    ) -> Any:
        """Send one API request and return the decoded answer."""
        request = self._request(method, path, params, body)
        return self._result(self.http.request(**request))

    async def arequest_json(
        self, method: str, path: str, params: list[tuple[str, str]], body: Any = None
    ) -> Any:
        """Async :meth:`request_json`."""
        request = self._request(method, path, params, body)
        return self._result(await self.ahttp.request(**request))

    def websocket_url(self, path: str, params: list[tuple[str, str]]) -> str:
        """Return the ``ws://`` / ``wss://`` URL of ``path``."""
        parts = urlsplit(self.base_url + path)
        scheme = {"http": "ws", "https": "wss"}.get(parts.scheme, parts.scheme)
        return urlunsplit((scheme, parts.netloc, parts.path, urlencode(params), ""))

    def close(self) -> None:
        """Close the sync HTTP client."""
        if self._http is not None:
            self._http.close()
            self._http = None

    async def aclose(self) -> None:
        """Close both HTTP clients."""
        self.close()
        if self._ahttp is not None:
            await self._ahttp.aclose()
            self._ahttp = None

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class ActorClient:
    """One actor on the server: HTTP calls and WebSocket connections."""

    def __init__(
        self,
        client: Client,
        name: str,
        key: list[str],
        *,
        actor_id: str | None = None,
        create: bool = True,
        conversions: Conversions | None = None,
    ) -> None:
        self.client = client
        self.name = name
        self.key = key
        self.actor_id = actor_id
        self.create_missing = create
        self.conversions = conversions or Conversions()

    def _params(self, create: bool | None = None) -> list[tuple[str, str]]:
        if self.actor_id is not None:
            return [("actor_id", self.actor_id)]
        params = [("key", part) for part in self.key]
        if create is False:
            params.append(("create", "false"))
        return params

    @property
    def _path(self) -> str:
        return f"/actors/{self.name}"

    def connect_url(self, params: list[tuple[str, str]]) -> str:
        """Return the URL of this actor's WebSocket route, ``params`` appended."""
        query = self._params(self.create_missing) + params
        return self.client.websocket_url(f"{self._path}/connect", query)

    # -- actions --------------------------------------------------------------------
    def call(self, action: str, *args: Any) -> Any:
        """Run an action over HTTP and return its output."""
        result = self.client.request_json(
            "POST",
            f"{self._path}/actions/{action}",
            self._params(self.create_missing),
            {"args": self.conversions.args(action, args)},
        )
        return self.conversions.output(action, result["output"])

    async def acall(self, action: str, *args: Any) -> Any:
        """Async :meth:`call`."""
        result = await self.client.arequest_json(
            "POST",
            f"{self._path}/actions/{action}",
            self._params(self.create_missing),
            {"args": self.conversions.args(action, args)},
        )
        return self.conversions.output(action, result["output"])

    # -- lifecycle ------------------------------------------------------------------
    def get_or_create(self, input: Any = None) -> dict[str, Any]:
        """Create the actor if needed: ``{actor_id, created}``."""
        return self.client.request_json(  # type: ignore[no-any-return]
            "PUT", self._path, self._params(), {"input": input}
        )

    async def aget_or_create(self, input: Any = None) -> dict[str, Any]:
        """Async :meth:`get_or_create`."""
        return await self.client.arequest_json(  # type: ignore[no-any-return]
            "PUT", self._path, self._params(), {"input": input}
        )

    def create(self, input: Any = None) -> str:
        """Create the actor (``actor/already_exists`` if it exists); its id."""
        result = self.client.request_json(
            "POST", self._path, self._params(), {"input": input}
        )
        return str(result["actor_id"])

    async def acreate(self, input: Any = None) -> str:
        """Async :meth:`create`."""
        result = await self.client.arequest_json(
            "POST", self._path, self._params(), {"input": input}
        )
        return str(result["actor_id"])

    def get(self) -> dict[str, Any]:
        """Describe the actor: ``{actor_id, name, key, created_at}``."""
        return self.client.request_json(  # type: ignore[no-any-return]
            "GET", self._path, self._params()
        )

    async def aget(self) -> dict[str, Any]:
        """Async :meth:`get`."""
        return await self.client.arequest_json(  # type: ignore[no-any-return]
            "GET", self._path, self._params()
        )

    def send(
        self, queue: str, body: Any, *, wait: bool = False, timeout: float | None = None
    ) -> dict[str, Any]:
        """Send a message to the actor's queue: ``{status, response?}``."""
        return self.client.request_json(  # type: ignore[no-any-return]
            "POST",
            f"{self._path}/queue/{queue}",
            self._params(),
            {"body": body, "wait": wait, "timeout": timeout},
        )

    async def asend(
        self, queue: str, body: Any, *, wait: bool = False, timeout: float | None = None
    ) -> dict[str, Any]:
        """Async :meth:`send`."""
        return await self.client.arequest_json(  # type: ignore[no-any-return]
            "POST",
            f"{self._path}/queue/{queue}",
            self._params(),
            {"body": body, "wait": wait, "timeout": timeout},
        )

    def request(self, method: str, path: str = "", **kwargs: Any) -> httpx.Response:
        """Send a raw HTTP request to the actor's ``on_request``."""
        return self.client.http.request(
            method,
            f"{self.client.base_url}{self._path}/request/{path.lstrip('/')}",
            params=tuple(self._params(self.create_missing)),
            **kwargs,
        )

    async def arequest(
        self, method: str, path: str = "", **kwargs: Any
    ) -> httpx.Response:
        """Async :meth:`request`."""
        return await self.client.ahttp.request(
            method,
            f"{self.client.base_url}{self._path}/request/{path.lstrip('/')}",
            params=tuple(self._params(self.create_missing)),
            **kwargs,
        )

    # -- WebSocket ------------------------------------------------------------------
    async def connect(
        self,
        params: Any = None,
        *,
        since: int | None = None,
        subscribe: Iterable[str] | str | None = None,
        reconnect: bool = True,
    ) -> AsyncConnection:
        """Open a WebSocket connection; returns once ``init`` arrived.

        ``since`` replays events after that seq; ``subscribe="*"`` asks for
        every event without subscribing one by one.
        """
        conn = AsyncConnection(
            self, params, since=since, subscribe=subscribe, reconnect=reconnect
        )
        await conn.open()
        return conn

    def connect_sync(
        self,
        params: Any = None,
        *,
        since: int | None = None,
        subscribe: Iterable[str] | str | None = None,
        reconnect: bool = True,
    ) -> Connection:
        """Sync :meth:`connect`: handlers run in the connection's own thread."""
        return Connection(
            self, params, since=since, subscribe=subscribe, reconnect=reconnect
        )

    def __repr__(self) -> str:
        return f"<ActorClient {self.name}{self.key}>"
