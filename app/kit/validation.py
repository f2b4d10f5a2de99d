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


def parse_model(model: type[ModelT], data: Any, location: str) -> ModelT:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise RequestValidationFailed(validation_errors(exc, location)) from exc
