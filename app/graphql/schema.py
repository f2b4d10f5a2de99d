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
    OperationDefinitionNode,
    OperationType,
    VariableDefinitionNode,
    parse,
    specified_rules,
)
from strawberry.extensions import SchemaExtension
from strawberry.printer import print_schema
from strawberry.schema.config import StrawberryConfig
from strawberry.schema.schema import validate_document
from strawberry.tools import merge_types
from strawberry.types import ExecutionContext

from app.core.clock import isoformat
from app.graphql.cost import CostLimits, cost_errors, root_field_calls, select_operation
from app.graphql.execution import FastExecutionContext
from app.graphql.links import LinkedSchema
from app.graphql.planned import OperationPlan, compile_plan, plan_compatible
from app.kit.domains import collect

MAX_DEPTH = 10
MAX_ALIASES = 30
# Fields executed once fragments are expanded (GraphiQL's introspection query selects ~250).
MAX_SELECTIONS = 1000
# Lexical tokens and comments together; the length bounds whitespace and string literals.
MAX_TOKENS = 2000
MAX_DOCUMENT_LENGTH = 32_768
COST_LIMITS = CostLimits(
    max_depth=MAX_DEPTH, max_aliases=MAX_ALIASES, max_selections=MAX_SELECTIONS
)
# graphql-core's parse options, for our parse and for Strawberry's when it parses again.
PARSE_OPTIONS: dict[str, int] = {"max_tokens": MAX_TOKENS, "max_source_length": MAX_DOCUMENT_LENGTH}
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
    # `login` calls of each operation (rate limited per client address), filled on first use.
    logins: dict[str | None, int] = field(default_factory=dict)


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
        # GraphQLError on bad syntax or size
        document = parse(query, max_tokens=MAX_TOKENS, max_source_length=MAX_DOCUMENT_LENGTH)
        # The cost is measured first and in linear time: a document over the limits is never
        # validated (validation, like execution, would walk every fragment expansion).
        errors = cost_errors(document, COST_LIMITS) or validate_document(
            schema, document, specified_rules
        )
        prepared = _PreparedOperation(document, errors)
        self._entries[query] = prepared
        if len(self._entries) > self.maxsize:
            self._entries.popitem(last=False)
        return prepared

    def login_calls(self, schema: GraphQLSchema, query: str, operation_name: str | None) -> int:
        """How many `login` attempts the operation makes (0 for an invalid document)."""
        try:
            prepared = self.prepare(schema, query)
        except GraphQLError:
            return 0
        calls = prepared.logins.get(operation_name)
        if calls is None:
            operation = select_operation(prepared.document, operation_name)
            calls = 0
            if operation is not None and operation.operation is OperationType.MUTATION:
                calls = root_field_calls(prepared.document, operation, "login")
            prepared.logins[operation_name] = calls
        return calls

    def is_ambiguous(self, schema: GraphQLSchema, query: str, operation_name: str | None) -> bool:
        """True for a document of several operations and no operation name: the GraphQL
        spec's GetOperation() makes that an error, where Strawberry would run the first."""
        if operation_name is not None:
            return False
        try:
            document = self.prepare(schema, query).document
        except GraphQLError:
            return False
        operations = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)]
        return len(operations) > 1

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


# Plans come from this extension's cache and are only ever successful results, which it
# passes through untouched (it masks and logs errors).
@plan_compatible
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
            # Logged (with its traceback) by SwitchboardSchema.process_errors.
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
                context.parse_options.update(PARSE_OPTIONS)  # type: ignore[typeddict-item]
            else:
                context.graphql_document = self._prepared.document
        yield

    def on_validate(self) -> Iterator[None]:
        if self._prepared is not None:
            self.execution_context.pre_execution_errors = self._prepared.errors
        yield


def _error_code(error: GraphQLError) -> str | None:
    code = (error.extensions or {}).get("code")
    return code if isinstance(code, str) else None


class SwitchboardSchema(LinkedSchema):
    """Expected errors (validation, limits, scopes, not found) log one line each; unexpected
    ones log their traceback once, before OperationPipeline masks them. Types show the
    fields other domains declare on them with `@extends` (app/graphql/links.py)."""

    def process_errors(
        self, errors: list[GraphQLError], execution_context: ExecutionContext | None = None
    ) -> None:
        for error in errors:
            if _is_expected(error):
                logger.info(
                    "graphql error", code=_error_code(error), message=error.message, path=error.path
                )
            else:
                logger.error(
                    "unexpected graphql error", path=error.path, exc_info=error.original_error
                )


def _parse_datetime(value: object) -> datetime:
    if not isinstance(value, str):
        raise ValueError("DateTime must be an ISO 8601 string")
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        raise ValueError("DateTime must include a timezone (Z or an offset)")
    return parsed


# Each domain's graphql module contributes its Query/Mutation/Subscription (app/kit/domains.py).
Query = merge_types("Query", tuple(collect("graphql", "Query")))
Mutation = merge_types("Mutation", tuple(collect("graphql", "Mutation")))
Subscription = merge_types("Subscription", tuple(collect("graphql", "Subscription")))


DATETIME_UTC = strawberry.scalar(
    name="DateTime",
    description="ISO 8601 timestamp in UTC, e.g. 2026-01-31T09:30:00.000000Z",
    serialize=isoformat,
    parse_value=_parse_datetime,
)


OPERATION_CACHE = OperationCache()


@lru_cache(maxsize=1)
def build_schema() -> strawberry.Schema:
    return SwitchboardSchema(
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
