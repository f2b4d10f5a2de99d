"""build_schema(): every domain's Query/Mutation merged, with the safety limits built in."""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache

import strawberry
import structlog
from graphql import (
    DocumentNode,
    GraphQLError,
    GraphQLSchema,
    VariableDefinitionNode,
    parse,
    specified_rules,
)
from strawberry.extensions import MaxAliasesLimiter, QueryDepthLimiter, SchemaExtension
from strawberry.printer import print_schema
from strawberry.schema.config import StrawberryConfig
from strawberry.schema.schema import validate_document
from strawberry.tools import merge_types

from app.graphql.agents import AgentMutation, AgentQuery
from app.graphql.auth import AuthMutation, AuthQuery
from app.graphql.calls import CallLogQuery
from app.graphql.channels import ChannelMutation, ChannelQuery
from app.graphql.contacts import ContactMutation, ContactQuery
from app.graphql.events import EventSubscription
from app.graphql.execution import FastExecutionContext
from app.graphql.inbox import InboxMutation, InboxQuery
from app.graphql.planned import OperationPlan, compile_plan
from app.graphql.quick_replies import QuickReplyMutation, QuickReplyQuery
from app.graphql.webhooks import WebhookMutation, WebhookQuery
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


@dataclass(frozen=True, slots=True)
class _PreparedOperation:
    document: DocumentNode
    errors: list[GraphQLError]
    # Compiled plans by operation name (None: not plannable), filled on first use.
    plans: dict[str | None, OperationPlan | None] = field(default_factory=dict)


class OperationCache:
    """Parsed and validated documents by query text, least recently used evicted first.

    Parsing and validating cost more than executing a cached 20-item page; a dashboard sends
    the same few query texts over and over. Documents that fail to parse are not cached.
    """

    def __init__(self, maxsize: int = CACHE_SIZE) -> None:
        self.maxsize = maxsize
        self._entries: OrderedDict[str, _PreparedOperation] = OrderedDict()

    def prepare(self, schema: GraphQLSchema, query: str) -> _PreparedOperation:
        found = self._entries.get(query)
        if found is not None:
            self._entries.move_to_end(query)
            return found
        document = parse(query, max_tokens=MAX_TOKENS)  # GraphQLError on bad syntax
        prepared = _PreparedOperation(
            document, validate_document(schema, document, (*specified_rules, *SAFETY_RULES))
        )
        self._entries[query] = prepared
        if len(self._entries) > self.maxsize:
            self._entries.popitem(last=False)
        return prepared

    def plan(
        self, schema: strawberry.Schema, query: str, operation_name: str | None
    ) -> OperationPlan | None:
        """The compiled plan of a valid, plannable operation (app/graphql/planned.py)."""
        try:
            prepared = self.prepare(schema._schema, query)
        except GraphQLError:
            return None
        if prepared.errors:
            return None
        if operation_name not in prepared.plans:
            prepared.plans[operation_name] = compile_plan(schema, prepared.document, operation_name)
        return prepared.plans[operation_name]


_ECHOED_VALUE = re.compile(r"(,? found|(?<=value)): .*$", re.DOTALL)


def _without_variable_value(error: GraphQLError) -> GraphQLError:
    """graphql-core's variable coercion errors repeat the invalid value ("... found: {...}"),
    which can hold an access token or a password: keep the variable's name and the reason."""
    inner = error.original_error
    node = error.nodes[0] if error.nodes else None
    if not (
        isinstance(inner, GraphQLError)
        and isinstance(node, VariableDefinitionNode)
        and error.message.startswith("Variable '$")
    ):
        return error
    reason = _ECHOED_VALUE.sub("", inner.message).rstrip(".")
    return GraphQLError(
        f"Variable '${node.variable.name.value}' has invalid value: {reason}.",
        nodes=error.nodes,
        source=error.source,
        positions=error.positions,
        path=error.path,
        extensions=error.extensions,
    )


class OperationPipeline(SchemaExtension):
    """Token, depth and alias limits, cached parse and validation, and error masking, as one
    extension: each extension hook costs a generator round trip on every request."""

    def __init__(self, cache: OperationCache) -> None:
        self.cache = cache
        self._prepared: _PreparedOperation | None = None

    def on_operation(self) -> Iterator[None]:
        yield
        result = self.execution_context.result
        errors = getattr(result, "errors", None)
        if not errors:
            return
        masked = []
        for error in errors:
            if _is_expected(error):
                masked.append(_without_variable_value(error))
                continue
            logger.error("unexpected graphql error", path=error.path, exc_info=error.original_error)
            masked.append(
                GraphQLError(
                    "Internal server error",
                    nodes=error.nodes,
                    source=error.source,
                    positions=error.positions,
                    path=error.path,
                )
            )
        result.errors = masked  # type: ignore[union-attr]

    def on_parse(self) -> Iterator[None]:
        context = self.execution_context
        if context.query:
            try:
                self._prepared = self.cache.prepare(context.schema._schema, context.query)
            except GraphQLError:
                # Let Strawberry parse again and report the syntax error its own way.
                context.parse_options["max_tokens"] = MAX_TOKENS
            else:
                context.graphql_document = self._prepared.document
        yield

    def on_validate(self) -> Iterator[None]:
        if self._prepared is not None:
            self.execution_context.pre_execution_errors = self._prepared.errors
        yield


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

Query = merge_types(
    "Query",
    (
        AgentQuery,
        CallLogQuery,
        ChannelQuery,
        ContactQuery,
        InboxQuery,
        QuickReplyQuery,
        WebhookQuery,
        AuthQuery,
    ),
)
Mutation = merge_types(
    "Mutation",
    (
        AgentMutation,
        ChannelMutation,
        ContactMutation,
        InboxMutation,
        QuickReplyMutation,
        WebhookMutation,
        AuthMutation,
    ),
)
Subscription = merge_types("Subscription", (EventSubscription,))


DATETIME_UTC = strawberry.scalar(
    name="DateTime",
    description="ISO 8601 timestamp in UTC, e.g. 2026-01-31T09:30:00.000000Z",
    serialize=isoformat,
    parse_value=_parse_datetime,
)


OPERATION_CACHE = OperationCache()


@lru_cache(maxsize=1)
def build_schema() -> strawberry.Schema:
    return strawberry.Schema(
        query=Query,
        mutation=Mutation,
        subscription=Subscription,
        config=StrawberryConfig(scalar_map={datetime: DATETIME_UTC}),
        # Objects whose selected fields are all plain attributes skip per-field resolvers.
        execution_context_class=FastExecutionContext,
        extensions=[lambda: OperationPipeline(OPERATION_CACHE)],
    )


def schema_sdl() -> str:
    return print_schema(build_schema()) + "\n"
