// A raw WebSocket (handle.webSocket()) to an actor's on_websocket.
//
//   node websocket.mjs <endpoint> <tag>
//
// Two sockets of one `doc` actor: text frames are echoed to their sender,
// binary updates relayed to the other socket; a client with a wrong token
// is refused by on_auth (close 4403). The last line is a JSON summary.
import assert from "node:assert/strict";
import { loadClient } from "./client.mjs";

const [endpoint, tag] = process.argv.slice(2);
const { createClient, version } = await loadClient();
const summary = { version };

function step(name) {
	console.log(`-- ${name}`);
}

// Every message of `ws`, in order, for `next()` to take one at a time.
function inbox(ws) {
	const queued = [];
	const waiting = [];
	ws.addEventListener("message", (event) => {
		const waiter = waiting.shift();
		if (waiter) waiter(event.data);
		else queued.push(event.data);
	});
	return {
		next: () =>
			queued.length
				? Promise.resolve(queued.shift())
				: new Promise((resolve) => waiting.push(resolve)),
	};
}

function closed(ws) {
	return new Promise((resolve) =>
		ws.addEventListener("close", (event) => resolve(event.code)),
	);
}

const client = createClient({ endpoint, token: "doc-secret" });
const doc = client.doc.getOrCreate([tag]);

step("two raw sockets open; the actor speaks first");
const alice = await doc.webSocket("sync?room=1");
const aliceIn = inbox(alice);
assert.equal(await aliceIn.next(), "welcome");
const bob = await doc.webSocket();
const bobIn = inbox(bob);
assert.equal(await bobIn.next(), "welcome");

step("text frames are echoed to their sender");
alice.send("hello");
assert.equal(await aliceIn.next(), "echo:hello");

step("binary updates reach the other socket, bytes intact");
alice.send(new Uint8Array([0, 1, 2, 255]));
const update = await bobIn.next();
assert.ok(update instanceof ArrayBuffer, `got ${typeof update}`);
assert.deepEqual([...new Uint8Array(update)], [0, 1, 2, 255]);
bob.send(new Uint8Array([7]));
assert.deepEqual([...new Uint8Array(await aliceIn.next())], [7]);
// Alice's own update never came back to her: her next message is this echo.
alice.send("ping");
assert.equal(await aliceIn.next(), "echo:ping");

step("the actor closes a socket with its own code");
const bobClosed = closed(bob);
bob.send("close");
assert.equal(await bobClosed, 4001);

step("a wrong token is refused by on_auth");
const intruder = createClient({ endpoint, token: "wrong" });
const refused = await intruder.doc.getOrCreate([tag]).webSocket();
const codes = [];
refused.addEventListener("message", (event) => codes.push(`message ${event.data}`));
codes.push(await closed(refused));
assert.deepEqual(codes, [4403]);

summary.docId = await doc.resolve();
const aliceClosed = closed(alice);
alice.close();
await aliceClosed;
console.log(JSON.stringify(summary));
process.exit(0);
