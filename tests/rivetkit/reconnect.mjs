// Connections in every encoding survive a server restart.
//
//   node reconnect.mjs <endpoint> <tag>
//
// Prints READY once connected, waits for a line on stdin (the test restarts
// the server meanwhile), then checks that each connection came back by
// itself: its calls work and broadcasts reach it again.
import assert from "node:assert/strict";
import { createInterface } from "node:readline";
import { loadClient } from "./client.mjs";

const [endpoint, tag] = process.argv.slice(2);
const { createClient } = await loadClient();
const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();

function nextEvent(conn, event) {
	return new Promise((resolve) => {
		const off = conn.on(event, (...args) => {
			off();
			resolve(args);
		});
	});
}

const sessions = [];
for (const encoding of ["bare", "json", "cbor"]) {
	const client = createClient({ endpoint, encoding });
	const handle = client.counter.getOrCreate([tag, encoding]);
	const conn = handle.connect();
	const session = { encoding, handle, conn, opens: 0, statuses: [] };
	conn.onOpen(() => session.opens++);
	conn.onStatusChange((status) => session.statuses.push(status));
	conn.on("changed", () => {}); // subscribed before and after the restart
	assert.equal(await conn.increment(1), 1);
	sessions.push(session);
}
console.log("READY");
await lines.next(); // the server restarted

for (const session of sessions) {
	const { encoding, handle, conn } = session;
	const deadline = Date.now() + 20000;
	while (session.opens < 2) {
		assert.ok(Date.now() < deadline, `${encoding}: no reconnect (${session.statuses})`);
		await new Promise((resolve) => setTimeout(resolve, 20));
	}
	assert.ok(session.statuses.includes("disconnected"), `${encoding}: ${session.statuses}`);
	assert.equal(conn.connStatus, "connected");
	const changed = nextEvent(conn, "changed");
	assert.equal(await handle.increment(10), 11, `${encoding}: state survived`);
	assert.deepEqual(await changed, [11], `${encoding}: broadcast after reconnect`);
	assert.equal(await conn.getCount(), 11);
	await conn.dispose();
}
console.log(JSON.stringify({ reconnected: sessions.map((s) => s.encoding) }));
process.exit(0);
