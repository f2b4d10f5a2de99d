"""GraphQL error mapping: domain errors become typed results or coded GraphQL errors."""

from __future__ import annotations

from typing import Any

import strawberry
from graphql import GraphQLError

from app.kit.errors import DomainError, RequestValidationFailed


class Unauthenticated(GraphQLError):
    def __init__(self, message: str = "Authentication required: send 'Bearer <API_KEY>'") -> None:
        super().__init__(message, extensions={"code": "unauthenticated"})


class Forbidden(GraphQLError):
    def __init__(self, message: str) -> None:
        super().__init__(message, extensions={"code": "insufficient_scope"})


@strawberry.type(description="An expected failure of a mutation, safe to show to the user.")
class UserError:
    code: str
    message: str
    field: str | None = None


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _field_path(parts: list[Any]) -> str | None:
    """`phone_number` → `phoneNumber`: fields are named as the GraphQL input names them."""
    return ".".join(_camel(str(part)) for part in parts) or None


def user_errors(exc: DomainError) -> list[UserError]:
    if isinstance(exc, RequestValidationFailed):
        return [
            UserError(
                code=str(error["type"]),
                message=str(error["msg"]),
                field=_field_path(error["loc"][1:]),
            )
            for error in exc.errors
        ]
    field = _field_path([exc.field]) if exc.field else None
    return [UserError(code=exc.code, message=exc.message, field=field)]


def as_graphql_error(exc: DomainError) -> GraphQLError:
    extensions: dict[str, Any] = {"code": exc.code}
    if exc.field:
        extensions["field"] = exc.field
    return GraphQLError(exc.message, extensions=extensions)
