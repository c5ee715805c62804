"""The RivetKit-client HTTP endpoints in process: REST API, gateway, CORS.

The node tests (test_e2e.py) show the real client works; these pin
the edges it does not reach: limits, refusals, CORS, DELETE, the check.
"""

import base64
import json
import logging
import uuid

import cbor2
import pytest
from django.core.checks import run_checks
from django.test import Client, override_settings

from django_rivet import actors
from django_rivet.checks import E005
from django_rivet.models import Actor as ActorRow
from django_rivet.transport.rivetkit import bare
from django_rivet.transport.rivetkit.addressing import parse_key, serialize_key

pytestmark = pytest.mark.django_db(transaction=True)

APP = "http://localhost:5173"
CORS = {"CORS_ALLOWED_ORIGINS": [APP]}


@pytest.fixture
def client():
    return Client()


def put_actor(client, body, **extra):
    return client.put(
        "/rivet/actors?namespace=default",
        json.dumps(body),
        content_type="application/json",
        **extra,
    )


def action(client, target, name, body, encoding="json", query="", **extra):
    content_type = (
        "application/json" if encoding == "json" else "application/octet-stream"
    )
    return client.post(
        f"/rivet/gateway/{target}/action/{name}{query}",
        body,
        content_type=content_type,
        headers={"x-rivet-encoding": encoding, **extra.pop("headers", {})},
        **extra,
    )


# -- metadata and the REST API --------------------------------------------------------
def test_metadata_names_the_registered_actors(client):
    body = client.get("/rivet/metadata?namespace=default").json()
    assert body["runtime"] == "django-rivet"
    assert {"counter", "chatRoom", "vault"} <= set(body["actorNames"])
    assert "clientEndpoint" not in body  # the client would move elsewhere


def test_put_gets_or_creates_with_key_string_and_cbor_input(client):
    body = {
        "name": "counter",
        "key": serialize_key(["acme", "a/b", ""]),
        "input": base64.b64encode(cbor2.dumps({"x": 1})).decode(),
        "runner_name_selector": "default",
        "crash_policy": "sleep",
    }
    first = put_actor(client, body).json()
    again = put_actor(client, body).json()
    assert first["created"] is True and again["created"] is False
    assert first["actor"]["actor_id"] == again["actor"]["actor_id"]
    assert first["actor"]["key"] == "acme/a\\/b/\\0"
    handle = actors.get("counter", ["acme", "a/b", ""])
    assert str(handle.actor_id) == first["actor"]["actor_id"]


def test_post_creates_once(client):
    body = {"name": "counter", "key": "once"}
    created = client.post(
        "/rivet/actors", json.dumps(body), content_type="application/json"
    )
    assert created.status_code == 200
    again = client.post(
        "/rivet/actors", json.dumps(body), content_type="application/json"
    )
    assert again.status_code == 409
    assert again.json()["code"] == "already_exists"


def test_get_finds_by_key_or_ids_and_misses_quietly(client):
    actor_id = str(actors.get_or_create("counter", ["k"]).actor_id)
    by_key = client.get("/rivet/actors?name=counter&key=k").json()["actors"]
    assert [a["actor_id"] for a in by_key] == [actor_id]
    missing = client.get("/rivet/actors?name=counter&key=nope").json()
    assert missing == {"actors": []}
    ids = f"{actor_id},{uuid.uuid4()},not-a-uuid"
    by_ids = client.get(f"/rivet/actors?actor_ids={ids}").json()["actors"]
    assert [a["actor_id"] for a in by_ids] == [actor_id]
    unnamed = client.get("/rivet/actors")
    assert unnamed.status_code == 400  # RivetKit needs a name to list


def test_listing_answers_server_side_callers_newest_first_in_pages(client):
    made = [str(actors.get_or_create("counter", [f"k{i}"]).actor_id) for i in range(3)]
    actors.get_or_create("chatRoom", "elsewhere")
    first = client.get("/rivet/actors?name=counter&limit=2&namespace=default").json()
    assert [a["actor_id"] for a in first["actors"]] == made[::-1][:2]
    assert first["actors"][0]["key"] == "k2"
    cursor = first["pagination"]["cursor"]
    rest = client.get(f"/rivet/actors?name=counter&limit=2&cursor={cursor}").json()
    assert [a["actor_id"] for a in rest["actors"]] == [made[0]]
    assert rest["pagination"]["cursor"] is None
    # A server-only class, or an unknown one, lists nothing.
    assert client.get("/rivet/actors?name=backOffice").json()["actors"] == []
    assert client.get("/rivet/actors?name=nope").json()["actors"] == []


def test_listing_is_refused_to_browsers_unless_allowed(client):
    actors.get_or_create("counter", "k")
    for headers in ({"Origin": APP}, {"Sec-Fetch-Mode": "cors"}):
        refused = client.get("/rivet/actors?name=counter", headers=headers)
        assert refused.status_code == 403
        assert refused.json()["code"] == "forbidden"
    with override_settings(RIVET={"RIVETKIT_LIST_FROM_BROWSERS": True}):
        allowed = client.get("/rivet/actors?name=counter", headers={"Origin": APP})
    assert len(allowed.json()["actors"]) == 1


def test_rest_calls_pass_on_auth_with_the_bearer_token(client):
    refused = put_actor(client, {"name": "vault", "key": "v"})
    assert refused.status_code == 403
    assert not ActorRow.objects.filter(name="vault").exists()
    admitted = put_actor(
        client,
        {"name": "vault", "key": "v"},
        headers={"Authorization": "Bearer open-sesame"},
    )
    assert admitted.status_code == 200


def test_delete_needs_the_class_opt_in_and_on_auth(client):
    counter = actors.get_or_create("counter", "keep")
    refused = client.delete(f"/rivet/actors/{counter.actor_id}")
    assert (refused.status_code, refused.json()["code"]) == (403, "forbidden")
    assert ActorRow.objects.filter(pk=counter.actor_id).exists()

    vault = actors.get_or_create("vault", "gone")
    no_token = client.delete(f"/rivet/actors/{vault.actor_id}")
    # Refused by on_auth, by id: told what an unknown id is told.
    assert (no_token.status_code, no_token.json()["code"]) == (404, "not_found")
    done = client.delete(
        f"/rivet/actors/{vault.actor_id}",
        headers={"Authorization": "Bearer open-sesame"},
    )
    assert (done.status_code, done.json()) == (200, {})
    assert not ActorRow.objects.filter(pk=vault.actor_id).exists()
    # The own protocol's actors/{name} route is unchanged.
    assert client.get("/rivet/actors/counter?key=keep").status_code == 200


# -- the gateway --------------------------------------------------------------------
def test_action_by_name_creates_with_rvt_input(client):
    encoded = base64.urlsafe_b64encode(cbor2.dumps({"x": 1})).decode().rstrip("=")
    query = (
        "?rvt-namespace=default&rvt-method=getOrCreate&rvt-runner=default"
        f"&rvt-key=a,b&rvt-input={encoded}&rvt-crash-policy=sleep"
    )
    response = action(client, "counter", "increment", '{"args":[4]}', query=query)
    assert response.json() == {"output": 4}
    assert actors.get("counter", ["a", "b"]).call("getCount") == 4


def test_get_by_name_does_not_create(client):
    query = "?rvt-namespace=default&rvt-method=get&rvt-key=ghost"
    response = action(client, "counter", "getCount", '{"args":[]}', query=query)
    assert (response.status_code, response.json()["code"]) == (404, "not_found")
    assert not ActorRow.objects.filter(name="counter").exists()


def test_errors_come_back_in_the_request_encoding(client):
    counter = actors.get_or_create("counter", "e")
    args = bare.write_action_request(cbor2.dumps(["x"]))
    response = action(
        client, counter.actor_id, "add_note_then_fail", args, encoding="bare"
    )
    assert response.status_code == 400
    assert response["Content-Type"] == "application/octet-stream"
    assert response.content == bare.write_http_error(
        "user", "refused", "refused on purpose", cbor2.dumps({"text": "x"})
    )
    cbor = action(
        client, counter.actor_id, "nope", cbor2.dumps({"args": []}), encoding="cbor"
    )
    assert cbor2.loads(cbor.content)["code"] == "action_not_found"


def test_bigints_and_bytes_use_the_json_conventions(client):
    room = actors.get_or_create("chatRoom", "values")
    body = json.dumps({"args": [[["$BigInt", str(2**62)], ["$Uint8Array", "AQI="]]]})
    response = action(client, room.actor_id, "echo", body)
    assert response.json() == {
        "output": [["$BigInt", str(2**62)], ["$Uint8Array", "AQI="]]
    }


def test_unknown_dollar_types_are_refused(client):
    room = actors.get_or_create("chatRoom", "values")
    body = json.dumps({"args": [["$Date", 1]]})
    response = action(client, room.actor_id, "echo", body)
    assert (response.status_code, response.json()["code"]) == (400, "malformed")


@override_settings(RIVET={"MAX_HTTP_BODY_BYTES": 100})
def test_oversized_bodies_are_refused_before_decoding(client):
    counter = actors.get_or_create("counter", "big")
    response = action(
        client, counter.actor_id, "increment", json.dumps({"args": ["x" * 200]})
    )
    assert (response.status_code, response.json()["code"]) == (413, "too_large")


def test_form_bodies_are_refused(client):
    counter = actors.get_or_create("counter", "form")
    response = client.post(
        f"/rivet/gateway/{counter.actor_id}/action/increment",
        "args=1",
        content_type="text/plain",
    )
    assert response.json()["code"] == "invalid_encoding"
    assert counter.call("getCount") == 0


def test_the_token_reaches_on_auth_from_the_path_or_the_header(client):
    vault = actors.get_or_create("vault", "t")
    # Refused by id: answered as an unknown id.
    assert action(client, vault.actor_id, "open", '{"args":[]}').status_code == 404
    via_path = action(client, f"{vault.actor_id}@open-sesame", "open", '{"args":[]}')
    assert via_path.json() == {"output": 1}
    via_header = action(
        client,
        vault.actor_id,
        "open",
        '{"args":[]}',
        headers={"x-rivet-token": "open-sesame"},
    )
    assert via_header.json() == {"output": 2}


def test_private_rooms_take_the_client_token_header(client):
    room = actors.get_or_create("chatRoom", ["private", "x"])
    query = "?rvt-method=get&rvt-key=private,x"
    refused = action(client, "chatRoom", "history", '{"args":[]}', query=query)
    assert refused.status_code == 403
    # ChatRoom reads X-Rivet-Token for HTTP: the client's token header.
    admitted = action(
        client,
        room.actor_id,
        "history",
        '{"args":[]}',
        headers={"x-rivet-token": "secret", "x-rivet-conn-params": '{"a":1}'},
    )
    assert admitted.json() == {"output": []}


def test_queue_send_and_wait(client):
    room = actors.get_or_create("chatRoom", "q")
    body = json.dumps(
        {"body": {"n": 1}, "name": "inbox", "wait": True, "timeout": 5000}
    )
    response = client.post(
        f"/rivet/gateway/{room.actor_id}/queue/inbox",
        body,
        content_type="application/json",
    )
    assert response.json() == {"status": "completed", "response": {"got": {"n": 1}}}


def test_raw_requests_keep_the_csrf_check_before_any_actor_code():
    strict = Client(enforce_csrf_checks=True)
    forged = strict.post(
        "/rivet/gateway/chatRoom/request/hook?rvt-method=getOrCreate&rvt-key=csrf",
        "x",
        content_type="text/plain",
    )
    assert forged.status_code == 403
    assert not ActorRow.objects.filter(name="chatRoom").exists()  # not created
    room = actors.get_or_create("chatRoom", "csrf")
    by_id = strict.post(f"/rivet/gateway/{room.actor_id}/request/hook", "x",
                        content_type="text/plain")  # fmt: skip
    assert by_id.status_code == 403
    assert room.call("log") == []  # on_request never ran
    webhook = strict.post(
        "/rivet/gateway/webhook/request/in?rvt-method=getOrCreate&rvt-key=w",
        "x",
        content_type="text/plain",
    )
    assert (webhook.status_code, webhook.content) == (200, b"1")


# -- CORS ---------------------------------------------------------------------------
def preflight(client, origin, path="/rivet/gateway/counter/action/increment"):
    return client.options(
        path,
        headers={
            "Origin": origin,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type,x-rivet-encoding,evil",
        },
    )


def test_cors_is_closed_by_default(client):
    response = preflight(client, APP)
    assert response.status_code == 403
    assert "Access-Control-Allow-Origin" not in response
    plain = client.get("/rivet/metadata", headers={"Origin": APP})
    assert "Access-Control-Allow-Origin" not in plain


@override_settings(RIVET=CORS)
def test_listed_origins_get_a_credentialed_preflight(client):
    response = preflight(client, APP)
    assert response.status_code == 204
    assert response["Access-Control-Allow-Origin"] == APP
    assert response["Access-Control-Allow-Credentials"] == "true"
    assert response["Access-Control-Allow-Headers"] == "content-type, x-rivet-encoding"
    assert "POST" in response["Access-Control-Allow-Methods"]
    actual = client.get("/rivet/metadata", headers={"Origin": APP})
    assert actual["Access-Control-Allow-Origin"] == APP
    assert "Origin" in actual["Vary"]
    other = preflight(client, "https://evil.example")
    assert other.status_code == 403
    assert "Access-Control-Allow-Origin" not in other


@override_settings(RIVET={"CORS_ALLOWED_ORIGINS": ["*", "localhost:3000", APP]})
def test_wildcards_and_non_origins_fail_the_check():
    errors = [e for e in run_checks() if e.id == "rivet.E005"]
    assert [e.msg for e in errors] == [
        E005.format(origin="*"),
        E005.format(origin="localhost:3000"),
    ]


@override_settings(RIVET={"CORS_ALLOWED_ORIGINS": "http://a.example"})
def test_a_string_instead_of_a_list_fails_the_check():
    assert any(
        e.id == "rivet.E004" and "CORS_ALLOWED_ORIGINS" in e.msg for e in run_checks()
    )


# -- key strings ----------------------------------------------------------------------
@pytest.mark.parametrize(
    "key",
    [[], [""], ["a"], ["a", "b"], ["a/b"], ["a\\b", "\\0"], ["", ""], ["/"], ["x\\"]],
)
def test_key_strings_round_trip(key):
    assert parse_key(serialize_key(key)) == key


# -- what the gateway logs and tells a caller who holds only an actor id -------------
def post(path, body="{}", **extra):
    return Client().post(path, body, content_type="application/json", **extra)


@pytest.mark.pg
def test_a_gateway_token_in_the_path_is_not_logged(caplog):
    room = actors.get_or_create("chatRoom", "private")
    caplog.set_level(logging.INFO)
    response = post(
        f"/rivet/gateway/{room.actor_id}@not-the-secret/action/history",
        '{"args": []}',
        headers={"x-rivet-encoding": "json"},
    )
    assert response.status_code == 404  # refused, by id
    assert "not-the-secret" not in caplog.text
    assert "@***" in caplog.text


@pytest.mark.pg
def test_an_answer_by_actor_id_does_not_name_the_class():
    room = actors.get_or_create("chatRoom", "private")
    response = post(
        f"/rivet/gateway/{room.actor_id}/action/nope",
        '{"args": []}',
        headers={"x-rivet-encoding": "json"},
    )
    assert response.status_code == 404
    assert "chatRoom" not in response.content.decode()
