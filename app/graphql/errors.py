"""GraphQL error mapping: domain errors become typed results or coded GraphQL errors."""

from __future__ import annotations

from typing import Any

import strawberry
from graphql import GraphQLError

from app.kit.errors import DomainError, RequestValidationFailed


class Unauthenticated(GraphQLError):
    def __init__(self, message: str = "Authentication required: send 'Bearer <API_KEY>'") -> None:
        super().__init__(message, extensions={"code": "UNAUTHENTICATED"})


class Forbidden(GraphQLError):
    def __init__(self, message: str) -> None:
        super().__init__(message, extensions={"code": "insufficient_scope"})


@strawberry.type(description="An expected failure of a mutation, safe to show to the user.")
class UserError:
    code: str
    message: str
    field: str | None = None


def user_errors(exc: DomainError) -> list[UserError]:
    if isinstance(exc, RequestValidationFailed):
        return [
            UserError(
                code=str(error["type"]),
                message=str(error["msg"]),
                field=".".join(str(part) for part in error["loc"][1:]) or None,
            )
            for error in exc.errors
        ]
    return [UserError(code=exc.code, message=exc.message, field=exc.field)]


def as_graphql_error(exc: DomainError) -> GraphQLError:
    extensions: dict[str, Any] = {"code": exc.code}
    if exc.field:
        extensions["field"] = exc.field
    return GraphQLError(exc.message, extensions=extensions)
