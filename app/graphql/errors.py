"""GraphQL error mapping: domain errors become typed results or coded GraphQL errors.

Field names in errors are GraphQL's own (camelCase, dotted for nested input fields), never
the REST body's: `phone_number` is reported as `phoneNumber`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from graphql import GraphQLError

from app.kit.errors import DomainError, RequestValidationFailed


class Unauthenticated(GraphQLError):
    def __init__(self, message: str = "Authentication required: send 'Bearer <API_KEY>'") -> None:
        super().__init__(message, extensions={"code": "unauthenticated"})


class Forbidden(GraphQLError):
    def __init__(self, message: str) -> None:
        super().__init__(message, extensions={"code": "insufficient_scope"})


@dataclass(frozen=True, slots=True)
class Failure:
    """One expected failure: `code` is the domain's (or pydantic's, for bad input)."""

    code: str
    message: str
    field: str | None = None


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def field_path(parts: list[Any]) -> str | None:
    """`phone_number` → `phoneNumber`: fields are named as the GraphQL input names them."""
    return ".".join(_camel(str(part)) for part in parts) or None


def failures(exc: DomainError) -> list[Failure]:
    if isinstance(exc, RequestValidationFailed):
        return [
            Failure(str(error["type"]), str(error["msg"]), field_path(error["loc"][1:]))
            for error in exc.errors
        ]
    return [Failure(exc.code, exc.message, field_path([exc.field]) if exc.field else None)]


def as_graphql_error(exc: DomainError) -> GraphQLError:
    extensions: dict[str, Any] = {"code": exc.code}
    if exc.field:
        extensions["field"] = field_path([exc.field])
    return GraphQLError(exc.message, extensions=extensions)


def failure_as_graphql_error(failure: Failure) -> GraphQLError:
    extensions: dict[str, Any] = {"code": failure.code}
    if failure.field:
        extensions["field"] = failure.field
    return GraphQLError(failure.message, extensions=extensions)
