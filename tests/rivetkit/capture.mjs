// Record the bytes the unchanged client and the server exchange.
//
//   node capture.mjs <endpoint> <tag>
//
// The client itself is not touched: the script only wraps the WebSocket
// class and fetch() it finds in the global scope, to copy what goes through
// them. It makes the same calls in each encoding and prints one JSON object
// mapping encoding -> {sent: [hex...], received: [hex...]} per channel, which
// tests/transport/rivetkit/test_bare.py compares with the committed fixtures.
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { loadClient } from "./client.mjs";

const [endpoint, tag] = process.argv.slice(2);
const ws = await import(
	pathToFileURL(join(process.env.RIVETKIT_MODULES, "ws", "wrapper.mjs")).href
);

let current; // the traffic record of the encoding being exercised
const hex = (data) => Buffer.from(data).toString("hex");

globalThis.WebSocket = class RecordingWebSocket extends ws.default {
	constructor(url, protocols) {
		super(url, protocols);
		const record = current.ws;
		this.on("message", (data) => record.received.push(hex(data)));
		this.record = record;
	}
	send(data, ...rest) {
		this.record.sent.push(hex(typeof data === "string" ? Buffer.from(data) : data));
		return super.send(data, ...rest);
	}
};

const originalFetch = globalThis.fetch;
globalThis.fetch = async (input, init) => {
	const request = new Request(input, init);
	if (!request.url.includes("/gateway/") || !request.body) {
		return originalFetch(request);
	}
	const body = Buffer.from(await request.clone().arrayBuffer());
	const response = await originalFetch(request);
	const copy = Buffer.from(await response.clone().arrayBuffer());
	const kind = request.url.includes("/action/") ? "action" : "queue";
	current.http.push({ kind, sent: hex(body), received: hex(copy) });
	return response;
};

const { createClient } = await loadClient();
const ECHO = [1, "two", new Uint8Array([3, 4]), 2n ** 62n, { nested: [true, null] }];
const traffic = {};

for (const encoding of ["bare", "json", "cbor"]) {
	current = traffic[encoding] = { http: [], ws: { sent: [], received: [] } };
	const client = createClient({ endpoint, encoding });
	const room = client.chatRoom.getOrCreate([tag, encoding]);
	await room.echo(ECHO);
	await room.send("inbox", { n: 1 }, { wait: true, timeout: 5000 });

	const conn = room.connect({ name: "cap" });
	const event = new Promise((resolve) => conn.on("newMessage", resolve));
	await conn.echo(ECHO);
	await conn.send_message("hi");
	await event;
	await conn.nope().catch(() => {});
	await conn.dispose();
}
console.log(JSON.stringify(traffic));
process.exit(0);
