"""``manage.py rivet_openapi`` and ``GET /rivet/openapi.json``.

The document validates as OpenAPI 3.1 (``openapi-spec-validator``), and a
request built from it alone -- its path, its body made from the operation's
schema -- succeeds, with an answer that fits the response schema.
"""

from __future__ import annotations

import json
from io import StringIO

import jsonschema
import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from openapi_spec_validator import validate

pytestmark = pytest.mark.django_db

ACTION = "/rivet/actors/typedShop/actions/echo"


def openapi_document():
    out = StringIO()
    call_command("rivet_openapi", stdout=out)
    return json.loads(out.getvalue())


def check(doc, schema, value):
    """Validate ``value``; the document's components resolve ``#/components/..``."""
    rooted = {**schema, "components": doc["components"]}
    jsonschema.Draft202012Validator(rooted).validate(value)


def example(doc, schema):
    """Build a value that fits ``schema``: the first choice everywhere."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return example(doc, doc["components"]["schemas"][name])
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return example(doc, schema[key][-1])
    kind = schema.get("type")
    if kind == "object":
        properties = schema.get("properties", {})
        return {
            name: example(doc, properties[name]) for name in schema.get("required", [])
        }
    if kind == "array":
        if "prefixItems" in schema:
            return [example(doc, item) for item in schema["prefixItems"]]
        return [example(doc, schema["items"])] if schema.get("minItems") else []
    if kind == "integer":
        return max(schema.get("exclusiveMinimum", 0) + 1, schema.get("minimum", 1))
    return {"string": "12.50", "number": 1.5, "boolean": True, "null": None}.get(
        kind, "x"
    )


def test_the_document_validates_and_describes_actions_from_their_annotations():
    doc = openapi_document()
    validate(doc)
    operation = doc["paths"][ACTION]["post"]
    assert operation["operationId"] == "typedShop.echo"
    body = operation["requestBody"]["content"]["application/json"]["schema"]
    assert body["properties"]["args"]["prefixItems"] == [
        {"$ref": "#/components/schemas/Order-Input"}
    ]
    schemas = doc["components"]["schemas"]
    assert schemas["Line-Input"]["properties"]["price"] == {
        "anyOf": [{"type": "number"}, {"type": "string"}],
        "title": "Price",
    }
    assert schemas["Line-Output"]["properties"]["price"]["type"] == "string"
    assert schemas["Color"]["enum"] == ["red", "blue"]
    queue = doc["paths"]["/rivet/actors/typedShop/queue/orders"]["post"]
    assert queue["operationId"] == "typedShop.queue.orders"
    # Server-only classes answer as unknown names: not described.
    assert any("/actors/ledger" in path for path in doc["paths"])
    assert not any("/actors/backOffice" in path for path in doc["paths"])


@pytest.mark.django_db(transaction=True)
def test_a_request_built_from_the_document_succeeds(client):
    doc = openapi_document()
    operation = doc["paths"][ACTION]["post"]
    schema = operation["requestBody"]["content"]["application/json"]["schema"]
    body = {"args": example(doc, schema["properties"]["args"])}
    check(doc, schema, body)
    response = client.post(ACTION + "?key=doc", body, content_type="application/json")
    assert response.status_code == 200, response.content
    answer = operation["responses"]["200"]["content"]["application/json"]["schema"]
    check(doc, answer, response.json())
    assert response.json()["output"] == body["args"][0]


def test_the_route_is_off_by_default_and_staff_only_when_on(client, settings):
    assert client.get("/rivet/openapi.json").status_code == 404
    settings.RIVET = {"OPENAPI": "staff"}
    assert client.get("/rivet/openapi.json").status_code == 404
    staff = User.objects.create_user("ops", password="x", is_staff=True)
    client.force_login(staff)
    response = client.get("/rivet/openapi.json")
    assert response.status_code == 200
    assert response.json() == openapi_document()
    client.logout()
    settings.RIVET = {"OPENAPI": "public"}
    assert client.get("/rivet/openapi.json").status_code == 200
