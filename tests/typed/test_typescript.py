"""typed.typescript: JSON Schemas as TypeScript types."""

from __future__ import annotations

import pytest

from django_rivet.typed.typescript import declarations, type_name, typescript


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        ({}, "unknown"),
        ({"type": "string"}, "string"),
        ({"type": "integer"}, "number"),
        ({"type": ["string", "null"]}, "string | null"),
        ({"enum": ["a", 1, None]}, '"a" | 1 | null'),
        ({"const": "x"}, '"x"'),
        ({"anyOf": [{"type": "number"}, {"type": "string"}]}, "number | string"),
        ({"anyOf": [{}, {"type": "string"}]}, "unknown"),
        ({"$ref": "#/$defs/Line-Input"}, "LineInput"),
        ({"type": "array", "items": {"type": "string"}}, "string[]"),
        (
            {
                "type": "array",
                "items": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            },
            "(string | null)[]",
        ),
        (
            {
                "type": "array",
                "prefixItems": [{"type": "string"}, {"type": "integer"}],
                "maxItems": 2,
            },
            "[string, number]",
        ),  # fmt: skip
        ({"type": "object"}, "Record<string, unknown>"),
        (
            {"type": "object", "additionalProperties": {"type": "integer"}},
            "Record<string, number>",
        ),
        (
            {
                "type": "object",
                "properties": {"a b": {"type": "string"}, "c": {}},
                "required": ["a b"],
            },
            '{\n  "a b": string;\n  c?: unknown;\n}',
        ),  # fmt: skip
    ],
)
def test_schemas_become_typescript_types(schema, expected):
    assert typescript(schema) == expected


def test_definitions_become_exported_types_with_identifier_names():
    assert type_name("Line-Output") == "LineOutput"
    assert type_name("1st") == "_1st"
    assert declarations({"B": {"type": "string"}, "A-Input": {"type": "integer"}}) == [
        "export type AInput = number;",
        "export type B = string;",
    ]
