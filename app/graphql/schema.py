"""build_schema(): every domain's Query/Mutation merged, with the safety limits built in."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from functools import lru_cache

import strawberry
import structlog
from graphql import GraphQLError
from strawberry.extensions import (
    AddValidationRules,
    MaskErrors,
    MaxAliasesLimiter,
    MaxTokensLimiter,
    ParserCache,
    QueryDepthLimiter,
    SchemaExtension,
    ValidationCache,
)
from strawberry.printer import print_schema
from strawberry.schema.config import StrawberryConfig
from strawberry.tools import merge_types

from app.graphql.auth import AuthMutation, AuthQuery
from app.graphql.contacts import ContactMutation, ContactQuery
from app.graphql.execution import FastExecutionContext
from app.kit.clock import isoformat

MAX_DEPTH = 10
MAX_ALIASES = 30
MAX_TOKENS = 2000
CACHE_SIZE = 512

logger = structlog.get_logger("switchboard.graphql")


def _is_expected(error: GraphQLError) -> bool:
    """Validation errors and errors we raised on purpose are shown; anything else is masked."""
    original = error.original_error
    return original is None or isinstance(original, GraphQLError)


class LogUnexpectedErrors(SchemaExtension):
    """Logs the real error (with the request id bound to the logger) before MaskErrors hides it."""

    def on_operation(self) -> Iterator[None]:
        yield
        result = self.execution_context.result
        for error in getattr(result, "errors", None) or []:
            if not _is_expected(error):
                logger.error(
                    "unexpected graphql error",
                    path=error.path,
                    exc_info=error.original_error,
                )


def _should_mask(error: GraphQLError) -> bool:
    return not _is_expected(error)


def _parse_datetime(value: object) -> datetime:
    if not isinstance(value, str):
        raise ValueError("DateTime must be an ISO 8601 string")
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        raise ValueError("DateTime must include a timezone (Z or an offset)")
    return parsed


# Built once: the validation cache is keyed by the rule classes, and each limiter instance
# makes new classes, so per-request limiters would never hit the cache.
SAFETY_RULES = [
    *QueryDepthLimiter(max_depth=MAX_DEPTH).validation_rules,
    *MaxAliasesLimiter(max_alias_count=MAX_ALIASES).validation_rules,
]

Query = merge_types("Query", (ContactQuery, AuthQuery))
Mutation = merge_types("Mutation", (ContactMutation, AuthMutation))


DATETIME_UTC = strawberry.scalar(
    name="DateTime",
    description="ISO 8601 timestamp in UTC, e.g. 2026-01-31T09:30:00.000000Z",
    serialize=isoformat,
    parse_value=_parse_datetime,
)


@lru_cache(maxsize=1)
def build_schema() -> strawberry.Schema:
    return strawberry.Schema(
        query=Query,
        mutation=Mutation,
        config=StrawberryConfig(scalar_map={datetime: DATETIME_UTC}),
        # Objects whose selected fields are all plain attributes skip per-field resolvers.
        execution_context_class=FastExecutionContext,
        extensions=[
            lambda: MaskErrors(
                should_mask_error=_should_mask, error_message="Internal server error"
            ),
            LogUnexpectedErrors,
            lambda: MaxTokensLimiter(max_token_count=MAX_TOKENS),
            lambda: ParserCache(maxsize=CACHE_SIZE),
            lambda: AddValidationRules(SAFETY_RULES),
            lambda: ValidationCache(maxsize=CACHE_SIZE),
        ],
    )


def schema_sdl() -> str:
    return print_schema(build_schema()) + "\n"
