"""Turn a Google API discovery document's schemas into a strict JSON Schema (draft 2020-12).

Discovery documents (https://developers.google.com/discovery/v1/reference/apis) describe request bodies
with their own dialect: named schemas under "schemas", referenced by id ("$ref": "Tile", not a JSON
pointer), each with "type", "properties", "items", "additionalProperties", "enum" and "format".
Discovery leaves unknown fields unspecified; here an object accepts exactly the properties its schema
lists (additionalProperties: false), so a misspelt field fails offline instead of at `pulumi up` (or,
worse, being dropped), and output-only or deprecated fields are refused too.
"""
from __future__ import annotations

import importlib.resources
import json
from typing import Any

# Formats whose string shape matters to the API (discovery "format" values for type string).
_STRING_PATTERNS = {
    "google-duration": r"^-?[0-9]+(\.[0-9]{1,9})?s$",  # protobuf Duration JSON: "60s", "1.5s"
    "int64": r"^-?[0-9]+$",
    "uint64": r"^[0-9]+$",
}


def load_discovery(package: str, document: str) -> dict[str, Any]:
    """A discovery document shipped inside an installed package (read through importlib.resources, so
    it is the one that version of the package carries, wherever it is installed)."""
    path = importlib.resources.files(package).joinpath("discovery_cache", "documents", document)
    return json.loads(path.read_text(encoding="utf-8"))


def _convert(node: dict[str, Any], *, refuse_output_only: bool, refuse_deprecated: bool) -> dict[str, Any]:
    if "$ref" in node:
        return {"$ref": f"#/$defs/{node['$ref']}"}
    kind = node.get("type")
    out: dict[str, Any] = {}
    if kind == "any" or kind is None:
        return out  # "any" (protobuf Any/Value payloads): nothing to check
    out["type"] = kind
    if "enum" in node:
        out["enum"] = list(node["enum"])
    if kind == "string" and node.get("format") in _STRING_PATTERNS:
        out["pattern"] = _STRING_PATTERNS[node["format"]]
    if kind == "integer" and node.get("format") == "int32":
        out["minimum"], out["maximum"] = -2**31, 2**31 - 1
    if kind == "array":
        out["items"] = _convert(node.get("items", {}), refuse_output_only=refuse_output_only,
                                refuse_deprecated=refuse_deprecated)
    if kind == "object":
        properties = {}
        for name, prop in node.get("properties", {}).items():
            if (refuse_output_only and prop.get("readOnly")) or (refuse_deprecated and prop.get("deprecated")):
                continue  # not listed, so additionalProperties: false rejects it
            properties[name] = _convert(prop, refuse_output_only=refuse_output_only,
                                        refuse_deprecated=refuse_deprecated)
        out["properties"] = properties
        if "additionalProperties" in node:
            # A map (e.g. Dashboard.labels): any key, values of the given schema.
            out["additionalProperties"] = _convert(node["additionalProperties"],
                                                   refuse_output_only=refuse_output_only,
                                                   refuse_deprecated=refuse_deprecated)
        else:
            out["additionalProperties"] = False
    return out


def to_json_schema(discovery: dict[str, Any], root: str, *, refuse_output_only: bool = True,
                   refuse_deprecated: bool = True) -> dict[str, Any]:
    """JSON Schema for the discovery schema `root`, every named schema under $defs."""
    schemas = discovery["schemas"]
    if root not in schemas:
        raise KeyError(f"{root} is not a schema of {discovery.get('id')}")
    definitions = {name: _convert(schema, refuse_output_only=refuse_output_only,
                                  refuse_deprecated=refuse_deprecated)
                   for name, schema in schemas.items()}
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$ref": f"#/$defs/{root}",
            "$defs": definitions}
