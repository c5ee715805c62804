// Load the unchanged official client from the node_modules folder the test
// installed it in (RIVETKIT_MODULES), through its package "exports".
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

export async function loadClient() {
	const modules = process.env.RIVETKIT_MODULES;
	if (!modules) throw new Error("RIVETKIT_MODULES is not set");
	const root = join(modules, "rivetkit");
	const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
	const entry = pkg.exports["./client"].import.default;
	const mod = await import(pathToFileURL(join(root, entry)).href);
	return { ...mod, version: pkg.version };
}
