"""BodyLimitMiddleware: oversized bodies to the actor API are refused unread.

Driven as an ASGI application (the suite's tests.support.asgi stack with the real
Django app behind it); the receive channel counts what was read. The same
refusal through a daphne process is in test_e2e_edges.py.
"""

import asyncio
import json

import pytest
from django.test import override_settings

from tests.support.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)

ACTION = "/rivet/actors/counter/actions/increment"


class Upload:
    """The server side of one request: hands out body chunks and counts them."""

    def __init__(self, chunks):
        self.chunks = list(chunks)
        self.read = 0
        self.sent = []

    async def receive(self):
        if not self.chunks:
            # The client waits for the answer (Django listens for a disconnect
            # while the view runs).
            await asyncio.Event().wait()
        chunk = self.chunks.pop(0)
        self.read += len(chunk)
        return {"type": "http.request", "body": chunk, "more_body": bool(self.chunks)}

    async def send(self, message):
        self.sent.append(message)

    @property
    def status(self):
        return self.sent[0]["status"]

    @property
    def body(self):
        return b"".join(m.get("body", b"") for m in self.sent[1:])


def scope(path, headers, query=b"key=limits"):
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query,
        "root_path": "",
        "headers": [(b"host", b"testserver"), *headers],
        "client": ("127.0.0.1", 1),
        "server": ("testserver", 80),
    }


async def post(path, chunks, *, length=True, content_type=b"application/json"):
    upload = Upload(chunks)
    headers = [(b"content-type", content_type)]
    if length:
        headers.append((b"content-length", str(sum(map(len, chunks))).encode()))
    await application(scope(path, headers), upload.receive, upload.send)
    return upload


@override_settings(RIVET={"MAX_HTTP_BODY_BYTES": 1000})
async def test_a_declared_oversized_body_is_refused_without_reading_it():
    upload = await post(ACTION, [b"x" * 4096] * 50)
    assert upload.status == 413
    assert upload.read == 0
    error = json.loads(upload.body)
    assert (error["group"], error["code"]) == ("request", "too_large")
    assert error["metadata"] == {"size": 4096 * 50, "limit": 1000}


@override_settings(RIVET={"MAX_HTTP_BODY_BYTES": 1000})
async def test_a_chunked_body_is_read_only_up_to_the_limit():
    upload = await post(ACTION, [b"x" * 400] * 100, length=False)
    assert upload.status == 413
    assert upload.read == 1200  # three chunks, not a hundred
    assert json.loads(upload.body)["code"] == "too_large"


@override_settings(RIVET={"MAX_HTTP_BODY_BYTES": 1000})
async def test_bodies_within_the_limit_reach_the_view_chunked_or_not():
    body = json.dumps({"args": [2]}).encode()
    for length in (True, False):
        upload = await post(ACTION, [body[:5], body[5:]], length=length)
        assert upload.status == 200, upload.body
    assert json.loads(upload.body) == {"output": 4}


@override_settings(RIVET={"MAX_HTTP_BODY_BYTES": 1000})
async def test_cbor_requests_get_a_cbor_refusal():
    import cbor2

    upload = await post(ACTION, [b"\x00" * 2000], content_type=b"application/cbor")
    assert upload.status == 413
    assert cbor2.loads(upload.body)["code"] == "too_large"


@override_settings(RIVET={"MAX_HTTP_BODY_BYTES": 1000})
async def test_the_projects_other_routes_are_not_limited():
    upload = await post("/rivet-test/browser/", [b"x" * 5000], length=True)
    assert upload.read == 5000  # Django read it: the limit is the API's only
    assert upload.status != 413
