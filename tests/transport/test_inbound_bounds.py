"""What a hostile client costs a real server (issue 40): floods that never read.

One server process per kind for the module (daphne, the finding's stack,
and uvicorn), serving ``tests.support.asgi`` (the quickstart's asgi), the
server's memory read from ``/proc/<pid>/status``. The clients are raw
sockets that read the handshake's answer and nothing after it
(:class:`~tests.support.flood.DeafSocket`): a client library would read the
close frame and stop sending, which is how the older flood test passed
while daphne held everything a client sent.
"""

from __future__ import annotations

import json
import threading
import time

import cbor2
import httpx
import pytest

from django_rivet.models import Connection
from tests.support.flood import MIB, DeafSocket, Peak, frame
from tests.support.polling import wait_for

pytestmark = [pytest.mark.servers, pytest.mark.django_db(transaction=True)]

#: What one socket may make the server hold, whatever it sends.
BOUND_MIB = 32
# A frame just under MAX_INCOMING_MESSAGE_BYTES: each is an action call the
# server must decode (in a thread: over 16 KiB) and answer.
FLOOD = frame(
    json.dumps({"type": "action", "id": 1, "name": "ping", "args": ["x" * 60_000]})
)


@pytest.fixture(scope="module", params=["daphne", "uvicorn"])
def server_kind(request):
    return request.param


@pytest.fixture(autouse=True)
def _rows_gone_before_flush():
    yield
    # The server runs on_disconnect after sockets close: let it finish
    # before the test database is flushed.
    wait_for(lambda: not Connection.objects.exists(), 30, what="no Connection row left")


def ws_url(server, actor, key, query=""):
    url = server[0].replace("http://", "ws://")
    return f"{url}/rivet/actors/{actor}/connect?key={key}{query}"


def connections(actor, key):
    return Connection.objects.filter(actor__name=actor, actor__key_parts=[key]).count()


def admitted(server, actor, key, query=""):
    """A deaf socket the actor admitted (its row exists)."""
    sock = DeafSocket(ws_url(server, actor, key, query), ["rivet"])
    assert " 101 " in sock.status, sock.status
    wait_for(lambda: connections(actor, key), 15, what="the connection's row")
    sock.key = key
    return sock


def warm_up(server, key):
    # The server's first flood starts its decoding threads and imports:
    # a cost of the process, not of the socket measured next.
    sock = admitted(server, "counter", key)
    sock.push(FLOOD, 8 * MIB, stall=1, deadline=10)
    sock.close()
    wait_for(lambda: not connections("counter", key), 30, what="warm-up's end")


def flood(server, kind, socks, each, actor="counter"):
    """Flood ``socks`` at once until each is closed or stalls.

    Returns what each pushed, whether each was closed, and the server's peak
    growth (MiB) meanwhile.
    """
    pushed = [None] * len(socks)

    def run(index):
        pushed[index] = socks[index].push(FLOOD, each, stall=2)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(socks))]
    with Peak(server[1].pid) as peak:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if kind == "daphne":
            closed = [sock.closed(10) for sock in socks]
        else:
            # uvicorn ends the socket when its close handshake times out
            # (the client never answers): the consumer's side is what
            # django-rivet decides.
            keys = [sock.key for sock in socks]
            wait_for(
                lambda: not any(connections(actor, key) for key in keys),
                15,
                what="the consumers' close",
            )
            closed = [True] * len(socks)
    return pushed, closed, peak.growth_mib


def report(server_kind, what, pushed, closed, growth):
    sent = sum(p.sent for p in pushed) / MIB
    outcomes = ",".join(p.outcome for p in pushed)
    seconds = max(p.seconds for p in pushed)
    line = (
        f"{server_kind} {what}: pushed {sent:.0f} MiB in {seconds:.1f} s "
        f"({outcomes}), closed={closed}, server +{growth:.1f} MiB"
    )
    print("\n" + line)
    return line


def test_one_socket_flooding_without_reading_costs_little_and_is_closed(
    server_process, server_kind
):
    warm_up(server_process, "flood-warm")
    sock = admitted(server_process, "counter", "flood-one")
    pushed, closed, growth = flood(server_process, server_kind, [sock], 1200 * MIB)
    line = report(server_kind, "1 x 1200 MiB", pushed, closed, growth)
    sock.close()
    assert growth <= BOUND_MIB, line
    assert closed == [True], line


def test_four_sockets_flooding_cost_little_and_are_closed(server_process, server_kind):
    warm_up(server_process, "flood-warm")
    socks = [admitted(server_process, "counter", f"flood-four-{i}") for i in range(4)]
    pushed, closed, growth = flood(server_process, server_kind, socks, 150 * MIB)
    line = report(server_kind, "4 x 150 MiB", pushed, closed, growth)
    for sock in socks:
        sock.close()
    assert growth <= BOUND_MIB, line
    assert closed == [True] * 4, line


def test_a_flood_during_a_since_replay_costs_little_and_is_closed(
    server_process, server_kind
):
    warm_up(server_process, "flood-warm")
    key = "flood-replay"
    with httpx.Client(timeout=60) as client:
        for _ in range(4):  # 8 MB of logged events to replay
            response = client.post(
                f"{server_process[0]}/rivet/actors/tally/actions/blast",
                params={"key": key},
                json={"args": [20, 100_000, True]},
            )
            assert response.status_code == 200, response.text
    sock = admitted(server_process, "tally", key, "&since=0&subscribe=blast")
    pushed, closed, growth = flood(
        server_process, server_kind, [sock], 600 * MIB, actor="tally"
    )
    line = report(server_kind, "1 x 600 MiB during a replay", pushed, closed, growth)
    sock.close()
    assert growth <= BOUND_MIB, line
    assert closed == [True], line


# -- decoding that cannot stall the others ---------------------------------------------
def hostile_bodies():
    """1 MiB bodies that cost seconds to build for their size (issue 40)."""
    wrap = {"args": None}
    bodies = {}
    for name, items, encoding in [
        ("CBOR, 1M empty lists", [[]] * 1_000_000, "cbor"),
        ("CBOR, 349k {'':{}} maps", [{"": {}}] * 349_000, "cbor"),
        ("JSON, 349k []", [[]] * 349_000, "json"),
    ]:
        wrap["args"] = [items]
        data = (
            cbor2.dumps(wrap)
            if encoding == "cbor"
            else json.dumps(wrap, separators=(",", ":")).encode()
        )
        assert len(data) <= 1024 * 1024, (name, len(data))
        bodies[name] = (data, f"application/{encoding}")
    return bodies


def test_hostile_bodies_leave_other_clients_served(server_process, server_kind):
    if server_kind != "daphne":
        # Measured on uvicorn too: 62-122 ms, while three benign 1 MiB
        # bodies (one string each) cost its bystander 124-157 ms: receiving
        # a body, not decoding it, is what is left there.
        pytest.skip("the finding's stack is daphne")
    url = server_process[0]
    samples = []  # (start, seconds) of each of the bystander's calls
    stop = threading.Event()

    def bystander():
        with httpx.Client(timeout=30) as client:
            path = f"{url}/rivet/actors/counter/actions/getCount?key=bystander"
            while not stop.is_set():
                start = time.monotonic()
                assert client.post(path, json={"args": []}).status_code == 200
                samples.append((start, time.monotonic() - start))

    def attack(body, content_type, answers):
        with httpx.Client(timeout=60) as client:
            response = client.post(
                f"{url}/rivet/actors/counter/actions/increment?key=attack",
                content=body,
                headers={"Content-Type": content_type},
            )
            answer = (
                cbor2.loads(response.content)
                if response.headers["content-type"].startswith("application/cbor")
                else response.json()
            )
            answers.append((response.status_code, answer["code"], answer["message"]))

    runner = threading.Thread(target=bystander)
    runner.start()
    rounds: dict[str, list[float]] = {}  # per body, each round's worst call (ms)
    answers = []
    try:
        wait_for(lambda: len(samples) > 20, 30, what="the bystander's first calls")
        quiet = time.monotonic()
        wait_for(lambda: time.monotonic() > quiet + 2, 5, what="a quiet while")
        floor = max(1000 * s for t, s in samples if t >= quiet)
        for name, (body, content_type) in hostile_bodies().items():
            for _round in range(3):
                start = time.monotonic()
                threads = [
                    threading.Thread(target=attack, args=(body, content_type, answers))
                    for _ in range(3)
                ]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
                end = time.monotonic()
                # Calls that overlapped the attack, once the next one is done.
                count = len(samples)
                wait_for(lambda c=count: len(samples) > c, 30, what="a later call")
                during = [s for t, s in samples if t <= end and t + s >= start]
                rounds.setdefault(name, []).append(
                    max((1000 * s for s in during), default=0.0)
                )
    finally:
        stop.set()
        runner.join()
    # A body that stalls the server stalls every round; the machine's other
    # work (the suite's other lane) spikes one now and then (112-142 ms seen
    # with a 20 ms quiet floor): each body is judged by its best round.
    worst = {name: min(found) for name, found in rounds.items()}
    line = (
        f"{server_kind}: bystander's worst latency, best of "
        f"{len(next(iter(rounds.values())))} rounds: "
        + ", ".join(
            f"{name} {worst[name]:.0f} ms (rounds: "
            + " / ".join(f"{ms:.0f}" for ms in found)
            + ")"
            for name, found in rounds.items()
        )
        + f" (no attack: {floor:.0f} ms)"
    )
    print("\n" + line)
    assert {(status, code) for status, code, _ in answers} == {(400, "malformed")}
    assert all("at most 100000" in message for *_, message in answers), answers
    # The bound. On a machine so loaded that a bystander alone
    # already waits half of it, the attack may add at most that much.
    assert max(worst.values()) < (100 if floor < 50 else floor + 100), line
