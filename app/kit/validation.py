"""Input rules every surface shares, and pydantic validation → RequestValidationFailed in
FastAPI's `{loc, msg, type}` shape.

REST bodies and GraphQL inputs go through the same pydantic schemas (`parse_model`), so each
rule here answers the same on both: a 422 (REST) or a UserError (GraphQL) naming the field.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    StringConstraints,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
)
from pydantic_core import PydanticCustomError

from app.kit.errors import RequestValidationFailed

ModelT = TypeVar("ModelT", bound=BaseModel)

# Levels of objects/arrays inside one free-form JSON field (the field's own object is 1).
# Deep enough for any JSON Schema of tool arguments; far below what breaks a serializer.
MAX_JSON_DEPTH = 32
# The largest integer every JSON reader keeps exact (JavaScript's Number.MAX_SAFE_INTEGER;
# RFC 8259 §6): larger ones would come back rounded to a dashboard, so they are refused.
MAX_SAFE_INTEGER = 2**53 - 1
MAX_NAME_LENGTH = 255

# White space by every definition in play: Python's `str.isspace` (\s in `re`), and
# ECMAScript's \s (adds U+FEFF), which is what OpenAPI patterns are read as.
_BLANK = r"\s\ufeff"
_NOT_BLANK = re.compile(f"[^{_BLANK}]")
_EDGE_BLANKS = re.compile(f"^[{_BLANK}]+|[{_BLANK}]+$")
# One character that is not white space by any of the three definitions in play (Python's
# `re`, ECMAScript's for OpenAPI patterns, and the Rust `regex` pydantic checks patterns with):
# the same pattern then means the same thing to the server, the document and its fuzzers.
NOT_BLANK_CHAR = r"[^\s\x1c-\x1f\x85\ufeff]"
NOT_BLANK_PATTERN = NOT_BLANK_CHAR
# A token without white space (access tokens, ids from upstream platforms).
NO_BLANKS_PATTERN = f"^{NOT_BLANK_CHAR}+$"
_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_PORT = r"([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
# An http(s) URL the outbound URL guard can judge by its form: a DNS name or IPv4 host, an
# optional port 1-65535, then a path/query without white space, control characters or
# backslashes. (IPv6 literals, `http://[2001:db8::1]/`, are accepted too but left out here: a
# pattern cannot tell a valid one from `[2.cAF::]`.) Whether the host resolves to public
# addresses only is the guard's to judge, at write time.
HTTP_URL_PATTERN = (
    rf"^[Hh][Tt][Tt][Pp][Ss]?://{_LABEL}(\.{_LABEL})*\.?(:{_PORT})?"
    r"([/?#][^\s\x00-\x1f\x7f\x85\ufeff\\]*)?$"
)


def json_integer(value: Any) -> Any:
    """JSON Schema's integer, as a BeforeValidator: 425 and 425.0, never "425" or true
    (pydantic's lax mode takes both, its strict mode refuses 425.0)."""
    if isinstance(value, bool | str | bytes):
        raise PydanticCustomError("int_type", "Input should be a valid integer")
    return value


def not_blank(value: str) -> str:
    """At least one character that is not white space; returned without the white space
    around it. (Length limits apply to the text as sent, so the document can state them.)"""
    if not _NOT_BLANK.search(value):
        raise PydanticCustomError("string_blank", "String should not be only white space")
    return _EDGE_BLANKS.sub("", value)


def display_name(value: str) -> str:
    """The one rule for names of contacts, agents and organizations (ValueError otherwise)."""
    if not 1 <= len(value) <= MAX_NAME_LENGTH:
        raise ValueError(f"must be 1 to {MAX_NAME_LENGTH} characters")
    if not _NOT_BLANK.search(value):
        raise ValueError("must not be only white space")
    return _EDGE_BLANKS.sub("", value)


def trimmed_schema(max_length: int, description: str) -> dict[str, Any]:
    return {
        "type": "string",
        "minLength": 1,
        "maxLength": max_length,
        "pattern": NOT_BLANK_PATTERN,
        "description": description,
    }


DisplayName = Annotated[
    str,
    StringConstraints(min_length=1, max_length=MAX_NAME_LENGTH),
    AfterValidator(not_blank),
    WithJsonSchema(
        trimmed_schema(
            MAX_NAME_LENGTH, "Surrounding white space is removed; blank names are refused"
        )
    ),
]


def free_form_json(value: Any) -> Any:
    """A free-form JSON value within the nesting and integer limits (checked without
    recursion, so no input depth can exhaust the stack)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth > MAX_JSON_DEPTH:
                raise ValueError(f"must not be nested more than {MAX_JSON_DEPTH} levels deep")
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
        elif (
            isinstance(item, int | float)
            and not isinstance(item, bool)
            and abs(item) > MAX_SAFE_INTEGER
        ):
            # Floats too: every float this large is a whole number (JSON Schema calls it an
            # integer), and it would come back rounded all the same.
            raise ValueError(
                "numbers must be between -(2^53-1) and 2^53-1; send larger numbers as strings"
            )
    return value


# Every JSON-typed input field uses this type: depth and integer limits, named in the error.
JsonObject = Annotated[dict[str, Any], AfterValidator(free_form_json)]


def without_null(*names: str) -> Callable[[dict[str, Any]], None]:
    """`json_schema_extra` of partial-update models: the fields named may be left out but not
    sent as null, so the document shows them without a null branch and without
    `default: null` (which would contradict their type)."""

    def edit(schema: dict[str, Any]) -> None:
        for name in names:
            prop = schema.get("properties", {}).get(name)
            if prop is None:
                continue
            branches = [item for item in prop.pop("anyOf", []) if item != {"type": "null"}]
            if len(branches) == 1:
                prop.update(branches[0])
            elif branches:
                prop["anyOf"] = branches
            if prop.get("default", ...) is None:
                del prop["default"]

    return edit


def refuse_null(value: Any, info: ValidationInfo) -> Any:
    """A `mode="before"` field validator: runs only on values sent (defaults are not
    validated), so it refuses an explicit null and names the field in `loc`."""
    if value is None:
        raise ValueError(f"{info.field_name} cannot be null")
    return value


# pydantic names the model class in these messages ("…or instance of AgentUpdate").
_OBJECT_EXPECTED = {"model_type", "model_attributes_type", "dataclass_type"}


def validation_errors(exc: ValidationError, location: str) -> list[dict[str, Any]]:
    """`loc` starts with where the input came from: body, query or input (GraphQL)."""
    errors = []
    for error in exc.errors(include_url=False, include_context=False, include_input=False):
        message = error["msg"]
        if error["type"] in _OBJECT_EXPECTED:
            message = "Input should be an object"
        errors.append({"loc": [location, *error["loc"]], "msg": message, "type": error["type"]})
    return errors


def _nul_characters(value: Any, location: str) -> list[dict[str, Any]]:
    """NUL (U+0000) anywhere in a string or key: PostgreSQL text and jsonb cannot store it.

    Walked without recursion: an input nested a thousand levels must not exhaust the stack.
    """
    errors: list[dict[str, Any]] = []
    stack: list[tuple[Any, list[str | int]]] = [(value, [location])]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                errors.append(
                    {"loc": path, "msg": "NUL characters are not allowed", "type": "nul_character"}
                )
        elif isinstance(item, dict):
            for key, child in item.items():
                stack.append((key, [*path, str(key)]))
                stack.append((child, [*path, str(key)]))
        elif isinstance(item, list):
            stack.extend((child, [*path, index]) for index, child in enumerate(item))
    return errors


def parse_model(model: type[ModelT], data: Any, location: str) -> ModelT:
    """`data` as `model`, or RequestValidationFailed; refused the same way on every backend."""
    try:
        parsed = model.model_validate(data)
    except ValidationError as exc:
        raise RequestValidationFailed(validation_errors(exc, location)) from exc
    # Judged on what was read: properties the model ignores may hold anything.
    nul_errors = _nul_characters(parsed.model_dump(), location)
    if nul_errors:
        raise RequestValidationFailed(nul_errors)
    return parsed
