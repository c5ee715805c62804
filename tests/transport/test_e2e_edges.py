"""The edges through a real daphne process (issues 12 and 17).

Adversarial bodies, oversized uploads, close codes and oversized frames go
over real sockets to ``daphne tests.support.asgi:application`` on loopback; nothing
is mocked. Bounds on time are generous (a loaded machine), and far below
what the bugs cost (a 1 MiB colliding-keys body took 56 s).
"""

import asyncio
import json
import socket
import threading
import time

import cbor2
import httpx
import pytest
from asgiref.sync import sync_to_async
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed

from django_rivet.client import Client
from django_rivet.exceptions import RequestTooLarge
from django_rivet.models import Connection
from tests.support.polling import await_for
from tests.support.servers import (
    wait_until_no_connection_rows,
)

pytestmark = [pytest.mark.servers, pytest.mark.django_db(transaction=True)]

MERSENNE_61 = 2**61 - 1


def bytes_written(proc):
    """What the process has written so far (temporary files included)."""
    with open(f"/proc/{proc.pid}/io") as io:
        return int(next(line for line in io if line.startswith("wchar:")).split()[1])


@pytest.fixture(autouse=True)
async def _no_connection_rows_left():
    yield
    # Let the server's on_disconnect finish before the database is flushed.
    await wait_until_no_connection_rows()


def colliding_body(size):
    """``{"args": [map]}`` whose bignum keys all hash to 0, ``size`` bytes."""
    items, total, n = [], 0, 0
    while total < size - 64:
        item = cbor2.dumps((2**8 + n) * MERSENNE_61) + b"\x00"
        items.append(item)
        total += len(item)
        n += 1
    inner = b"\xba" + n.to_bytes(4, "big") + b"".join(items)
    return b"\xa1" + cbor2.dumps("args") + b"\x81" + inner


# -- issue 17, finding 1 ------------------------------------------------------------
def test_a_colliding_keys_body_is_refused_at_once_and_others_keep_being_served(
    server,
):
    body = colliding_body(1 << 20)
    assert len(body) <= 1 << 20
    latencies, errors = [], []
    stop, serving = threading.Event(), threading.Event()

    def other_client():
        try:
            with httpx.Client(timeout=120) as http:
                while not stop.is_set():
                    started = time.monotonic()
                    response = http.post(
                        f"{server}/rivet/actors/counter/actions/increment?key=bystander",
                        json={"args": [1]},
                    )
                    assert response.status_code == 200, response.text
                    latencies.append(time.monotonic() - started)
                    serving.set()
        except BaseException as exc:  # reported by the test, not lost with the thread
            errors.append(exc)
            serving.set()

    bystander = threading.Thread(target=other_client)
    bystander.start()
    try:
        # The bystander is being served before the attack starts: on a fast
        # machine the three refusals take milliseconds, over before a client
        # started in a thread has sent anything.
        assert serving.wait(60), "the other client was never served"
        with httpx.Client(timeout=120) as http:
            for _ in range(3):
                started = time.monotonic()
                response = http.post(
                    f"{server}/rivet/actors/counter/actions/increment?key=adversary",
                    content=body,
                    headers={"Content-Type": "application/cbor"},
                )
                elapsed = time.monotonic() - started
                assert response.status_code == 400
                error = cbor2.loads(response.content)
                assert (error["group"], error["code"]) == ("request", "malformed")
                assert elapsed < 15, elapsed  # was 56 s, the event loop stalled
    finally:
        stop.set()
        bystander.join(60)
    assert not errors, errors
    assert max(latencies) < 10, max(latencies)


# -- issue 17, finding 10 -------------------------------------------------------------
def raw_post(url, headers, body_chunks):
    """Send a request over a plain socket; return (status, body) of the answer."""
    parts = httpx.URL(url)
    with socket.create_connection((parts.host, parts.port), timeout=120) as sock:
        head = f"POST {parts.raw_path.decode()} HTTP/1.1\r\nHost: {parts.host}\r\n"
        head += "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        sock.sendall((head + "\r\n").encode())
        for chunk in body_chunks:
            sock.sendall(chunk)
        answer = b""
        while b"\r\n\r\n" not in answer:
            answer += sock.recv(65536)
        head_bytes, _, rest = answer.partition(b"\r\n\r\n")
        length = int(
            next(
                line.split(b":", 1)[1]
                for line in head_bytes.split(b"\r\n")
                if line.lower().startswith(b"content-length")
            )
        )
        while len(rest) < length:
            rest += sock.recv(65536)
        return int(head_bytes.split()[1]), rest[:length]


def test_a_50_mb_upload_gets_a_coded_413_without_django_reading_it(server_process):
    server, proc = server_process
    url = f"{server}/rivet/actors/counter/actions/increment?key=upload"
    size = 50 * 1024 * 1024
    megabyte = b" " * (1024 * 1024)
    # daphne (twisted) spools every request body over 100 KB to a temporary
    # file before the application runs: one copy of the upload is written
    # whatever the application does. Django's handler, had it read the body,
    # would spool a second copy (over FILE_UPLOAD_MAX_MEMORY_SIZE).
    before = bytes_written(proc)
    status, body = raw_post(
        url,
        {"Content-Type": "application/json", "Content-Length": str(size)},
        [megabyte] * 50,
    )
    assert status == 413
    error = json.loads(body)
    assert (error["code"], error["metadata"]["size"]) == ("too_large", size)
    assert bytes_written(proc) - before < 1.5 * size
    # Chunked, without a length: bounded too.
    chunk = b"100000\r\n" + b" " * 0x100000 + b"\r\n"
    before = bytes_written(proc)
    status, body = raw_post(
        url,
        {"Content-Type": "application/json", "Transfer-Encoding": "chunked"},
        [chunk] * 50 + [b"0\r\n\r\n"],
    )
    assert (status, json.loads(body)["code"]) == (413, "too_large")
    assert bytes_written(proc) - before < 1.5 * size
    response = httpx.post(url, json={"args": [1]}, timeout=60)
    assert response.json() == {"output": 1}


# -- issue 12: close codes daphne can send ------------------------------------------
async def raw_socket(server, path, query="", protocols=("rivet",)):
    url = server.replace("http", "ws", 1) + f"/rivet/actors/{path}/connect{query}"
    return await ws_connect(url, subprotocols=list(protocols), max_size=None)


async def first_frame_and_close(ws):
    frames = []
    try:
        while True:
            frames.append(json.loads(await asyncio.wait_for(ws.recv(), 30)))
    except ConnectionClosed:
        pass
    return frames, ws.close_code


@pytest.mark.parametrize(
    ("path", "query", "code", "close"),
    [
        ("ledger", "?key=since&since=%C2%B2", "malformed", 4400),
        ("ledger", "?key=since&since=" + "1" * 5000, "malformed", 4400),
        ("nosuch", "?key=x", "not_found", 4400),
    ],
    ids=["superscript-since", "long-since", "unknown-actor"],
)
async def test_refusals_close_with_their_code(server, path, query, code, close):
    ws = await raw_socket(server, path, query)
    frames, close_code = await first_frame_and_close(ws)
    assert [f["code"] for f in frames] == [code]
    assert close_code == close


async def test_an_internal_error_while_connecting_closes_with_4500(server):
    params = "rivet_conn_params.eyJleHBsb2RlIjogdHJ1ZX0"  # {"explode": true}
    ws = await raw_socket(server, "ledger", "?key=boom", ("rivet", params))
    frames, close_code = await first_frame_and_close(ws)
    assert ([f["code"] for f in frames], close_code) == (["internal_error"], 4500)


async def test_an_oversized_frame_is_answered_then_closed_with_4413(server):
    ws = await raw_socket(server, "ledger", "?key=big")
    init = json.loads(await ws.recv())
    assert init["max_frame_bytes"] == 65536
    frame = {"type": "action", "id": 1, "name": "record", "args": ["x" * 70_000]}
    await ws.send(json.dumps(frame))
    frames, close_code = await first_frame_and_close(ws)
    assert [(f["code"], f.get("action_id")) for f in frames] == [("too_large", None)]
    assert close_code == 4413


async def test_an_expired_connection_closes_with_4410(server):
    ws = await raw_socket(server, "ledger", "?key=expired")
    json.loads(await ws.recv())
    await sync_to_async(Connection.objects.all().delete)()
    await ws.send(json.dumps({"type": "action", "id": 1, "name": "entries"}))
    frames, close_code = await first_frame_and_close(ws)
    assert [f["code"] for f in frames] == ["connection_expired"]
    assert close_code == 4410


# -- issue 12: the clients fail an oversized call at once ---------------------------
async def test_the_python_client_fails_an_oversized_call_at_once(server):
    async with Client(server + "/rivet") as client:
        conn = await client.actor("ledger", "client-big").connect()
        try:
            assert conn.max_frame_bytes == 65536
            with pytest.raises(RequestTooLarge) as refused:
                await conn.call("record", "x" * 70_000)  # checked before sending
            assert refused.value.metadata["limit"] == 65536
            # A client that does not know the limit learns it from the server:
            # the call fails with the server's error as the socket closes.
            conn.max_frame_bytes = 10**9
            started = time.monotonic()
            with pytest.raises(RequestTooLarge) as answered:
                await conn.call("record", "x" * 70_000, timeout=60)
            assert time.monotonic() - started < 20  # not the call timeout
            assert answered.value.metadata["limit"] == 65536
            assert answered.value.metadata["size"] > 70_000
            assert conn.errors[-1].code == "too_large"
            # 4413 is not final: the connection comes back and calls work.
            await await_for(lambda: conn.status == "connected", what="the reconnect")
            assert await conn.call("record", "small") == 1
        finally:
            await conn.close()
