// Pre-bundle the client's dependencies for a browser, as Vite's dev server
// does: each bare import of rivetkit's browser build becomes one ES module
// (esbuild turns the CommonJS ones, such as invariant and pino, into ESM).
// The client itself is not bundled: the page imports its unchanged
// dist/browser/client.js through an import map.
//
//   node prebundle.mjs <outdir>
//
// Prints the import map (JSON) mapping each specifier to a file in outdir.
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { pathToFileURL } from "node:url";

const [outdir] = process.argv.slice(2);
const modules = process.env.RIVETKIT_MODULES;
const esbuild = await import(
	pathToFileURL(join(modules, "esbuild", "lib", "main.js")).href
);
const pkg = JSON.parse(readFileSync(join(modules, "rivetkit", "package.json"), "utf8"));
const client = pkg.exports["./client"].import.browser.default;
const source = readFileSync(join(modules, "rivetkit", client), "utf8");
const specifiers = [
	...new Set([...source.matchAll(/from "([^".][^"]*)"/g)].map((m) => m[1])),
];

const imports = { "rivetkit/client": `/node_modules/rivetkit/${client.replace(/^\.\//, "")}` };
const IDENTIFIER = /^[A-Za-z_$][A-Za-z0-9_$]*$/;
for (const specifier of specifiers) {
	const name = specifier.replace(/[^a-zA-Z0-9]+/g, "_");
	const bundled = join(outdir, `${name}.bundle.js`);
	await esbuild.build({
		entryPoints: [specifier],
		absWorkingDir: dirname(modules),
		bundle: true,
		format: "esm",
		platform: "browser",
		outfile: bundled,
		logLevel: "error",
		// As Vite does: CommonJS dependencies read process.env.NODE_ENV.
		define: { "process.env.NODE_ENV": JSON.stringify("development") },
	});
	// A CommonJS module bundles to a default export only; re-export its
	// properties by name too, as Vite's pre-bundling does.
	const loaded = await import(pathToFileURL(bundled).href);
	const names = Object.keys(loaded).filter((key) => key !== "default");
	const value = loaded.default;
	let wrapper = `export * from "./${name}.bundle.js";\n`;
	if ("default" in loaded) {
		wrapper += `import value from "./${name}.bundle.js";\nexport default value;\n`;
	}
	if (names.length === 0 && value && ["object", "function"].includes(typeof value)) {
		const own = Object.keys(value).filter((key) => IDENTIFIER.test(key) && key !== "default");
		if (own.length) wrapper += `export const { ${own.join(", ")} } = value;\n`;
	}
	writeFileSync(join(outdir, `${name}.js`), wrapper);
	imports[specifier] = `/deps/${name}.js`;
}
console.log(JSON.stringify({ imports }));
