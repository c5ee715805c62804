"""The HTTP routes (actors, actions, raw requests, queues) through Django's Client."""

import json
import uuid

import cbor2
import pytest
from django.test import Client, override_settings

from django_rivet import actors
from django_rivet.models import Actor as ActorRow
from django_rivet.models import ActorEvent, ActorKV
from tests.testapp.models import Note

pytestmark = pytest.mark.django_db(transaction=True)

PREFIX = "/rivet/actors"
MULTIPART = '--XyZ\r\nContent-Disposition: form-data; name="a"\r\n\r\n1\r\n--XyZ--\r\n'


@pytest.fixture
def client():
    return Client()


def post_json(client, path, body=None, **extra):
    data = json.dumps(body if body is not None else {})
    return client.post(path, data, content_type="application/json", **extra)


def error_of(response):
    if response["Content-Type"] == "application/cbor":
        body = cbor2.loads(response.content)
    else:
        body = response.json()
    assert set(body) == {"group", "code", "message", "metadata"}, body
    return response.status_code, body["group"], body["code"]


def db_state():
    return (
        list(ActorRow.objects.values_list("name", "key", "state", "version")),
        ActorEvent.objects.count(),
        ActorKV.objects.count(),
        Note.objects.count(),
    )


# -- actors -------------------------------------------------------------------------
def test_put_gets_or_creates(client):
    path = f"{PREFIX}/counter?key=acme&key=eu"
    first = client.put(path, "{}", content_type="application/json")
    assert first.status_code == 200
    assert first.json()["created"] is True
    # An empty body is an empty map.
    second = client.put(path, "", CONTENT_TYPE="application/json")
    assert second.json() == {"actor_id": first.json()["actor_id"], "created": False}
    assert actors.get("counter", ["acme", "eu"]).actor_id == uuid.UUID(
        first.json()["actor_id"]
    )


def test_post_creates_once(client):
    created = post_json(client, f"{PREFIX}/counter?key=once")
    assert created.status_code == 201
    assert set(created.json()) == {"actor_id"}
    again = post_json(client, f"{PREFIX}/counter?key=once")
    assert error_of(again) == (409, "actor", "already_exists")
    by_id = post_json(client, f"{PREFIX}/counter?actor_id={created.json()['actor_id']}")
    assert error_of(by_id) == (400, "request", "malformed")


def test_get_describes_and_404s(client):
    assert error_of(client.get(f"{PREFIX}/counter?key=none")) == (
        404,
        "actor",
        "not_found",
    )
    actor_id = post_json(client, f"{PREFIX}/counter?key=a&key=b").json()["actor_id"]
    body = client.get(f"{PREFIX}/counter?key=a&key=b").json()
    assert body["actor_id"] == actor_id
    assert (body["name"], body["key"]) == ("counter", ["a", "b"])
    assert body["created_at"]
    assert client.get(f"{PREFIX}/counter?actor_id={actor_id}").json() == body


def test_no_key_is_the_empty_key(client):
    post_json(client, f"{PREFIX}/counter/actions/increment", {"args": [3]})
    assert actors.get("counter", []).call("getCount") == 3


def test_input_reaches_create_state(client):
    response = client.put(
        f"{PREFIX}/chatRoom?key=with-input",
        json.dumps({"input": {"ignored": True}}),
        content_type="application/json",
    )
    assert response.status_code == 200


# -- actions ------------------------------------------------------------------------
def test_action_returns_output_and_creates_the_actor(client):
    response = post_json(
        client, f"{PREFIX}/counter/actions/increment?key=x", {"args": [2]}
    )
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"output": 2}
    response = post_json(client, f"{PREFIX}/counter/actions/getCount?key=x")
    assert response.json() == {"output": 2}


def test_create_false_does_not_create(client):
    before = db_state()
    response = post_json(
        client, f"{PREFIX}/counter/actions/increment?key=new&create=false"
    )
    assert error_of(response) == (404, "actor", "not_found")
    assert db_state() == before


def test_actor_id_addresses_the_actor(client):
    actor_id = str(actors.get_or_create("counter", "by-id").actor_id)
    response = post_json(
        client, f"{PREFIX}/counter/actions/increment?actor_id={actor_id}"
    )
    assert response.json() == {"output": 1}
    wrong_class = post_json(
        client, f"{PREFIX}/chatRoom/actions/history?actor_id={actor_id}"
    )
    assert error_of(wrong_class) == (404, "actor", "not_found")
    for bad in ("nope", str(uuid.uuid4())):
        response = post_json(
            client, f"{PREFIX}/counter/actions/getCount?actor_id={bad}"
        )
        assert error_of(response) == (404, "actor", "not_found")


def test_cbor_request_gets_a_cbor_answer(client):
    body = cbor2.dumps({"args": [b"\x00\x01\xff"]})
    response = client.post(
        f"{PREFIX}/chatRoom/actions/echo?key=cbor",
        body,
        content_type="application/cbor",
    )
    assert response.status_code == 200
    assert response["Content-Type"] == "application/cbor"
    assert cbor2.loads(response.content) == {"output": b"\x00\x01\xff"}


def test_cbor_errors_are_cbor(client):
    response = client.post(
        f"{PREFIX}/counter/actions/nope?key=x",
        cbor2.dumps({}),
        content_type="application/cbor",
    )
    assert response.status_code == 404
    assert cbor2.loads(response.content)["code"] == "action_not_found"


def test_json_bytes_use_the_tagged_form(client):
    response = client.post(
        f"{PREFIX}/chatRoom/actions/echo?key=b",
        cbor2.dumps({"args": [b"hi"]}),
        content_type="application/cbor",
        headers={"Accept": "application/json"},
    )
    assert cbor2.loads(response.content) == {"output": b"hi"}
    response = client.get(f"{PREFIX}/chatRoom?key=b", headers={"Accept": "x/y"})
    assert response["Content-Type"] == "application/json"


@pytest.mark.parametrize(
    ("path", "body", "expected"),
    [
        ("noSuchActor/actions/x", {}, (404, "actor", "not_found")),
        ("counter/actions/nope", {}, (404, "actor", "action_not_found")),
        (
            "counter/actions/increment",
            {"args": ["x"]},
            (400, "request", "invalid_args"),
        ),
        (
            "counter/actions/increment",
            {"args": [1, 2, 3]},
            (400, "request", "invalid_args"),
        ),  # fmt: skip
        (
            "counter/actions/increment",
            {"args": {"by": 1}},
            (400, "request", "invalid_args"),
        ),  # fmt: skip
        ("counter/actions/crash", {}, (500, "rivet", "internal_error")),
    ],
)
def test_action_errors_have_their_code_and_status(client, path, body, expected):
    actors.get_or_create("counter", "k")
    before = db_state()
    response = post_json(client, f"{PREFIX}/{path}?key=k", body)
    assert error_of(response) == expected
    assert db_state() == before


def test_user_error_reaches_the_client_intact(client):
    actors.get_or_create("counter", "k")
    before = db_state()
    response = post_json(
        client, f"{PREFIX}/counter/actions/add_note_then_fail?key=k", {"args": ["t"]}
    )
    assert response.status_code == 400
    assert response.json() == {
        "group": "user",
        "code": "refused",
        "message": "refused on purpose",
        "metadata": {"text": "t"},
    }
    assert db_state() == before


def test_internal_errors_hide_details_unless_exposed(client):
    response = post_json(client, f"{PREFIX}/counter/actions/crash?key=k")
    assert response.json()["message"] == "An internal error occurred"
    with override_settings(RIVET={"EXPOSE_ERRORS": True}):
        response = post_json(client, f"{PREFIX}/counter/actions/crash?key=k")
    assert "secret detail" in response.json()["message"]


def test_on_auth_guards_http_calls(client):
    path = f"{PREFIX}/chatRoom/actions/history?key=private"
    # on_auth raised UserError(code="token_required"): kept, answered as 403.
    assert error_of(post_json(client, path)) == (403, "user", "token_required")
    assert not ActorRow.objects.exists()
    ok = post_json(client, path, headers={"X-Rivet-Token": "secret"})
    assert ok.json() == {"output": []}
    describe = client.get(f"{PREFIX}/chatRoom?key=private")
    assert error_of(describe) == (403, "user", "token_required")


def test_oversized_output_is_refused(client):
    with override_settings(RIVET={"MAX_OUTGOING_MESSAGE_BYTES": 1000}):
        response = post_json(
            client, f"{PREFIX}/chatRoom/actions/big?key=b", {"args": [5000]}
        )
    assert error_of(response) == (413, "request", "too_large")


# -- bad bodies change nothing -----------------------------------------------------
@pytest.mark.parametrize(
    ("data", "content_type", "expected"),
    [
        ("{not json", "application/json", (400, "request", "malformed")),
        ("[1, 2]", "application/json", (400, "request", "malformed")),
        ('{"args": [NaN]}', "application/json", (400, "request", "malformed")),
        (b"\xff\xfe", "application/cbor", (400, "request", "malformed")),
        (cbor2.dumps([1]), "application/cbor", (400, "request", "malformed")),
        (b"\xd8\x1e\x82\x01\x02", "application/cbor", (400, "request", "malformed")),
        ('{"args": []}', "application/xml", (400, "request", "invalid_encoding")),
    ],
)
def test_malformed_bodies_are_refused(client, data, content_type, expected):
    before = db_state()
    response = client.post(
        f"{PREFIX}/counter/actions/increment?key=m", data, content_type=content_type
    )
    assert error_of(response) == expected
    assert db_state() == before


def test_body_over_the_limit_is_refused_by_content_length():
    before = db_state()
    with override_settings(RIVET={"MAX_HTTP_BODY_BYTES": 64}):
        response = Client().post(
            f"{PREFIX}/counter/actions/increment?key=big",
            json.dumps({"args": [1], "pad": "x" * 100}),
            content_type="application/json",
        )
    assert error_of(response) == (413, "request", "too_large")
    assert db_state() == before


def test_body_longer_than_its_content_length_is_bounded(client):
    from django.test import RequestFactory

    from django_rivet.transport.http import read_body

    request = RequestFactory().post(
        "/x", json.dumps({"pad": "x" * 200}), content_type="application/json"
    )
    request.META["CONTENT_LENGTH"] = "10"
    with override_settings(RIVET={"MAX_HTTP_BODY_BYTES": 64}):
        with pytest.raises(Exception) as info:
            read_body(request)
    assert info.value.qualified_code == "request/too_large"


def test_invalid_content_length_is_malformed(client):
    response = client.post(
        f"{PREFIX}/counter/actions/increment?key=m",
        "{}",
        content_type="application/json",
        CONTENT_LENGTH="abc",
    )
    assert error_of(response) == (400, "request", "malformed")


def test_wrong_method_is_405(client):
    assert error_of(client.get(f"{PREFIX}/counter/actions/increment")) == (
        405,
        "request",
        "method_not_allowed",
    )
    assert client.delete(f"{PREFIX}/counter").status_code == 405


# -- CSRF ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("content_type", "data"),
    [
        ("application/x-www-form-urlencoded", "args=1"),
        ("multipart/form-data; boundary=XyZ", MULTIPART),
        ("text/plain", '{"args": [1]}'),
    ],
)
def test_cross_site_form_posts_are_refused(content_type, data):
    client = Client(enforce_csrf_checks=True)
    actors.get_or_create("counter", "csrf")
    before = db_state()
    for path in ("counter/actions/increment?key=csrf", "counter?key=csrf2"):
        response = client.post(
            f"{PREFIX}/{path}",
            data,
            content_type=content_type,
            headers={"Origin": "https://evil.example"},
        )
        assert error_of(response) == (400, "request", "invalid_encoding")
    assert db_state() == before


def test_json_api_needs_no_csrf_token():
    client = Client(enforce_csrf_checks=True)
    response = post_json(client, f"{PREFIX}/counter/actions/increment?key=api")
    assert response.json() == {"output": 1}


# -- raw requests ---------------------------------------------------------------------
def test_request_route_passes_the_request_to_on_request(client):
    response = client.get(f"{PREFIX}/chatRoom/request/some/path?key=raw&x=1")
    assert response.status_code == 200
    assert response.json()["method"] == "GET"
    assert response.json()["path"] == "some/path"
    response = client.post(
        f"{PREFIX}/chatRoom/request?key=raw", "hello", content_type="text/plain"
    )
    assert response.json()["body"] == "hello"
    log = actors.get("chatRoom", "raw").call("log")
    assert log == [["request", "GET"], ["request", "POST"]]


def test_request_route_keeps_django_csrf_unless_the_actor_opts_out():
    client = Client(enforce_csrf_checks=True)
    response = client.post(
        f"{PREFIX}/chatRoom/request/x?key=csrf", "a=1", content_type="text/plain"
    )
    assert response.status_code == 403
    assert not ActorRow.objects.exists()
    hook = client.post(f"{PREFIX}/webhook/request/in?key=w", "{}", "application/json")
    assert hook.content == b"1"


def test_request_route_runs_on_auth_and_needs_on_request(client):
    denied = client.get(f"{PREFIX}/chatRoom/request/x?key=private")
    assert error_of(denied) == (403, "user", "token_required")
    missing = client.get(f"{PREFIX}/counter/request/x?key=r")
    assert error_of(missing) == (404, "actor", "action_not_found")
    assert not ActorRow.objects.exists()


# -- queues -------------------------------------------------------------------------
def test_queue_send_without_waiting_is_queued(client):
    response = post_json(client, f"{PREFIX}/chatRoom/queue/inbox?key=q", {"body": "hi"})
    assert response.json() == {"status": "queued"}


def test_queue_send_waits_for_the_reply(client):
    response = post_json(
        client,
        f"{PREFIX}/chatRoom/queue/inbox?key=q",
        {"body": {"n": 1}, "wait": True, "timeout": 10},
    )
    assert response.json() == {"status": "completed", "response": {"got": {"n": 1}}}
    assert ["inbox", {"n": 1}] in actors.get("chatRoom", "q").call("log")


@pytest.mark.parametrize(
    ("path", "body", "expected"),
    [
        ("chatRoom/queue/nope?key=q", {"body": 1}, (404, "actor", "action_not_found")),
        (
            "chatRoom/queue/inbox?key=private",
            {"body": 1},
            (403, "user", "token_required"),
        ),
        (
            "chatRoom/queue/inbox?key=q",
            {"body": 1, "wait": "yes"},
            (400, "request", "malformed"),
        ),  # fmt: skip
        (
            "chatRoom/queue/inbox?key=q",
            {"body": 1, "timeout": -1},
            (400, "request", "malformed"),
        ),  # fmt: skip
    ],
)
def test_queue_errors_store_nothing(client, path, body, expected):
    before = db_state()
    assert error_of(post_json(client, f"{PREFIX}/{path}", body)) == expected
    assert db_state() == before


# -- the edges (issue 17, findings 1, 4, 8) -------------------------------------------
def test_a_nesting_bomb_cannot_brick_an_actor(client):
    path = f"{PREFIX}/ledger/actions/keep?key=bomb"
    deep = "[" * 600 + "]" * 600
    response = client.post(
        path, f'{{"args": [{deep}]}}', content_type="application/json"
    )
    assert error_of(response) == (400, "request", "malformed")
    # The deepest value a message can carry is stored and read back.
    deepest = "[" * 126 + "]" * 126
    response = client.post(
        path, f'{{"args": [{deepest}]}}', content_type="application/json"
    )
    assert response.status_code == 200, response.content
    response = post_json(client, f"{PREFIX}/ledger/actions/entries?key=bomb", {})
    assert response.json() == {"output": 0}


def test_a_handler_cannot_store_a_value_too_deep_to_read_back(client):
    path = f"{PREFIX}/ledger/actions/nest?key=nest"
    response = post_json(client, path, {"args": [200]})
    assert error_of(response) == (500, "actor", "value_too_deep")
    assert post_json(client, path, {"args": [100]}).json() == {"output": "nested"}
    entries = post_json(client, f"{PREFIX}/ledger/actions/entries?key=nest", {})
    assert entries.json() == {"output": 1}  # the refused call was rolled back


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        ('{"args": [1e999]}', "application/json"),
        ('{"args": [NaN]}', "application/json"),
        (cbor2.dumps({"args": [float("inf")]}), "application/cbor"),
        (b"\xa1\x64args\x81\xf7", "application/cbor"),  # undefined
        (cbor2.dumps({"args": [{1: "int key"}]}), "application/cbor"),
        (cbor2.dumps({"args": [{2**70: "bignum key"}]}), "application/cbor"),
    ],
    ids=["overflow", "nan", "cbor-inf", "undefined", "int-key", "bignum-key"],
)
def test_values_json_cannot_carry_are_refused_and_nothing_is_stored(
    client, body, content_type
):
    before = db_state()
    response = client.post(
        f"{PREFIX}/ledger/actions/keep?key=values", body, content_type=content_type
    )
    assert error_of(response) == (400, "request", "malformed")
    assert db_state() == before


@pytest.mark.parametrize(
    "query", ["key=%00", "key=a%00b", "key=%C0%80", "key=%ED%A0%80", "actor_id=%00"]
)
def test_nul_and_invalid_utf8_in_keys_are_coded_errors_on_every_database(client, query):
    response = post_json(
        client, f"{PREFIX}/ledger/actions/record?{query}", {"args": ["x"]}
    )
    assert response.status_code in (200, 400, 404), response.content
    if response.status_code != 200:
        error_of(response)


@pytest.mark.parametrize("path", ["queue/%00", "queue/a%00", "request/%00"])
def test_nul_in_queue_names_and_paths_is_not_an_internal_error(client, path):
    response = post_json(client, f"{PREFIX}/ledger/{path}?key=nul", {"body": 1})
    assert response.status_code < 500, response.content


# -- issue 30: "did you mean" over HTTP, never naming a server-only actor -------------
@pytest.mark.django_db(transaction=True)
def test_http_suggests_public_actor_names_only(client):
    wrong_case = post_json(client, "/rivet/actors/Counter/actions/increment?key=k")
    assert error_of(wrong_case) == (404, "actor", "not_found")
    assert "did you mean 'counter'?" in wrong_case.json()["message"]
    # backOffice is server_only: its name in another case is as unknown as
    # any other name, and nothing suggests it.
    hidden = post_json(client, "/rivet/actors/BackOffice/actions/ping?key=k")
    unknown = post_json(client, "/rivet/actors/NoSuchThing/actions/ping?key=k")
    assert error_of(hidden) == error_of(unknown) == (404, "actor", "not_found")
    assert hidden.json()["message"] == "Unknown actor 'BackOffice'"
    exact = post_json(client, "/rivet/actors/backOffice/actions/ping?key=k")
    assert exact.json()["message"] == "Unknown actor 'backOffice'"
