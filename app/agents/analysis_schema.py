"""The rules of an agent's `analysis_schema`: a valid JSON Schema (draft 2020-12) of an
object, small enough to hand a model as a function's parameters, and with no reference
outside itself (a `$ref` to a URL would make validation fetch it)."""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from app.core.jsonutil import dumps

MAX_SCHEMA_BYTES = 16 * 1024
MAX_PROPERTIES = 50
MAX_CRITERIA_LENGTH = 2_000


def _remote_refs(node: Any) -> list[str]:
    found: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("$ref", "$dynamicRef") and isinstance(value, str):
                if not value.startswith("#"):
                    found.append(value)
            else:
                found.extend(_remote_refs(value))
    elif isinstance(node, list):
        for item in node:
            found.extend(_remote_refs(item))
    return found


def check_analysis_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema as stored, or ValueError naming what is wrong with it."""
    if len(dumps(schema)) > MAX_SCHEMA_BYTES:
        raise ValueError(f"analysis_schema must serialize to at most {MAX_SCHEMA_BYTES} bytes")
    if schema.get("type") != "object":
        raise ValueError('analysis_schema must be a JSON Schema with "type": "object"')
    properties = schema.get("properties")
    if not isinstance(properties, dict) or not properties:
        raise ValueError("analysis_schema.properties must name at least one field to extract")
    if len(properties) > MAX_PROPERTIES:
        raise ValueError(f"analysis_schema may name at most {MAX_PROPERTIES} properties")
    remote = _remote_refs(schema)
    if remote:
        raise ValueError(f"analysis_schema may only refer within itself; found $ref {remote[0]}")
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        where = "/".join(str(part) for part in exc.path)
        raise ValueError(
            f"analysis_schema is not a valid JSON Schema: {exc.message[:200]}"
            + (f" (at {where})" if where else "")
        ) from None
    return schema
