"""pydantic validation → RequestValidationFailed in FastAPI's `{loc, msg, type}` shape."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from app.kit.errors import RequestValidationFailed

ModelT = TypeVar("ModelT", bound=BaseModel)


def validation_errors(exc: ValidationError, location: str) -> list[dict[str, Any]]:
    """`loc` starts with where the input came from: body, query or input (GraphQL)."""
    return [
        {"loc": [location, *error["loc"]], "msg": error["msg"], "type": error["type"]}
        for error in exc.errors(include_url=False, include_context=False, include_input=False)
    ]


def _nul_characters(value: Any, path: list[str | int]) -> list[dict[str, Any]]:
    """NUL (U+0000) anywhere in a string or key: PostgreSQL text and jsonb cannot store it."""
    if isinstance(value, str):
        if "\x00" in value:
            return [{"loc": path, "msg": "NUL characters are not allowed", "type": "nul_character"}]
        return []
    errors: list[dict[str, Any]] = []
    if isinstance(value, dict):
        for key, item in value.items():
            errors.extend(_nul_characters(key, [*path, str(key)]))
            errors.extend(_nul_characters(item, [*path, str(key)]))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            errors.extend(_nul_characters(item, [*path, index]))
    return errors


def parse_model(model: type[ModelT], data: Any, location: str) -> ModelT:
    """`data` as `model`, or RequestValidationFailed; refused the same way on every backend."""
    nul_errors = _nul_characters(data, [location])
    if nul_errors:
        raise RequestValidationFailed(nul_errors)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise RequestValidationFailed(validation_errors(exc, location)) from exc
