"""``manage.py rivet_typescript``: what it writes, and tsc checking calls with it.

The compiler is the npm ``typescript`` package, installed by the test into
the node cache (tests/support/rivetkit_node.py); the RivetKit registry is
checked against the pinned ``rivetkit`` package's own types.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command

from tests.support.rivetkit_node import install_package, install_rivetkit
from tests.support.servers import ROOT

TYPESCRIPT = "5.9.3"
RIVETKIT = "2.3.19"
STATIC = ROOT / "django_rivet" / "static" / "django_rivet"

# Calls a typed rivet.js client accepts: every type through the registry.
GOOD = """\
import { createClient } from "./rivet.js";
import type { OrderOutput, RivetRegistry } from "./registry";

const shop = createClient<RivetRegistry>("/rivet").actor("typedShop", "k");

export async function main(): Promise<string> {
  const order: OrderOutput = await shop.call("echo", {
    id: "o",
    lines: [{ sku: "a", price: "1.50", qty: 2 }],
    totals: { total: 3, color: "red" },
    kind: "retail",
  });
  const total: string = await shop.call("add", { sku: "a", price: "1" }, "note");
  const conn = shop.connect({ name: "ann" });
  conn.on("added", (line) => console.log(line.price.toUpperCase()));
  await shop.send("orders", order, { wait: true });
  const untyped = createClient("/rivet").actor("anyName").call("anything", 1);
  return order.totals.total + total + String(await untyped);
}
"""
# The same client, one argument of the wrong type.
WRONG = GOOD.replace('{ sku: "a", price: "1" }, "note"', '{ sku: "a", price: true }')

RIVETKIT_GOOD = """\
import { createClient } from "rivetkit/client";
import type { RivetKitRegistry } from "./registry";

const shop = createClient<RivetKitRegistry>("http://localhost/rivet")
  .typedShop.getOrCreate(["k"]);

export async function main(): Promise<string> {
  const line = await shop.echo_line({ sku: "a", price: 1.5 });
  await shop.send("orders", {
    id: "o", lines: [], totals: { total: "0", color: "blue" }, kind: "retail",
  });
  const conn = shop.connect({ name: "ann" });
  return line.price + (await conn.total());
}
"""
RIVETKIT_WRONG = RIVETKIT_GOOD.replace('kind: "retail"', 'kind: "gift"')


def generate(*args):
    out = StringIO()
    call_command("rivet_typescript", *args, stdout=out)
    return out.getvalue()


def test_it_writes_each_actor_as_types_from_the_annotations(tmp_path):
    target = tmp_path / "registry.d.ts"
    out = StringIO()
    call_command("rivet_typescript", "-o", str(target), stdout=out)
    assert out.getvalue().startswith("Wrote ")
    text = target.read_text()
    assert text == generate()
    assert (
        "export type LineInput = {\n  sku: string;\n  price: number | string;" in text
    )
    assert (
        "export type LineOutput = {\n  sku: string;\n  price: string;\n  qty: number;"
        in text
    )
    assert 'export type Color = "red" | "blue";' in text
    assert "add: { args: [line: LineInput, note?: string]; result: string };" in text
    assert "orders: { body: OrderInput; response: TotalsOutput };" in text
    assert "added: [LineOutput];" in text
    assert "connParams: ConnInfo | null;" in text
    # Unannotated actions take and return any value; builtin annotations map.
    assert "increment: { args: [by?: number]; result: unknown };" in text
    assert "rivetkit" not in text


def compile_typescript(folder: Path, files: list[str]) -> str:
    """Run tsc (strict) over ``files`` in ``folder``; return its output."""
    modules = install_package("typescript", TYPESCRIPT)
    config = {
        "compilerOptions": {
            "strict": True, "noEmit": True, "target": "es2022", "module": "esnext",
            "moduleResolution": "bundler", "skipLibCheck": True,
            "lib": ["es2022", "dom"],
        },
        "files": files,
    }  # fmt: skip
    import json

    (folder / "tsconfig.json").write_text(json.dumps(config))
    proc = subprocess.run(
        ["node", str(modules / "typescript" / "bin" / "tsc"), "-p", "."],
        cwd=folder, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    return proc.stdout + proc.stderr


def errors_by_file(output: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for match in re.finditer(r"^(\S+?)\(\d+,\d+\): error (TS\d+: .*)$", output, re.M):
        found.setdefault(match.group(1), []).append(match.group(2))
    return found


@pytest.mark.servers  # runs node: with the other tests that need it
def test_tsc_accepts_typed_clients_and_rejects_a_wrong_argument(tmp_path):
    shutil.copy(STATIC / "rivet.js", tmp_path)
    shutil.copy(STATIC / "rivet.d.ts", tmp_path)
    (tmp_path / "registry.ts").write_text(generate("--rivetkit"))
    (tmp_path / "node_modules").symlink_to(install_rivetkit(RIVETKIT))
    sources = {
        "good.ts": GOOD,
        "wrong.ts": WRONG,
        "rivetkit_good.ts": RIVETKIT_GOOD,
        "rivetkit_wrong.ts": RIVETKIT_WRONG,
    }
    for name, text in sources.items():
        (tmp_path / name).write_text(text)
    output = compile_typescript(tmp_path, list(sources))
    errors = errors_by_file(output)
    assert set(errors) == {"wrong.ts", "rivetkit_wrong.ts"}, output
    assert errors["wrong.ts"] == [
        "TS2322: Type 'boolean' is not assignable to type 'string | number'."
    ]
    assert len(errors["rivetkit_wrong.ts"]) == 1
    assert 'Type \'"gift"\' is not assignable to type \'"retail" | "wholesale"\'' in (
        output
    )
