// What a frontend does with the unchanged official client, in one encoding.
//
//   node scenarios.mjs <endpoint> <encoding> <tag>
//
// Every step asserts what the user sees; the last line printed is a JSON
// summary the Python test checks against the database.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { loadClient } from "./client.mjs";

const [endpoint, encoding, tag] = process.argv.slice(2);
const { createClient, version } = await loadClient();
const client = createClient({ endpoint, encoding });
const summary = { version, encoding };

function step(name) {
	console.log(`-- ${name}`);
}

function isError(group, code) {
	return (error) => {
		assert.equal(`${error.group}/${error.code}`, `${group}/${code}`, error.message);
		return true;
	};
}

// Resolves with the arguments of the next `event` on `conn`.
function nextEvent(conn, event) {
	return new Promise((resolve) => {
		const off = conn.on(event, (...args) => {
			off();
			resolve(args);
		});
	});
}

step("getOrCreate(key).action() over HTTP");
const counter = client.counter.getOrCreate([tag, "http"]);
assert.equal(await counter.increment(2), 2);
assert.equal(await counter.increment(3), 5);
assert.equal(await counter.getCount(), 5);
summary.counterId = await counter.resolve();

step("values keep their types both ways");
const room = client.chatRoom.getOrCreate([tag, "room"]);
const values = {
	bytes: new Uint8Array([0, 1, 255]),
	big: 1234567890123456789n, // past JavaScript's safe integers, within 64 bits
	tagged: ["$literal", 1],
	nested: { list: [1, 2.5, "x", null, true], large: 2 ** 40 },
};
for (const [name, value] of Object.entries(values)) {
	if (encoding === "cbor" && name === "tagged") continue; // see docs
	assert.deepEqual(await room.echo(value), value, name);
}
// The value domain's integers are 64-bit (docs/values.md): a larger BigInt
// is refused with a coded error in every encoding, not stored or echoed.
await assert.rejects(
	room.echo(123456789012345678901234567890n),
	isError("request", "malformed"),
);

step("create(key), and create again");
const created = await client.counter.create([tag, "created"]);
assert.equal(await created.increment(7), 7);
summary.createdId = await created.resolve();
await assert.rejects(
	client.counter.create([tag, "created"]),
	isError("actor", "already_exists"),
);

step("get(key) and getForId(id)");
assert.equal(await client.counter.get([tag, "http"]).getCount(), 5);
assert.equal(await client.counter.getForId(summary.counterId).getCount(), 5);
assert.equal(await client.counter.getForId(summary.createdId).getCount(), 7);
await assert.rejects(
	client.counter.getForId(randomUUID()).getCount(),
	isError("actor", "not_found"),
);
if (encoding === "json") {
	// The client retries not_found for get() handles (24 x 100 ms): run once.
	await assert.rejects(
		client.counter.get([tag, "missing"]).getCount(),
		isError("actor", "not_found"),
	);
}

step("compound and unusual keys");
const odd = client.counter.getOrCreate([tag, "a/b", "", "c\\d"]);
assert.equal(await odd.increment(1), 1);
summary.oddId = await odd.resolve();

step("a connection with params receives events caused by others");
const alice = room.connect({ name: "alice" });
const bob = room.connect({ name: "bob" });
const who = await alice.whoami();
assert.deepEqual(who.params, { name: "alice" });
assert.deepEqual(who.state, { name: "alice", sent: 0 });
summary.aliceConnId = who.id;
await bob.whoami(); // bob is connected
let fromHttp = nextEvent(alice, "newMessage");
await room.send_message("hello from http");
assert.deepEqual(await fromHttp, ["http", "hello from http"]);
const fromBob = nextEvent(alice, "newMessage");
assert.equal(await bob.send_message("hi alice"), 2);
assert.deepEqual(await fromBob, ["bob", "hi alice"]);
assert.equal((await bob.whoami()).state.sent, 1);
const whisper = nextEvent(alice, "whisper");
assert.equal(await bob.whisper("alice", "psst"), 1);
assert.deepEqual(await whisper, ["bob", "psst"]);
assert.deepEqual(await alice.names(), ["alice", "bob"]);
// Unsubscribed events stop arriving.
let unexpected = 0;
const off = alice.on("joined", () => unexpected++);
off();
fromHttp = nextEvent(alice, "newMessage");
await room.send_message("still here");
await fromHttp;
assert.equal(unexpected, 0);

step("UserError with metadata, over HTTP and WebSocket");
await assert.rejects(counter.add_note_then_fail("x"), (error) => {
	isError("user", "refused")(error);
	assert.equal(error.message, "refused on purpose");
	assert.deepEqual(error.metadata, { text: "x" });
	return true;
});
const counterConn = counter.connect();
await assert.rejects(counterConn.add_note_then_fail("y"), (error) => {
	isError("user", "refused")(error);
	assert.deepEqual(error.metadata, { text: "y" });
	return true;
});
assert.equal(await counterConn.getCount(), 5, "the failed actions rolled back");
await assert.rejects(counterConn.nope(), isError("actor", "action_not_found"));
await assert.rejects(counter.nope(), isError("actor", "action_not_found"));
// Calls on one connection keep working after errors.
assert.equal(await counterConn.increment(1), 6);
await counterConn.dispose();

step("on_auth refuses a missing token, admits the right one");
const vault = client.vault.getOrCreate([tag]);
await assert.rejects(vault.open(), isError("actor", "forbidden"));
const refused = vault.connect();
const connError = new Promise((resolve) => refused.onError(resolve));
await assert.rejects(refused.open(), isError("actor", "forbidden"));
isError("actor", "forbidden")(await connError);
await refused.dispose();
const trusted = createClient({ endpoint, encoding, token: "open-sesame" });
const open = trusted.vault.getOrCreate([tag]);
assert.equal(await open.open(), 1);
const vaultConn = open.connect();
assert.equal(await vaultConn.open(), 2);
await vaultConn.dispose();
summary.vaultId = await open.resolve();
assert.equal(await trusted.vault.getForId(summary.vaultId).open(), 3);

step("queue sends");
assert.equal(await room.send("inbox", { n: 0 }), undefined);
assert.deepEqual(await room.send("inbox", { n: 1 }, { wait: true, timeout: 10000 }), {
	status: "completed",
	response: { got: { n: 1 } },
});
await assert.rejects(room.send("nope", 1), isError("actor", "action_not_found"));

step("raw requests");
const response = await room.fetch("/some/path?x=1");
assert.equal(response.status, 200);
const body = await response.json();
assert.equal(body.method, "GET");
assert.equal(body.path, "some/path");
const hook = client.webhook.getOrCreate([tag]);
const post = await hook.fetch("/", { method: "POST", body: "ping" });
assert.equal(await post.text(), "1");

step("disposing a connection runs on_disconnect");
const left = nextEvent(alice, "left");
await bob.dispose();
assert.deepEqual(await left, ["bob"]);
await alice.dispose();
summary.roomId = await room.resolve();

console.log(JSON.stringify(summary));
process.exit(0);
