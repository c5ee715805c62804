"""Hostile input at volume (issue 12), in process: the real views and consumer.

Hypothesis generates HTTP bodies, WebSocket frames, query strings, conn
params, actor names, keys and cron expressions -- random bytes, wrong types,
deep nesting, huge declared CBOR lengths, unknown tags, oversized payloads,
values JSON cannot carry. For every case: never a 500 or an internal error,
every error coded, and no state change but what valid calls made; after
each test the server still answers. The same, at a smaller volume, through
a daphne process is in test_e2e_hostile.py. Totals: tests/support/hostile.py.
"""

import asyncio
import base64
import json
from urllib.parse import parse_qs, quote, urlencode

import cbor2
import pytest
from django.test import Client, override_settings
from hypothesis import given
from hypothesis import strategies as st

from django_rivet.models import Actor as ActorRow
from django_rivet.models import Connection, CronJob
from django_rivet.testing import RivetCommunicator
from tests.support.hostile import (
    TOTALS,
    check_error,
    examples,
    json_values,
    payloads,
    texts,
)

# pg: the PostgreSQL leg runs this module (text PostgreSQL refuses (NUL) must be
# refused, not stored).
pytestmark = [pytest.mark.pg, pytest.mark.django_db(transaction=True)]

# Small limits, so oversized payloads are cheap to send.
LIMITS = {"MAX_HTTP_BODY_BYTES": 8192, "MAX_INCOMING_MESSAGE_BYTES": 4096}
CONTENT_TYPES = {"json": "application/json", "cbor": "application/cbor"}
PREFIX = "/rivet/actors"


def q(text):
    """Percent-encode any text, lone surrogates included (as invalid UTF-8)."""
    return quote(text.encode("utf-8", "surrogatepass"), safe="")


def decode_answer(response):
    """Return ``group/code`` of an HTTP error answer, None for a success."""
    assert response.status_code < 500, (response.status_code, response.content)
    if response.status_code < 400:
        return None
    content_type = response["Content-Type"].split(";")[0]
    if content_type == "application/cbor":
        body = cbor2.loads(response.content)
    else:
        assert content_type == "application/json", response.content[:200]
        body = json.loads(response.content)
    return check_error(body)


def ledger_rows():
    return {
        tuple(json.loads(key)): state
        for key, state in (
            (row.key, row.decoded_state())
            for row in ActorRow.objects.filter(name="ledger")
        )
    }


def assert_only_ledgers(allowed_keys):
    names = set(ActorRow.objects.values_list("name", flat=True))
    assert names <= {"ledger"}, names
    assert set(ledger_rows()) <= set(allowed_keys)


# -- HTTP ---------------------------------------------------------------------------
oversized = st.integers(min_value=8193, max_value=12000).map(
    lambda n: ("json", '{"args": ["' + "x" * n + '"]}')
)
bodies = payloads(lambda value: {"args": [value]}) | oversized


@override_settings(RIVET=LIMITS)
def test_hostile_http_bodies():
    client = Client()
    recorded = []

    @examples(4500)
    @given(
        bodies,
        st.sampled_from(["action", "action", "action", "create"]),
        st.sampled_from(["match", "match", "match", "text/plain", "none"]),
    )
    def case(payload, route, content_type):
        encoding, data = payload
        kind = {"match": CONTENT_TYPES[encoding], "none": ""}.get(
            content_type, content_type
        )
        if route == "action":
            path = f"{PREFIX}/ledger/actions/record?key=hostile"
        else:
            path = f"{PREFIX}/ledger?key=created"
        method = client.post if route == "action" else client.put
        response = method(path, data, content_type=kind)
        code = decode_answer(response)
        TOTALS.record(code)
        if code is None and route == "action":
            recorded.append(response)

    case()
    rows = ledger_rows()
    assert_only_ledgers({("hostile",), ("created",)})
    entries = rows.get(("hostile",), {"entries": 0})["entries"]
    assert entries == len(recorded)
    assert client.post(
        f"{PREFIX}/ledger/actions/entries?key=hostile", "{}", "application/json"
    ).json() == {"output": entries}


query_values = (
    texts
    | st.binary(max_size=16).map(lambda raw: quote(raw, safe=""))
    | st.text(min_size=129, max_size=300)
    | st.uuids().map(str)
    | st.sampled_from(["true", "false", "0", "1", "maybe", ""])
)
query_strings = st.lists(
    st.tuples(
        st.sampled_from(["key", "key", "actor_id", "create", "encoding", "x"]) | texts,
        query_values,
    ),
    max_size=6,
).map(
    lambda pairs: "&".join(
        f"{q(name)}={value if '%' in value else q(value)}" for name, value in pairs
    )
)
segments = (
    st.sampled_from(["ledger", "counter", "chatRoom"])
    | st.text(min_size=1, max_size=80).filter(lambda s: "/" not in s)
    | st.text(min_size=65, max_size=80)
)


@override_settings(RIVET=LIMITS)
def test_hostile_names_keys_and_query_strings():
    client = Client()
    created = set()

    @examples(2500)
    @given(
        segments.filter(lambda s: "/" not in s),
        st.sampled_from(["record", "entries", "keep"])
        | st.text(min_size=1, max_size=40).filter(lambda s: "/" not in s),
        query_strings,
        st.sampled_from(['{"args": ["x"]}', "{}", '{"args": "x"}', "[]"]),
    )
    def case(name, action, query, body):
        path = f"{PREFIX}/{q(name)}/actions/{q(action)}"
        response = client.post(f"{path}?{query}", body, content_type="application/json")
        if response.status_code == 404 and "json" not in response["Content-Type"]:
            # A path Django's URL resolver does not route to django-rivet
            # (a name ending in a newline, say): Django's own 404 page.
            TOTALS.record("django/not_found")
            return
        code = decode_answer(response)
        TOTALS.record(code)
        if code is None and name == "ledger":
            created.update(ledger_rows())

    case()
    names = set(ActorRow.objects.values_list("name", flat=True))
    assert names <= {"ledger", "counter", "chatRoom"}


cron_fields = st.one_of(
    st.sampled_from(["*", "*/5", "1-5", "0", "59", "60", "L", "?", "mon", "jan"]),
    st.integers(min_value=-5, max_value=100).map(str),
    st.text(max_size=6),
)
cron_expressions = st.one_of(
    st.lists(cron_fields, min_size=1, max_size=7).map(" ".join),
    st.sampled_from(["@hourly", "@daily", "@never", "* * * * * *", "0 0 31 2 *"]),
    st.text(max_size=30),
    json_values,
)


@override_settings(RIVET=LIMITS)
def test_hostile_cron_expressions():
    client = Client()
    accepted = 0

    @examples(600)
    @given(
        cron_expressions,
        st.none() | st.sampled_from(["UTC", "Europe/Paris", "../etc", ""]) | texts,
    )
    def case(expression, tz):
        nonlocal accepted
        response = client.post(
            f"{PREFIX}/alarmClock/actions/set_cron?key=hostile-cron",
            json.dumps({"args": ["job", expression, tz]}),
            content_type="application/json",
        )
        code = decode_answer(response)
        TOTALS.record(code)
        accepted += code is None

    case()
    assert CronJob.objects.count() == (1 if accepted else 0)  # one name, replaced


# -- WebSocket ----------------------------------------------------------------------
SYNC_ID = 2**62  # ids of the test's own calls, far from the hostile ones
frame_values = json_values | st.dictionaries(
    st.sampled_from(["type", "id", "name", "args", "event"]) | texts,
    json_values,
    max_size=5,
)


def hostile_frames():
    """Frames with a plausible shape, anything, or raw bytes and text."""
    actions = st.fixed_dictionaries(
        {
            "type": st.sampled_from(["action", "subscribe", "unsubscribe", "nope"])
            | texts,
            "id": st.integers() | json_values,
            "name": st.sampled_from(["record", "entries", "nope"]) | json_values,
            "args": st.lists(json_values, max_size=3) | json_values,
            "event": json_values,
        }
    )
    return (
        actions.map(lambda frame: ("frame", frame))
        | frame_values.map(lambda frame: ("frame", frame))
        | payloads(lambda value: {"type": "action", "id": 1, "name": "record",
                                  "args": [value]}).map(lambda p: ("raw", p))
        | st.integers(min_value=4097, max_value=6000).map(
            lambda n: ("raw", ("json", json.dumps({"type": "action", "id": 5,
                                                    "name": "record",
                                                    "args": ["x" * n]})))
        )
    )  # fmt: skip


class Socket:
    """One rivet connection the hostile frames go to; reopened when closed."""

    def __init__(self, loop, encoding):
        self.loop, self.encoding, self.comm = loop, encoding, None
        self.sync = SYNC_ID
        self.entries = 0  # as our own calls last saw it

    def run(self, coroutine):
        return self.loop.run_until_complete(coroutine)

    def open(self):
        self.comm = RivetCommunicator("ledger", ["hostile-ws"], encoding=self.encoding)
        init = self.run(self.comm.handshake())
        assert init["type"] == "init", init

    def close(self):
        if self.comm is not None:
            self.run(self.comm.disconnect())
            self.comm = None

    async def _send(self, kind, value):
        if kind == "frame":
            data = (
                json.dumps(value, allow_nan=True)
                if self.encoding == "json"
                else cbor2.dumps(value)
            )
        else:
            data = value[1]
        if isinstance(data, str) and self.encoding == "cbor":
            data = data.encode("utf-8", "surrogatepass")
        # send_input, not send_to: empty frames are frames too.
        key = "bytes" if isinstance(data, bytes) else "text"
        await self.comm.send_input({"type": "websocket.receive", key: data})

    async def _exchange(self, kind, value):
        """Send one hostile frame, then a call of ours; return the codes seen."""
        await self._send(kind, value)
        self.sync += 1
        await self.comm.send_frame(
            {"type": "action", "id": self.sync, "name": "entries", "args": []}
        )
        codes, answered = [], 0
        while True:
            message = await self.comm.receive_output(30)
            if message["type"] == "websocket.close":
                assert message.get("code") in (4413,), message
                return codes, True
            raw = message.get("bytes") or message.get("text")
            frame = cbor2.loads(raw) if self.encoding == "cbor" else json.loads(raw)
            if frame.get("type") == "error":
                codes.append(check_error(frame))
                continue
            if frame.get("type") == "action_response":
                if frame["id"] != self.sync:
                    answered += 1
                    codes.append(None)
                    continue
                # No state change but what an answered (valid) call made.
                assert frame["output"] - self.entries <= answered, frame
                self.entries = frame["output"]
                return codes, False

    def exchange(self, kind, value):
        if self.comm is None:
            self.open()
        codes, closed = self.run(self._exchange(kind, value))
        if closed:
            self.close()
        return codes or [None]


@pytest.fixture(scope="module")
def loop():
    """One event loop for the module's sockets (consumers outlive examples)."""
    loop = asyncio.new_event_loop()
    yield loop
    pending = asyncio.all_tasks(loop)
    for task in pending:
        task.cancel()
    if pending:
        loop.run_until_complete(asyncio.wait(pending))
    loop.close()


@pytest.mark.parametrize("encoding", ["json", "cbor"])
@override_settings(RIVET=LIMITS)
def test_hostile_websocket_frames(encoding, loop):
    socket = Socket(loop, encoding)
    try:

        @examples(1750)
        @given(hostile_frames())
        def case(item):
            kind, value = item
            if kind == "frame":
                try:
                    (json.dumps if encoding == "json" else cbor2.dumps)(value)
                except (TypeError, ValueError, OverflowError):
                    return
            for code in socket.exchange(kind, value):
                TOTALS.record(code)

        case()
        if socket.comm is None:
            socket.open()
        entries = socket.run(socket.comm.call("entries"))  # still serving
    finally:
        socket.close()
    assert entries == ledger_rows()[("hostile-ws",)]["entries"] == socket.entries
    assert Connection.objects.count() == 0
    assert_only_ledgers({("hostile-ws",)})


conn_params = (
    json_values.map(
        lambda v: base64.urlsafe_b64encode(
            json.dumps(v, allow_nan=True).encode("utf-8", "surrogatepass")
        ).decode()
    )
    | st.text(max_size=40)
    | st.binary(max_size=64).map(lambda raw: base64.urlsafe_b64encode(raw).decode())
    | st.integers(min_value=5000, max_value=7000).map(lambda n: "A" * n)
)


def _query_value(text):
    # Lone surrogates travel as the invalid UTF-8 a client could send.
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass")
    return text


connect_queries = st.dictionaries(
    st.sampled_from(["key", "encoding", "since", "subscribe", "create", "actor_id"]),
    query_values.map(_query_value),
    max_size=4,
)
# Browsers send ASCII origins; headers are latin-1 at most.
origins = st.none() | st.text(alphabet=st.characters(max_codepoint=255), max_size=30)


@override_settings(RIVET=LIMITS)
def test_hostile_connect_requests(loop):
    admitted = set()

    async def attempt(params, query, origin):
        comm = RivetCommunicator(
            "ledger",
            subprotocols=["rivet", "rivet_conn_params." + params],
            query=query,
            origin=origin,
        )
        accepted, _ = await comm.connect(30)
        assert accepted
        output = await comm.receive_output(30)
        if output.get("bytes") is not None:
            frame = cbor2.loads(output["bytes"])
        else:
            frame = json.loads(output["text"])
        if frame["type"] == "init":
            await comm.disconnect()
            return None
        code = check_error(frame)
        closing = await comm.receive_output(30)
        assert closing["type"] == "websocket.close"
        assert closing["code"] in (4400, 4403, 4413, 4429), closing
        await comm.disconnect()
        return code

    @examples(800)
    @given(conn_params, connect_queries, origins | st.just("http://testserver"))
    def case(params, query, origin):
        code = loop.run_until_complete(attempt(params, query, origin))
        TOTALS.record(code)
        if code is None:
            pairs = parse_qs(urlencode(query), keep_blank_values=True)
            admitted.add(tuple(pairs.get("key", [])))

    case()
    assert Connection.objects.count() == 0
    assert set(ledger_rows()) <= admitted
    assert set(ActorRow.objects.values_list("name", flat=True)) <= {"ledger"}
