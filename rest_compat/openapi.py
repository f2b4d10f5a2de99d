"""OpenAPI 3.1 document built from the Operation table, so it cannot drift from the routes."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

from pydantic import BaseModel

from app.kit.http_errors import ErrorStyle
from rest_compat.endpoint import Operation

REF = "#/components/schemas/{model}"

_AUTH_ERROR = {
    "type": "object",
    "required": ["error", "detail"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message", "type"],
            "properties": {
                "code": {
                    "type": "string",
                    "enum": ["invalid_api_key", "insufficient_scope", "livemode_mismatch"],
                },
                "message": {"type": "string"},
                "type": {"type": "string", "const": "authentication_error"},
            },
        },
        "detail": {"type": "string"},
    },
}
_RATE_LIMIT_ERROR = {
    "type": "object",
    "required": ["error", "message", "retry_after"],
    "properties": {
        "error": {"type": "string", "const": "rate_limit_exceeded"},
        "message": {"type": "string"},
        "retry_after": {"type": "number"},
    },
}
_DETAIL_ERROR = {
    "type": "object",
    "required": ["detail"],
    "properties": {"detail": {"type": "string"}},
}
_VALIDATION_ERROR = {
    "type": "object",
    "required": ["detail"],
    "properties": {
        "detail": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["loc", "msg", "type"],
                "properties": {
                    "loc": {"type": "array", "items": {"type": ["string", "integer"]}},
                    "msg": {"type": "string"},
                    "type": {"type": "string"},
                },
            },
        }
    },
}
_AGENT_ERROR = {
    "type": "object",
    "required": ["error", "message"],
    "properties": {"error": {"type": "integer"}, "message": {"type": "string"}},
}
COMPONENT_SCHEMAS: dict[str, Any] = {
    "AuthenticationError": _AUTH_ERROR,
    "RateLimitError": _RATE_LIMIT_ERROR,
    "DetailError": _DETAIL_ERROR,
    "ValidationError": _VALIDATION_ERROR,
    "AgentError": _AGENT_ERROR,
}
_DESCRIPTIONS = {
    400: "Invalid request",
    413: "Request body larger than the limit (1 MiB by default)",
    415: "The body is not sent as application/json",
    401: "Missing, malformed, unknown, expired or revoked credential",
    403: "The credential lacks the required scope",
    404: "Not found (or owned by another organization)",
    409: "Conflict",
    422: "Request validation failed",
    429: "Rate limit exceeded",
    500: "Internal server error",
}


_UUID = {"type": "string", "format": "uuid"}
# NUL (U+0000) is refused in every string (PostgreSQL cannot store it): the document says so.
_NO_NUL = "^[^\\u0000]*$"


# Every free-form value (custom_fields, metadata, a template component's extra keys): JSON
# without NUL in strings or keys, numbers within ±(2^53-1) (beyond it every number is whole,
# so the integer branch's bounds cover `1e300` too, as JSON Schema reads it). Its nesting
# limit (32 levels) is in the description: a recursive schema cannot count.
_FREE_FORM = "FreeFormJson"
_FREE_FORM_REF = {"$ref": REF.format(model=_FREE_FORM)}
_FREE_FORM_SCHEMA = {
    "description": "Any JSON value nested at most 32 levels deep: no NUL (U+0000) in strings "
    "or keys, numbers between -(2^53-1) and 2^53-1",
    "anyOf": [
        {"type": "null"},
        {"type": "boolean"},
        {"type": "integer", "minimum": -(2**53 - 1), "maximum": 2**53 - 1},
        {"type": "number", "not": {"type": "integer"}},
        {"type": "string", "pattern": _NO_NUL},
        {"type": "array", "items": _FREE_FORM_REF},
        {
            "type": "object",
            "propertyNames": {"pattern": _NO_NUL},
            "additionalProperties": _FREE_FORM_REF,
        },
    ],
}


def _refuse_nul(node: Any) -> None:
    """Adds the NUL rule to every string schema under `node` (in place)."""
    if isinstance(node, list):
        for item in node:
            _refuse_nul(item)
        return
    if not isinstance(node, dict):
        return
    kinds = node.get("type")
    is_string = kinds == "string" or (isinstance(kinds, list) and "string" in kinds)
    if is_string and not {"enum", "const", "format"} & node.keys():
        if "pattern" not in node:
            node["pattern"] = _NO_NUL
        elif node["pattern"] != _NO_NUL:
            node.setdefault("allOf", []).append({"pattern": _NO_NUL})
    # Object keys too, where the object takes keys beyond its listed properties; their values
    # and untyped array items are free-form JSON.
    is_object = kinds == "object" or (isinstance(kinds, list) and "object" in kinds)
    # (Without `additionalProperties` the model ignores extra keys: they may hold anything.)
    if is_object and node.get("additionalProperties", False) is not False:
        node.setdefault("propertyNames", {"pattern": _NO_NUL})
        if node["additionalProperties"] in (True, {}):
            node["additionalProperties"] = dict(_FREE_FORM_REF)
    if node.get("type") == "array" and node.get("items", {}) == {}:
        node["items"] = dict(_FREE_FORM_REF)
    for key, value in node.items():
        if key not in ("allOf", "propertyNames"):
            _refuse_nul(value)


def _ref(name: str) -> dict[str, str]:
    return {"$ref": REF.format(model=name)}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def _envelope(kind: str, item: dict[str, Any]) -> dict[str, Any]:
    items = {"type": "array", "items": item}
    integer = {"type": "integer"}
    if kind == "C":
        return {
            "type": "object",
            "required": ["object", "data", "has_more", "next_cursor", "total_count"],
            "properties": {
                "object": {"type": "string", "const": "list"},
                "data": items,
                "has_more": {"type": "boolean"},
                "next_cursor": {"type": ["string", "null"]},
                "total_count": integer,
            },
        }
    if kind == "A":
        return {
            "type": "object",
            "required": ["has_more", "total", "page", "limit", "items"],
            "properties": {
                "has_more": {"type": "boolean"},
                "total": integer,
                "page": integer,
                "limit": integer,
                "items": items,
            },
        }
    return {
        "type": "object",
        "required": ["total", "page", "page_size", "items"],
        "properties": {"total": integer, "page": integer, "page_size": integer, "items": items},
    }


def _error_schema(status: int, style: ErrorStyle) -> dict[str, Any]:
    if status in (401, 403):
        return _ref("AuthenticationError")
    if status == 429:
        return _ref("RateLimitError")
    if style is ErrorStyle.AGENT:
        return _ref("AgentError")
    if status == 422:
        return _ref("ValidationError")
    return _ref("DetailError")


def _error_body(op: Operation, status: int) -> dict[str, Any]:
    """The error body of `status`: the operation's style, or those `error_styles` gives it
    (either of two when the status is answered in both)."""
    styles = list(dict.fromkeys(style for code, style in op.error_styles if code == status))
    schemas = [_error_schema(status, style) for style in styles or [op.style]]
    return schemas[0] if len(schemas) == 1 else {"anyOf": schemas}


def _query_parameters(model: type[BaseModel], schemas: dict[str, Any]) -> list[dict[str, Any]]:
    schema = model.model_json_schema(ref_template=REF)
    schemas.update(schema.pop("$defs", {}))
    required = set(schema.get("required", []))
    return [
        {"name": name, "in": "query", "required": name in required, "schema": prop}
        for name, prop in schema.get("properties", {}).items()
    ]


def _model_ref(model: type[BaseModel], schemas: dict[str, Any], mode: str) -> dict[str, Any]:
    schema = model.model_json_schema(ref_template=REF, mode=mode)  # type: ignore[arg-type]
    schemas.update(schema.pop("$defs", {}))
    name = model.__name__
    schemas[name] = schema
    return _ref(name)


def _operation(op: Operation, schemas: dict[str, Any]) -> dict[str, Any]:
    # Every id is a UUID; anything else is refused (400/404) before any lookup.
    parameters = [
        {"name": name, "in": "path", "required": True, "schema": _UUID}
        for name in re.findall(r"{(\w+)}", op.path)
    ]
    parameters.append(
        {
            "name": "organization_id",
            "in": "header",
            "required": op.requires_organization_header,
            "description": "Required: the id of the credential's organization (400 when "
            "missing or another)"
            if op.requires_organization_header
            else "When present, must be the id of the credential's organization (400 otherwise)",
            "schema": _UUID,
        }
    )
    if op.method == "POST":
        parameters.append(
            {
                "name": "Idempotency-Key",
                "in": "header",
                "required": False,
                "description": "Replays the first successful response for 24 hours",
                "schema": {"type": "string", "minLength": 1, "maxLength": 255},
            }
        )
    if op.query_model is not None:
        parameters.extend(_query_parameters(op.query_model, schemas))
    responses: dict[str, Any] = {}
    if op.status_code == 204:
        responses["204"] = {"description": "Deleted"}
    else:
        body: dict[str, Any] = {}
        if op.response_model is not None:
            body = _model_ref(op.response_model, schemas, "serialization")
            if op.envelope:
                body = _envelope(op.envelope, body)
        content = _json(body)
        if op.binary_response:
            binary = {"schema": {"type": "string", "format": "binary"}}
            content = {media_type: binary for media_type in op.binary_response}
        responses[str(op.status_code)] = {"description": "Success", "content": content}
        for status in op.other_successes:
            responses[str(status)] = {"description": "Success", "content": _json(body)}
    # Every route can answer 400 (organization_id header rule), 401, 403, 429 and 500; every
    # route that takes a body 413 (its size) and 415 (its media type).
    statuses = {*op.errors, 400, 401, 403, 429, 500}
    if op.writes and op.takes_body:
        statuses.update((413, 415))
    if (op.request_model or op.query_model) and op.style is ErrorStyle.DETAIL:
        statuses.add(422)
    for status in sorted(statuses):
        responses[str(status)] = {
            "description": _DESCRIPTIONS.get(status, "Error"),
            "content": _json(_error_body(op, status)),
        }
    document: dict[str, Any] = {
        "operationId": op.handler.__name__,
        "summary": op.summary,
        "tags": [op.tag],
        "parameters": parameters,
        "responses": responses,
        "security": [{"bearer": []}],
    }
    if op.streams_body:
        # Streamed bodies are uploads: one file in the multipart field `file`.
        document["requestBody"] = {
            "required": True,
            "content": {
                "multipart/form-data": {
                    "schema": {
                        "type": "object",
                        "required": ["file"],
                        "properties": {"file": {"type": "string", "format": "binary"}},
                    }
                }
            },
        }
    if op.request_model is not None:
        document["requestBody"] = {
            "required": True,
            "content": _json(_model_ref(op.request_model, schemas, "validation")),
        }
    return document


@lru_cache(maxsize=4)
def _build(operations: tuple[Operation, ...], prefix: str) -> dict[str, Any]:
    schemas: dict[str, Any] = dict(COMPONENT_SCHEMAS)
    paths: dict[str, Any] = {}
    for op in operations:
        paths.setdefault(prefix + op.path, {})[op.method.lower()] = _operation(op, schemas)
    # A copy: pydantic may hand out the same dicts (WithJsonSchema) on every generation.
    schemas = copy.deepcopy(schemas)
    for name, schema in schemas.items():
        if name not in COMPONENT_SCHEMAS:
            _refuse_nul(schema)
    schemas[_FREE_FORM] = copy.deepcopy(_FREE_FORM_SCHEMA)
    for path in paths.values():
        for operation in path.values():
            for parameter in operation["parameters"]:
                _refuse_nul(parameter["schema"])
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Switchboard REST API",
            "version": "1.0.0",
            "description": "The /api/v1 compatibility surface. GraphQL at /graphql is the "
            "primary interface; both call the same service operations.",
        },
        "servers": [{"url": "/"}],
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "service_sk_… API key or a JWT",
                }
            },
        },
    }


def build_openapi(operations: Iterable[Operation], prefix: str = "/api/v1") -> dict[str, Any]:
    return _build(tuple(operations), prefix)


def openapi_text(operations: Iterable[Operation]) -> str:
    """The document as committed in openapi.json (keys in the built order, two-space indents);
    tests/test_openapi_snapshot.py fails when the routes' document drifts from that file."""
    return json.dumps(build_openapi(operations), indent=2, ensure_ascii=False) + "\n"
