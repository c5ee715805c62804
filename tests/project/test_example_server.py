"""The example project as ``make run`` serves it, called as anyone could (issue 25).

``scripts/run.sh`` starts the example (daphne with the embedded worker,
SQLite) on a database of the module's own; the tests call it anonymously
over HTTP and WebSocket, the way a visitor -- or an attacker -- can.
"""

import asyncio
import json
import sqlite3
import uuid

import httpx
import pytest
from websockets.asyncio.client import connect as ws_connect

from tests.support.servers import example_server

pytestmark = [pytest.mark.servers]


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    """``(url, database path)`` of a running example project."""
    folder = tmp_path_factory.mktemp("example")
    with example_server(folder) as (url, _user, _password):
        yield url, folder / "example.sqlite3"


def cron_jobs(database):
    with sqlite3.connect(database) as connection:
        return connection.execute(
            "SELECT COUNT(*) FROM django_rivet_cronjob"
        ).fetchone()[0]


def test_twenty_anonymous_requests_create_no_cron_job(example):
    url, database = example
    before = cron_jobs(database)
    assert before > 0  # the clock's and the digest's, created at start-up
    answers = []
    with httpx.Client(base_url=url, timeout=30) as client:
        for n in range(10):
            key = f"visitor-{uuid.uuid4().hex[:8]}"
            clock = client.post(
                f"/rivet/actors/clock/actions/status?key={key}", json={"args": []}
            )
            digest = client.post(
                f"/rivet/actors/digest/actions/status?key={key}-{n}", json={"args": []}
            )
            answers += [clock, digest]
    assert len(answers) == 20
    assert {(r.status_code, r.json()["code"]) for r in answers} == {(403, "forbidden")}
    # The shared ones stay readable by anyone.
    with httpx.Client(base_url=url, timeout=30) as client:
        status = client.post("/rivet/actors/clock/actions/status", json={"args": []})
    assert status.status_code == 200
    assert cron_jobs(database) == before


async def test_an_anonymous_websocket_cannot_create_a_clock_either(example):
    url, database = example
    before = cron_jobs(database)
    ws_url = url.replace("http://", "ws://")
    async with ws_connect(
        f"{ws_url}/rivet/actors/clock/connect?key=ws-{uuid.uuid4().hex[:8]}",
        subprotocols=["rivet"],
        origin=url,
    ) as socket:
        frame = json.loads(await asyncio.wait_for(socket.recv(), 30))
    assert (frame["type"], frame["code"]) == ("error", "forbidden")
    assert cron_jobs(database) == before


def test_the_shared_counter_stays_readable_whatever_anyone_sends(example):
    url, _ = example
    huge = "-" + "9" * 4300  # Python's JSON still reads it; the domain does not
    with httpx.Client(base_url=url, timeout=30) as client:
        path = "/rivet/actors/counter/actions/increment?key=demo"
        for _ in range(2):
            response = client.post(
                path,
                content=f'{{"args": [{huge}]}}',
                headers={"Content-Type": "application/json"},
            )
            assert response.status_code == 400
            assert response.json()["metadata"]["path"] == "args[0]"
        count = client.post(
            "/rivet/actors/counter/actions/count?key=demo", json={"args": []}
        )
    assert count.status_code == 200
    assert isinstance(count.json()["output"], int)
