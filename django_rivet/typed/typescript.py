"""JSON Schemas written as TypeScript types.

Covers what :mod:`.jsonschema` produces: ``$ref`` to a definition (a named
type), ``enum``/``const`` (literal unions), ``anyOf``/``oneOf``/``allOf``,
``type`` (one or several), arrays (``items``, tuples with
``prefixItems``) and objects (``properties``/``required``, and
``additionalProperties`` as an index signature). Anything else is
``unknown``: never wrong, only less precise.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["declarations", "property_name", "type_name", "typescript"]

_IDENTIFIER = re.compile(r"^[A-Za-z_$][A-Za-z0-9_$]*$")
_PRIMITIVES = {
    "string": "string",
    "integer": "number",
    "number": "number",
    "boolean": "boolean",
    "null": "null",
}


def type_name(definition: str) -> str:
    """Return a definition's name as a TypeScript identifier (``Line-Input``...)."""
    name = re.sub(r"[^A-Za-z0-9_$]", "_", definition)
    return name if _IDENTIFIER.match(name) else f"_{name}"


def property_name(name: str) -> str:
    """Return ``name`` as a property key (quoted unless an identifier)."""
    return name if _IDENTIFIER.match(name) else json.dumps(name)


def typescript(schema: Any, indent: str = "") -> str:
    """Return the TypeScript type of ``schema``."""
    if schema is True or schema == {}:
        return "unknown"
    if not isinstance(schema, dict):
        return "never" if schema is False else "unknown"
    if "$ref" in schema:
        return type_name(str(schema["$ref"]).rsplit("/", 1)[-1])
    if "const" in schema:
        return json.dumps(schema["const"])
    if "enum" in schema:
        return _union([json.dumps(value) for value in schema["enum"]])
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return _union([typescript(part, indent) for part in schema[key]])
    if "allOf" in schema:
        parts = [typescript(part, indent) for part in schema["allOf"]]
        return " & ".join(_grouped(part) for part in parts) or "unknown"
    kind = schema.get("type")
    if isinstance(kind, list):
        return _union([typescript({**schema, "type": one}, indent) for one in kind])
    if kind == "array":
        return _array(schema, indent)
    if kind == "object" or "properties" in schema:
        return _object(schema, indent)
    return _PRIMITIVES.get(str(kind), "unknown")


def _array(schema: dict[str, Any], indent: str) -> str:
    prefix = schema.get("prefixItems")
    if isinstance(prefix, list):
        members = [typescript(item, indent) for item in prefix]
        rest = schema.get("items")
        if rest not in (None, False) and schema.get("maxItems") != len(prefix):
            members.append(f"...{_grouped(typescript(rest, indent))}[]")
        return f"[{', '.join(members)}]"
    items = schema.get("items")
    element = "unknown" if items is None else typescript(items, indent)
    return f"{_grouped(element)}[]"


def _object(schema: dict[str, Any], indent: str) -> str:
    properties: dict[str, Any] = schema.get("properties") or {}
    extra = schema.get("additionalProperties")
    if not properties:
        if extra is False:
            return "Record<string, never>"
        value = "unknown" if extra in (None, True) else typescript(extra, indent)
        return f"Record<string, {value}>"
    required = set(schema.get("required") or ())
    inner = indent + "  "
    lines = []
    for name, field in properties.items():
        optional = "" if name in required else "?"
        text = typescript(field, inner)
        lines.append(f"{inner}{property_name(name)}{optional}: {text};")
    if isinstance(extra, dict) and extra:
        lines.append(f"{inner}[key: string]: {typescript(extra, inner)} | undefined;")
    return "{\n" + "\n".join(lines) + f"\n{indent}}}"


def _union(parts: list[str]) -> str:
    unique = list(dict.fromkeys(parts))
    if not unique:
        return "never"
    if "unknown" in unique:
        return "unknown"
    if len(unique) == 1:
        return unique[0]
    return " | ".join(_grouped(part) for part in unique)


def _grouped(text: str) -> str:
    # A union or intersection inside an array or another operator.
    if (" | " in text or " & " in text) and not text.startswith(("{", "[")):
        return f"({text})"
    return text


def declarations(definitions: dict[str, Any]) -> list[str]:
    """Return ``export type Name = ...;`` for each shared definition."""
    return [
        f"export type {type_name(name)} = {typescript(schema)};"
        for name, schema in sorted(definitions.items())
    ]
