"""Authorization on every path, through a real daphne (issues 12 and 17).

``on_auth`` decides every external call -- HTTP and WebSocket, django-rivet's
own protocol and the RivetKit flavour -- before the actor is created, woken
or even said to exist; a server-only actor is unknown to all of them. The
``gate`` actor (tests/testapp/actors.py) answers what the caller's
``X-Gate`` header asks for and records its lifecycle hooks in a file, an
effect no rollback undoes.
"""

import json
import os
import tempfile
import uuid

import httpx
import pytest
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect as ws_connect

from django_rivet import actors
from django_rivet.models import Actor as ActorRow
from django_rivet.models import Connection
from tests.testapp.models import Note

pytestmark = [pytest.mark.servers, pytest.mark.django_db(transaction=True)]

GATEWAY = "rvt-namespace=default&rvt-method={method}&rvt-key={key}"


@pytest.fixture(scope="module")
def effects_file():
    fd, path = tempfile.mkstemp(prefix="rivet-side-effects-")
    os.close(fd)
    yield path
    os.unlink(path)


@pytest.fixture(scope="module")
def server_env_extra(effects_file):
    """The module's daphne records lifecycle side effects in ``effects_file``."""
    return {"RIVET_TEST_SIDE_EFFECTS": effects_file}


@pytest.fixture
def effects(effects_file):
    """Read (and reset) the lifecycle side effects the server recorded."""
    open(effects_file, "w").close()

    def read():
        with open(effects_file, encoding="utf-8") as log:
            return [line.split(" ", 1)[0] for line in log.read().splitlines()]

    return read


@pytest.fixture
def http(server):
    with httpx.Client(base_url=server + "/rivet", timeout=30) as client:
        yield client


def gate(word):
    return {"X-Gate": word} if word is not None else {}


def error_of(response):
    body = response.json()
    return response.status_code, body["group"], body["code"]


def ws_url(server, path):
    return server.replace("http://", "ws://") + "/rivet/" + path


def frames_until_close(url, subprotocols, headers):
    """Open a socket, collect its frames until the server closes it."""
    frames = []
    with ws_connect(
        url, subprotocols=subprotocols, additional_headers=headers, open_timeout=30
    ) as ws:
        try:
            while True:
                frames.append(json.loads(ws.recv(timeout=30)))
        except ConnectionClosed as closed:
            return frames, closed.rcvd.code if closed.rcvd else None


def own_socket(server, key, word, query=""):
    url = ws_url(server, f"actors/gate/connect?key={key}&encoding=json{query}")
    return url, ["rivet"], gate(word)


def rivetkit_socket(server, key, word, method="getOrCreate"):
    query = GATEWAY.format(method=method, key=key)
    url = ws_url(server, f"gateway/gate/connect?{query}")
    return url, ["rivet", "rivet_encoding.json"], gate(word)


def rivetkit_action(http, key, name, word, method="getOrCreate"):
    query = GATEWAY.format(method=method, key=key)
    return http.post(
        f"/gateway/gate/action/{name}?{query}",
        content=json.dumps({"args": []}),
        headers={
            "Content-Type": "application/json",
            "x-rivet-encoding": "json",
            **gate(word),
        },
    )


def stored_count(key):
    """The gate's count, read server-side (no on_auth there)."""
    if not ActorRow.objects.filter(name="gate", key=json.dumps([key])).exists():
        return None
    return actors.get("gate", key).call("count")


# -- on_auth's answer --------------------------------------------------------------
@pytest.mark.parametrize(
    ("word", "expected"),
    [
        ("allow", (200, None, None)),
        ("true", (200, None, None)),
        ("false", (403, "actor", "forbidden")),
        ("raise", (403, "actor", "forbidden")),
        ("user", (403, "user", "gate_closed")),
        ("weird", (500, "rivet", "internal_error")),
    ],
)
def test_on_auth_answers_over_http_in_both_flavours(http, word, expected):
    own = http.post(
        "/actors/gate/actions/bump?key=h", json={"args": []}, headers=gate(word)
    )
    kit = rivetkit_action(http, "k", "bump", word)
    for response in (own, kit):
        if expected[0] == 200:
            assert response.status_code == 200
        else:
            assert error_of(response) == expected
    if word == "user":
        for response in (own, kit):
            body = response.json()
            assert (body["message"], body["metadata"]) == (
                "The gate is closed",
                {"gate": "closed"},
            )
    refused = expected[0] != 200
    # A refused call created nothing, an allowed one counted once.
    assert stored_count("h") == (None if refused else 1)
    assert stored_count("k") == (None if refused else 1)


@pytest.mark.parametrize(
    ("word", "code", "close"),
    [
        ("false", ("actor", "forbidden"), 4403),
        ("raise", ("actor", "forbidden"), 4403),
        ("user", ("user", "gate_closed"), 4403),
    ],
)
def test_on_auth_refusals_close_4403_in_both_websocket_flavours(
    server, word, code, close
):
    own_frames, own_close = frames_until_close(*own_socket(server, "w", word))
    assert [(f["type"], f["group"], f["code"]) for f in own_frames] == [
        ("error", *code)
    ]
    kit_frames, kit_close = frames_until_close(*rivetkit_socket(server, "kw", word))
    [kit] = kit_frames
    assert kit["body"]["tag"] == "Error"
    assert (kit["body"]["val"]["group"], kit["body"]["val"]["code"]) == code
    assert (own_close, kit_close) == (close, close)
    if word == "user":
        assert own_frames[0]["metadata"] == {"gate": "closed"}
    assert not ActorRow.objects.exists()
    assert not Connection.objects.exists()


# -- every action is authorized (finding 2) ------------------------------------------
def test_every_websocket_action_is_authorized_in_both_flavours(server):
    url, protocols, _ = own_socket(server, "acts", "allow")
    with ws_connect(
        url, subprotocols=protocols, additional_headers=gate("allow")
    ) as ws:
        assert json.loads(ws.recv(timeout=30))["type"] == "init"
        for number, name in enumerate(["bump", "wipe", "bump"], 1):
            ws.send(json.dumps({"type": "action", "id": number, "name": name}))
        answers = [json.loads(ws.recv(timeout=30)) for _ in range(3)]
    assert answers[0] == {"type": "action_response", "id": 1, "output": 1}
    assert (answers[1]["type"], answers[1]["code"], answers[1]["action_id"]) == (
        "error",
        "forbidden",
        2,
    )
    assert answers[2] == {"type": "action_response", "id": 3, "output": 2}

    url, protocols, _ = rivetkit_socket(server, "kacts", "allow")
    with ws_connect(
        url, subprotocols=protocols, additional_headers=gate("allow")
    ) as ws:
        assert json.loads(ws.recv(timeout=30))["body"]["tag"] == "Init"
        for number, name in enumerate(["bump", "wipe", "bump"], 1):
            request = {"id": ["$BigInt", str(number)], "name": name, "args": []}
            ws.send(json.dumps({"body": {"tag": "ActionRequest", "val": request}}))
        bodies = [json.loads(ws.recv(timeout=30))["body"] for _ in range(3)]
    assert bodies[0] == {
        "tag": "ActionResponse",
        "val": {"id": ["$BigInt", "1"], "output": 1},
    }
    assert bodies[1]["tag"] == "Error"
    assert bodies[1]["val"]["code"] == "forbidden"
    assert bodies[1]["val"]["actionId"] == ["$BigInt", "2"]
    assert bodies[2]["val"]["output"] == 2
    assert stored_count("acts") == stored_count("kacts") == 2


def test_on_auth_is_told_the_kind_action_and_queue_of_each_call(http, server):
    headers = gate("allow")
    http.post("/actors/gate/actions/bump?key=i", json={"args": []}, headers=headers)
    http.post("/actors/gate/queue/jobs?key=i", json={"body": 1}, headers=headers)
    assert http.get("/actors/gate/request/x?key=i", headers=headers).text == "gate"
    http.get("/actors/gate?key=i", headers=headers)
    url, protocols, _ = own_socket(server, "i", "allow")
    with ws_connect(url, subprotocols=protocols, additional_headers=headers) as ws:
        ws.recv(timeout=30)
        ws.send(json.dumps({"type": "action", "id": 1, "name": "count"}))
        assert json.loads(ws.recv(timeout=30))["output"] == 1
    seen = [
        json.loads(text[5:])
        for text in Note.objects.order_by("id").values_list("text", flat=True)
    ]
    assert seen[:6] == [
        ["http", "action", "bump", None],
        ["http", "queue", None, "jobs"],
        ["http", "request", None, None],
        ["http", "actor", None, None],
        ["websocket", "connect", None, None],
        ["websocket", "action", "count", None],
    ]


# -- authorize first, then create or wake (finding 3) ---------------------------------
def test_a_refused_caller_runs_no_lifecycle_hook(http, server, effects):
    path = "/actors/gate/actions/bump?key={}"
    assert (
        http.post(path.format("new"), json={}, headers=gate("false")).status_code == 403
    )
    frames_until_close(*own_socket(server, "new-ws", "false"))
    frames_until_close(*rivetkit_socket(server, "new-kit", "false"))
    assert effects() == []
    # An existing actor this server has not loaded yet: on_wake would run.
    actors.get_or_create("gate", "old")
    assert (
        http.post(path.format("old"), json={}, headers=gate("false")).status_code == 403
    )
    frames_until_close(*own_socket(server, "old", "false"))
    assert effects() == []
    # The same calls, allowed, do run the hooks.
    assert (
        http.post(path.format("new"), json={}, headers=gate("allow")).status_code == 200
    )
    assert effects() == ["create_state", "on_create", "on_wake"]
    assert (
        http.post(path.format("old"), json={}, headers=gate("allow")).status_code == 200
    )
    assert effects() == ["create_state", "on_create", "on_wake", "on_wake"]


# -- no existence oracle for refused callers (finding 7) --------------------------
def test_a_refused_caller_cannot_tell_whether_an_actor_exists(http, server):
    existing = actors.get_or_create("gate", "there")
    refused = gate("false")
    answers = {}
    for key in ("there", "nowhere"):
        answers[key] = [
            http.get(f"/actors/gate?key={key}", headers=refused),
            http.post(f"/actors/gate?key={key}", json={}, headers=refused),
            http.post(
                f"/actors/gate/actions/bump?key={key}&create=false",
                json={},
                headers=refused,
            ),
            http.get(f"/actors?name=gate&key={key}", headers=refused),
            http.post(
                "/actors",
                json={"name": "gate", "key": key},
                headers=refused,
            ),
            rivetkit_action(http, key, "bump", "false", method="get"),
        ]
    for there, nowhere in zip(answers["there"], answers["nowhere"], strict=True):
        assert (there.status_code, there.json()) == (
            nowhere.status_code,
            nowhere.json(),
        )
        assert there.status_code == 403
        assert str(existing.actor_id) not in there.text
    for method in ("get", "getOrCreate"):
        sockets = [
            frames_until_close(*rivetkit_socket(server, key, "false", method))
            for key in ("there", "nowhere")
        ]
        assert sockets[0] == sockets[1]
    own = [
        frames_until_close(*own_socket(server, key, "false", "&create=false"))
        for key in ("there", "nowhere")
    ]
    assert own[0] == own[1] and own[0][1] == 4403
    assert list(ActorRow.objects.values_list("key", flat=True)) == ['["there"]']

    # Allowed callers do learn it.
    allowed = gate("allow")
    assert error_of(http.get("/actors/gate?key=nowhere", headers=allowed)) == (
        404,
        "actor",
        "not_found",
    )
    conflict = http.post("/actors/gate?key=there", json={}, headers=allowed)
    assert error_of(conflict) == (409, "actor", "already_exists")
    assert conflict.json()["metadata"] == {"actor_id": str(existing.actor_id)}


# -- by id, no existence oracle either (audit 2026-12) ----------------------------
def test_a_refused_caller_cannot_tell_an_existing_id_from_an_absent_one(http, server):
    existing = actors.get_or_create("gate", "by-id").actor_id
    kit = {"Content-Type": "application/json", "x-rivet-encoding": "json"}
    body = json.dumps({"args": []})
    by_id = "/actors/gate/actions"

    def answers(actor_id, word):
        headers = gate(word)
        seen = [
            http.post(f"{by_id}/bump?actor_id={actor_id}", json={}, headers=headers),
            # Another class than the id's: metadata named it before.
            http.post(
                f"/actors/counter/actions/increment?actor_id={actor_id}", json={}
            ),
            http.post(f"{by_id}/nope?actor_id={actor_id}", json={}, headers=headers),
            http.get(f"/actors?actor_ids={actor_id}", headers=headers),
            http.delete(f"/actors/{actor_id}", headers=headers),
            http.post(
                f"/gateway/{actor_id}/action/bump",
                content=body,
                headers={**kit, **headers},
            ),
        ]
        shown = [(r.status_code, r.text.replace(str(actor_id), "ID")) for r in seen]
        url = ws_url(server, f"actors/gate/connect?actor_id={actor_id}&encoding=json")
        frames, close = frames_until_close(url, ["rivet"], headers)
        return shown, close

    absent = uuid.uuid4()
    for word in ("false", "user"):
        there, nowhere = answers(existing, word), answers(absent, word)
        assert there == nowhere
        assert [status for status, _ in there[0]] == [404, 404, 404, 200, 404, 404]
    assert stored_count("by-id") == 0  # nothing ran
    # An allowed caller learns what it may not do to an actor it may see.
    allowed = gate("allow")
    delete = http.delete(f"/actors/{existing}", headers=allowed)
    assert error_of(delete) == (403, "actor", "forbidden")
    missing = http.post(f"{by_id}/nope?actor_id={existing}", json={}, headers=allowed)
    assert error_of(missing) == (404, "actor", "action_not_found")


# -- server-only actors (finding 12) ----------------------------------------------
def test_a_server_only_actor_is_unknown_to_every_transport(http, server):
    hidden = actors.get_or_create("backOffice", "x")
    assert hidden.call("bump") == 1  # the server-side client reaches it

    def answers(name, actor_id):
        by_name = GATEWAY.format(method="getOrCreate", key="x")
        kit = {"Content-Type": "application/json", "x-rivet-encoding": "json"}
        body = json.dumps({"args": []})
        seen = [
            http.post(f"/actors/{name}/actions/bump?key=x", json={}),
            http.put(f"/actors/{name}?key=x", json={}),
            http.get(f"/actors/{name}?key=x"),
            http.post(f"/actors/{name}/queue/jobs?key=x", json={"body": 1}),
            # No CSRF token: an existing class would be refused by CSRF first.
            http.post(f"/actors/{name}/request/x?key=x", content=b"a=1"),
            http.post(f"/actors/{name}/actions/bump?actor_id={actor_id}", json={}),
            http.put("/actors", json={"name": name, "key": "x"}),
            http.get(f"/actors?name={name}&key=x"),
            http.get(f"/actors?actor_ids={actor_id}"),
            http.post(
                f"/gateway/{name}/action/bump?{by_name}", content=body, headers=kit
            ),
            http.post(f"/gateway/{actor_id}/action/bump", content=body, headers=kit),
            http.post(f"/gateway/{actor_id}/request/x", content=b"a=1"),
        ]
        return [
            (r.status_code, r.text.replace(name, "NAME").replace(str(actor_id), "ID"))
            for r in seen
        ]

    assert answers("backOffice", hidden.actor_id) == answers(
        "noSuchActor", uuid.uuid4()
    )
    for name in ("backOffice", "noSuchActor"):
        frames, close = frames_until_close(
            ws_url(server, f"actors/{name}/connect?key=x&encoding=json"), ["rivet"], {}
        )
        assert (frames[0]["code"], close) == ("not_found", 4400)
    kit = [
        frames_until_close(
            ws_url(
                server,
                f"gateway/{name}/connect?" + GATEWAY.format(method="get", key="x"),
            ),
            ["rivet", "rivet_encoding.json"],
            {},
        )
        for name in ("backOffice", "noSuchActor")
    ]
    assert json.dumps(kit[0]).replace("backOffice", "N") == json.dumps(kit[1]).replace(
        "noSuchActor", "N"
    )
    metadata = http.get("/metadata?namespace=default").json()
    assert "backOffice" not in metadata["actorNames"]
    assert "gate" in metadata["actorNames"]
    assert hidden.call("bump") == 2  # nothing reached it from outside
