// P11's baseline: @rivetkit/workflow-engine running N trivial async steps on
// a no-latency in-memory driver (the package's InMemoryDriver with every
// `await sleep(latency)` removed: even sleep(0) is a >= 1 ms timer in Node).
//
// Protocol: one line "N" on stdin runs one workflow of N steps; the answer is
// one line with the elapsed milliseconds. The process stays up between
// trials so the JIT stays warm, as a long-running server's would.
import { createInterface } from "node:readline";
import { InMemoryDriver, runWorkflow } from "@rivetkit/workflow-engine/testing";

const hex = (key) => Buffer.from(key).toString("hex");
const compare = (a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b));
const startsWith = (key, prefix) =>
	key.length >= prefix.length &&
	Buffer.compare(Buffer.from(key.subarray(0, prefix.length)), Buffer.from(prefix)) === 0;

class NoLatencyDriver extends InMemoryDriver {
	constructor() {
		super();
		this.latency = 0;
		this.store = new Map();
		this.alarmTimes = new Map();
	}
	async get(key) {
		return this.store.get(hex(key))?.value ?? null;
	}
	async set(key, value) {
		this.store.set(hex(key), { key, value });
	}
	async delete(key) {
		this.store.delete(hex(key));
	}
	async batchDelete(keys) {
		for (const key of keys) this.store.delete(hex(key));
	}
	async deletePrefix(prefix) {
		for (const [h, entry] of this.store) {
			if (startsWith(entry.key, prefix)) this.store.delete(h);
		}
	}
	async deleteRange(start, end) {
		for (const [h, entry] of this.store) {
			if (compare(entry.key, start) >= 0 && compare(entry.key, end) < 0) {
				this.store.delete(h);
			}
		}
	}
	async list(prefix) {
		const out = [];
		for (const entry of this.store.values()) {
			if (startsWith(entry.key, prefix)) out.push({ key: entry.key, value: entry.value });
		}
		return out.sort((a, b) => compare(a.key, b.key));
	}
	async batch(writes) {
		for (const { key, value } of writes) this.store.set(hex(key), { key, value });
	}
	async setAlarm(workflowId, wakeAt) {
		this.alarmTimes.set(workflowId, wakeAt);
	}
	async clearAlarm(workflowId) {
		this.alarmTimes.delete(workflowId);
	}
}

async function steps(ctx, count) {
	for (let index = 0; index < count; index++) {
		await ctx.step(`s${index}`, async () => index);
	}
	return count;
}

let counter = 0;
async function trial(count) {
	const driver = new NoLatencyDriver();
	const started = process.hrtime.bigint();
	const result = await runWorkflow(`wf-${counter++}`, steps, count, driver).result;
	const elapsed = Number(process.hrtime.bigint() - started) / 1e6;
	if (result.state !== "completed" || result.output !== count) {
		throw new Error(`unexpected result ${JSON.stringify(result)}`);
	}
	return elapsed;
}

const lines = createInterface({ input: process.stdin });
for await (const line of lines) {
	if (!line.trim()) continue;
	const elapsed = await trial(Number(line));
	process.stdout.write(`${elapsed}\n`);
}
