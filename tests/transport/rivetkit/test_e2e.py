"""The unchanged official RivetKit client against Django, over real sockets.

``rivetkit`` is installed from npm at the pinned versions (the one
``@rivetkit/react`` pins and the newest 2.3.x; cached per machine, see
tests/support/rivetkit_node.py) and its node scripts in tests/rivetkit/ drive a
daphne serving tests.support.asgi, in each encoding. The scripts assert what the
client sees; these tests also check what the server stored.
"""

import os
import queue
import subprocess
import threading
import uuid

import pytest

from django_rivet.models import Actor as ActorRow
from django_rivet.models import Connection
from tests.support.polling import wait_for
from tests.support.rivetkit_node import (
    SCRIPTS,
    VERSIONS,
    install_rivetkit,
    last_json_line,
    restartable_daphne,
    run_node,
)

pytestmark = [pytest.mark.servers, pytest.mark.django_db(transaction=True)]

ENCODINGS = ["bare", "json", "cbor"]


@pytest.fixture(scope="module")
def server(django_db_setup, django_db_blocker):
    """One restartable daphne for the module, sharing the test database."""
    with django_db_blocker.unblock(), restartable_daphne() as server:
        yield server


@pytest.fixture(scope="session", params=VERSIONS)
def modules(request):
    """The node_modules folder of one pinned rivetkit version."""
    return install_rivetkit(request.param)


def state_of(actor_id):
    return ActorRow.objects.get(pk=actor_id).decoded_state()


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_official_client_calls_actions_connects_and_gets_events(
    server, modules, encoding
):
    tag = uuid.uuid4().hex[:12]
    proc = run_node("scenarios.mjs", server.endpoint, encoding, tag, modules=modules)
    summary = last_json_line(proc.stdout)
    assert summary["encoding"] == encoding
    assert summary["version"] == modules.parent.name.removeprefix("rivetkit-")

    counter = ActorRow.objects.get(pk=summary["counterId"])
    assert (counter.name, counter.key_tuple) == ("counter", (tag, "http"))
    # 2 + 3, the two failed actions rolled back, then +1 over the connection.
    assert counter.decoded_state() == {"count": 6}
    created = ActorRow.objects.get(pk=summary["createdId"])
    assert created.key_tuple == (tag, "created")
    odd = ActorRow.objects.get(pk=summary["oddId"])
    assert odd.key_tuple == (tag, "a/b", "", "c\\d")
    assert state_of(summary["vaultId"]) == {"opened": 3}

    # Closing a connection runs on_disconnect and removes it, server side.
    wait_for(
        lambda: not Connection.objects.filter(actor_id=summary["roomId"]).exists(),
        what="the server removing the closed connections",
    )
    room = state_of(summary["roomId"])
    log = room["log"]
    assert ["connect", "alice"] in log and ["connect", "bob"] in log
    assert ["disconnect", "bob"] in log and ["disconnect", "alice"] in log
    assert ["inbox", {"n": 0}] in log and ["inbox", {"n": 1}] in log
    assert ["request", "GET"] in log
    assert room["messages"] == [
        ["http", "hello from http"],
        ["bob", "hi alice"],
        ["http", "still here"],
    ]


def test_capture_of_client_traffic_matches_the_fixtures(server, modules):
    """Re-record the client's bytes: they must be the committed fixtures."""
    from collections import Counter

    from tests.transport.rivetkit.test_bare import TRAFFIC

    proc = run_node(
        "capture.mjs", server.endpoint, uuid.uuid4().hex[:12], modules=modules
    )
    traffic = last_json_line(proc.stdout)
    for encoding, recorded in TRAFFIC.items():
        fresh = traffic[encoding]
        assert fresh["http"] == recorded["http"], encoding
        assert fresh["ws"]["sent"] == recorded["ws"]["sent"], encoding
        # Init carries fresh ids; the rest may interleave differently.
        assert Counter(fresh["ws"]["received"][1:]) == Counter(
            recorded["ws"]["received"][1:]
        ), encoding


def test_connections_come_back_after_the_server_restarts(server, modules):
    tag = uuid.uuid4().hex[:12]
    proc = subprocess.Popen(
        ["node", str(SCRIPTS / "reconnect.mjs"), server.endpoint, tag],
        env={**os.environ, "RIVETKIT_MODULES": str(modules)},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(
        target=lambda: [lines.put(line) for line in proc.stdout], daemon=True
    ).start()
    try:
        while lines.get(timeout=60).strip() != "READY":
            pass
        server.crash()
        server.start()
        proc.stdin.write("restarted\n")
        proc.stdin.flush()
        code = proc.wait(timeout=90)
        output = []
        while not lines.empty():
            output.append(lines.get())
        assert code == 0, "".join(output) + proc.stderr.read()[-5000:]
        assert last_json_line("".join(output)) == {
            "reconnected": ["bare", "json", "cbor"]
        }
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_official_client_websocket_relays_binary_and_text_to_on_websocket(
    server, modules
):
    tag = uuid.uuid4().hex[:12]
    proc = run_node("websocket.mjs", server.endpoint, tag, modules=modules)
    summary = last_json_line(proc.stdout)
    # Every message ran in an invocation whose state changes were saved.
    wait_for(
        lambda: not Connection.objects.filter(actor_id=summary["docId"]).exists(),
        what="the server removing the closed sockets",
    )
    state = state_of(summary["docId"])
    assert state["updates"] == 2
    assert state["texts"] == ["hello", "ping"]
    # Two sockets admitted (the refused one ran no hook), two gone.
    assert state["log"].count("websocket") == 2
    assert state["log"].count("disconnect") == 2
