// Sequential round trips of one action from Node, the official RivetKit
// client against django-rivet's own protocol, on the same daphne.
//
//   RIVETKIT_MODULES=<node_modules> node rivetkit_rt.mjs <endpoint> <n> <rounds>
//
// Measures, interleaved in rounds (other processes share the cores):
//   own_http      fetch POST actors/bench/actions/increment (the own protocol)
//   own_ws        one WebSocket, {type: "action"} frames (the own protocol)
//   rk_http_<enc> client.bench.getOrCreate(key).increment() (gateway, HTTP)
//   rk_ws_<enc>   conn.increment() on one connection of the official client
// Prints one JSON object: per measure, n, median_us, p99_us, mean_us.
import { createRequire } from "node:module";
import { join } from "node:path";
import { loadClient } from "../tests/rivetkit/client.mjs";

const [endpoint, n, rounds] = process.argv.slice(2);
const N = Number(n);
const ROUNDS = Number(rounds);
const require = createRequire(join(process.env.RIVETKIT_MODULES, "rivetkit", "package.json"));
const WebSocket = require("ws");
const { createClient, version } = await loadClient();
const KEY = "one";

const measures = {};

measures.own_http = async () => {
	const response = await fetch(`${endpoint}/actors/bench/actions/increment?key=${KEY}`, {
		method: "POST",
		headers: { "content-type": "application/json" },
		body: '{"args":[]}',
	});
	if (response.status !== 200) throw new Error(await response.text());
	await response.json();
};

const ownWs = new WebSocket(
	`${endpoint.replace(/^http/, "ws")}/actors/bench/connect?key=${KEY}`,
	["rivet"],
);
const pending = new Map();
let nextId = 1;
await new Promise((resolve, reject) => {
	ownWs.once("message", resolve); // init
	ownWs.once("error", reject);
});
ownWs.on("message", (data) => {
	const reply = JSON.parse(data.toString());
	pending.get(reply.id)?.(reply);
	pending.delete(reply.id);
});
measures.own_ws = () =>
	new Promise((resolve, reject) => {
		const id = nextId++;
		pending.set(id, (reply) =>
			reply.type === "action_response" ? resolve() : reject(new Error(JSON.stringify(reply))),
		);
		ownWs.send(JSON.stringify({ type: "action", id, name: "increment", args: [] }));
	});

const conns = [];
for (const encoding of ["bare", "json", "cbor"]) {
	const client = createClient({ endpoint, encoding, devtools: false });
	const handle = client.bench.getOrCreate([KEY]);
	measures[`rk_http_${encoding}`] = () => handle.increment();
	const conn = handle.connect();
	conns.push(conn);
	measures[`rk_ws_${encoding}`] = () => conn.increment();
}

const times = Object.fromEntries(Object.keys(measures).map((name) => [name, []]));
for (const fn of Object.values(measures)) for (let i = 0; i < 50; i++) await fn();
const perRound = Math.max(Math.floor(N / ROUNDS), 1);
for (let r = 0; r < ROUNDS; r++) {
	for (const [name, fn] of Object.entries(measures)) {
		for (let i = 0; i < perRound; i++) {
			const start = process.hrtime.bigint();
			await fn();
			times[name].push(Number(process.hrtime.bigint() - start) / 1000);
		}
	}
}
const results = { version };
for (const [name, samples] of Object.entries(times)) {
	samples.sort((a, b) => a - b);
	const mean = samples.reduce((a, b) => a + b, 0) / samples.length;
	results[name] = {
		n: samples.length,
		median_us: samples[Math.floor(samples.length / 2)],
		p99_us: samples[Math.floor(samples.length * 0.99) - 1],
		mean_us: mean,
		round_trips_per_s: 1e6 / mean,
	};
}
for (const conn of conns) await conn.dispose();
ownWs.close();
console.log(JSON.stringify(results));
process.exit(0);
