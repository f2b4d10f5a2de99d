"""Compiled plans for the queries dashboards repeat, run without the general executor.

A cached, valid query whose root fields are resolvers marked `@plannable` (they read nothing
from `info` but the context) and whose every selected sub-field is a plain attribute (a
resolver-less field without arguments, see app/graphql/execution.py) is compiled once into
closures: coerce the variables and arguments with graphql-core's own functions, check each
root field's scopes, call the resolver, and build the response dict directly. A 20-row page
costs a third of what Strawberry and graphql-core's executor spend on it.

What a plan may skip is checked, not assumed: a plan is compiled only while every schema
extension is one marked `@plan_compatible` (its work is done by the cache the plans come from,
or concerns errors only), and a root field's permission classes are called as Strawberry calls
them. `SWITCHBOARD_GRAPHQL_PLANNING=false` turns plans off (app/graphql/view.py).

Only the successful path is planned. Anything else (an error raised by a resolver, a scope
the caller lacks, a null where the schema says non-null, a value that is not what the plan
expects) returns None, and the request runs through Strawberry as usual, which produces the
errors, paths and masking exactly as before. Plans are cached with the parsed document.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from graphql import (
    DocumentNode,
    FieldNode,
    FragmentDefinitionNode,
    FragmentSpreadNode,
    GraphQLField,
    GraphQLID,
    GraphQLList,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLOutputType,
    GraphQLScalarType,
    GraphQLSchema,
    GraphQLString,
    InlineFragmentNode,
    OperationDefinitionNode,
    OperationType,
    SelectionSetNode,
    get_nullable_type,
    is_leaf_type,
)
from graphql.execution.values import get_argument_values, get_variable_values
from strawberry.permission import BasePermission, PermissionExtension
from strawberry.schema.schema_converter import GraphQLCoreConverter
from strawberry.types.arguments import StrawberryArgument, convert_argument
from strawberry.types.field import StrawberryField

from app.graphql.context import Context
from app.graphql.execution import leaf_value_completer, plain_getter
from app.graphql.permissions import HasScope

_PLANNABLE = "__switchboard_plannable__"
_PLAN_COMPATIBLE = "__switchboard_plan_compatible__"
# Built-in scalars whose coerced value Strawberry passes to the resolver unchanged.
_AS_IS = frozenset({"String", "Int", "Float", "Boolean", "ID"})
FunctionT = TypeVar("FunctionT", bound=Callable[..., Any])
ClassT = TypeVar("ClassT", bound=type)
# Permission classes whose `has_permission` reads nothing from `info` but `info.context`.
_CONTEXT_ONLY_PERMISSIONS: tuple[type[BasePermission], ...] = (HasScope,)


def plannable(resolver: FunctionT) -> FunctionT:
    """Marks a root resolver that uses nothing from `info` except `info.context`."""
    setattr(resolver, _PLANNABLE, True)
    return resolver


def plan_compatible(extension: ClassT) -> ClassT:
    """Marks a schema extension a plan may run without: its work on a successful query is
    done where plans come from (the parse and validation cache) or concerns errors only."""
    setattr(extension, _PLAN_COMPATIBLE, True)
    return extension


def is_plannable(field_def: GraphQLField) -> bool:
    """Whether a root field's resolver is marked `@plannable` (the tests plan every one)."""
    definition = (field_def.extensions or {}).get(GraphQLCoreConverter.DEFINITION_BACKREF)
    if not isinstance(definition, StrawberryField) or definition.base_resolver is None:
        return False
    return bool(getattr(definition.base_resolver.wrapped_func, _PLANNABLE, False))


def extensions_allow_plans(schema: Any) -> bool:
    """True when every schema extension (Strawberry's own included) is `@plan_compatible`."""
    return all(
        getattr(type(extension), _PLAN_COMPATIBLE, False) for extension in schema.get_extensions()
    )


class _Fallback(Exception):
    """This request leaves the plan: Strawberry runs it instead."""


@dataclass(frozen=True, slots=True)
class _ContextOnlyInfo:
    """What a `@plannable` resolver may read from its `info` argument."""

    context: Context


Completer = Callable[[Any], Any]


@dataclass(frozen=True, slots=True)
class _RootField:
    response_key: str
    node: FieldNode
    field: Any  # GraphQLField
    resolver: Callable[..., Awaitable[Any]]
    # GraphQL argument name → (Python name, the argument when its value needs converting).
    arguments: dict[str, tuple[str, StrawberryArgument | None]]
    permissions: tuple[BasePermission, ...]
    complete: Completer


@dataclass(frozen=True, slots=True)
class _RootTypename:
    response_key: str
    type_name: str


@dataclass(frozen=True, slots=True)
class OperationPlan:
    schema: Any  # strawberry.Schema: its config and scalars convert the arguments
    graphql_schema: GraphQLSchema
    operation: OperationDefinitionNode
    root_fields: tuple[_RootField | _RootTypename, ...]


def compile_plan(
    schema: Any, document: DocumentNode, operation_name: str | None
) -> OperationPlan | None:
    """The plan of one operation of a valid document, or None when it is not plannable."""
    if not extensions_allow_plans(schema):
        return None
    operations = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)]
    if operation_name is None:
        if len(operations) != 1:
            return None
        operation = operations[0]
    else:
        matching = [o for o in operations if o.name and o.name.value == operation_name]
        if len(matching) != 1:
            return None
        operation = matching[0]
    if operation.operation is not OperationType.QUERY or operation.directives:
        return None
    fragments = {
        d.name.value: d for d in document.definitions if isinstance(d, FragmentDefinitionNode)
    }
    graphql_schema = schema._schema
    query_type = graphql_schema.query_type
    collected = _collect(query_type, operation.selection_set, fragments)
    if collected is None:
        return None
    root_fields: list[_RootField | _RootTypename] = []
    for response_key, node in collected:
        if node.name.value == "__typename":
            root_fields.append(_RootTypename(response_key, query_type.name))
            continue
        root = _root_field(schema, query_type, response_key, node, fragments)
        if root is None:
            return None
        root_fields.append(root)
    return OperationPlan(schema, graphql_schema, operation, tuple(root_fields))


async def run_plan(
    plan: OperationPlan, context: Context, raw_variables: dict[str, Any] | None
) -> dict[str, Any] | None:
    """The operation's `data`, or None when the request must take the general path."""
    subject = context.subject
    if subject is None:
        return None
    variables = get_variable_values(
        plan.graphql_schema, plan.operation.variable_definitions or (), raw_variables or {}
    )
    if isinstance(variables, list):  # coercion errors: Strawberry reports them
        return None
    data: dict[str, Any] = {}
    info = _ContextOnlyInfo(context)
    try:
        for root in plan.root_fields:
            if isinstance(root, _RootTypename):
                data[root.response_key] = root.type_name
                continue
            arguments = get_argument_values(root.field, root.node, variables)
            # As Strawberry's resolver wrapper: GraphQL names to Python ones, enums to members.
            kwargs = {}
            for name, value in arguments.items():
                python_name, needs_converting = root.arguments[name]
                kwargs[python_name] = (
                    value
                    if needs_converting is None or value is None
                    else convert_argument(
                        value,
                        needs_converting.type,
                        plan.schema.schema_converter.scalar_registry,
                        plan.schema.config,
                        path=(name,),
                    )
                )
            for permission in root.permissions:
                allowed = permission.has_permission(None, info, **kwargs)  # type: ignore[arg-type]
                if inspect.isawaitable(allowed):
                    allowed = await allowed
                if not allowed:
                    return None
            value = await root.resolver(None, info=info, **kwargs)
            data[root.response_key] = root.complete(value)
    except Exception:
        # Errors are rendered (and unexpected ones masked) by the general path.
        return None
    return data


def _collect(
    object_type: GraphQLObjectType,
    selection_set: SelectionSetNode,
    fragments: dict[str, FragmentDefinitionNode],
) -> list[tuple[str, FieldNode]] | None:
    """Fields of a selection set in order, fragments inlined; None for anything that needs
    the general executor (directives, abstract type conditions, repeated response keys)."""
    collected: list[tuple[str, FieldNode]] = []
    seen: set[str] = set()

    def visit(selections: SelectionSetNode) -> bool:
        for selection in selections.selections:
            if selection.directives:
                return False
            if isinstance(selection, FieldNode):
                key = selection.alias.value if selection.alias else selection.name.value
                if key in seen:
                    return False
                seen.add(key)
                collected.append((key, selection))
            elif isinstance(selection, InlineFragmentNode):
                condition = selection.type_condition
                if condition is not None and condition.name.value != object_type.name:
                    return False
                if not visit(selection.selection_set):
                    return False
            elif isinstance(selection, FragmentSpreadNode):
                fragment = fragments.get(selection.name.value)
                if fragment is None or fragment.type_condition.name.value != object_type.name:
                    return False
                if not visit(fragment.selection_set):
                    return False
            else:
                return False
        return True

    return collected if visit(selection_set) else None


def _root_field(
    schema: Any,
    query_type: GraphQLObjectType,
    response_key: str,
    node: FieldNode,
    fragments: dict[str, FragmentDefinitionNode],
) -> _RootField | None:
    field_def = query_type.fields.get(node.name.value)
    if field_def is None:
        return None
    definition = (field_def.extensions or {}).get(GraphQLCoreConverter.DEFINITION_BACKREF)
    if not isinstance(definition, StrawberryField) or definition.base_resolver is None:
        return None
    resolver = definition.base_resolver.wrapped_func
    if not getattr(resolver, _PLANNABLE, False) or not inspect.iscoroutinefunction(resolver):
        return None
    permissions = _permissions(definition)
    if permissions is None:
        return None
    arguments: dict[str, tuple[str, StrawberryArgument | None]] = {}
    for argument in definition.arguments:
        graphql_name = schema.config.name_converter.get_graphql_name(argument)
        # Scalars and enums (and lists of them) convert without `info`; input objects may not.
        argument_type = get_nullable_type(field_def.args[graphql_name].type)
        if isinstance(argument_type, GraphQLScalarType) and argument_type.name in _AS_IS:
            arguments[graphql_name] = (argument.python_name, None)
            continue
        if isinstance(argument_type, GraphQLList):
            argument_type = get_nullable_type(argument_type.of_type)
        if not is_leaf_type(argument_type):
            return None
        # As Strawberry's resolver wrapper does: enum names to members, custom scalars.
        arguments[graphql_name] = (argument.python_name, argument)
    complete = _completer(field_def.type, node.selection_set, fragments)
    if complete is None:
        return None
    return _RootField(response_key, node, field_def, resolver, arguments, permissions, complete)


def _permissions(definition: StrawberryField) -> tuple[BasePermission, ...] | None:
    """The permission classes of a root field's extensions, to be called as Strawberry calls
    them; None when the field has another extension or a permission that needs more than
    `info.context` (or that fails silently: Strawberry then answers null, not an error)."""
    permissions: list[BasePermission] = []
    for extension in definition.extensions:
        if type(extension) is not PermissionExtension or extension.fail_silently:
            return None
        for permission in extension.permissions:
            if type(permission) not in _CONTEXT_ONLY_PERMISSIONS:
                return None
            permissions.append(permission)
    return tuple(permissions)


def _completer(
    type_: GraphQLOutputType,
    selection_set: SelectionSetNode | None,
    fragments: dict[str, FragmentDefinitionNode],
) -> Completer | None:
    general = _general_completer(type_, selection_set, fragments)
    if general is None:
        return None
    # Most leaves of a page are strings and UTC datetimes: answered in one call, before the
    # null check and coercion layers (which give the same value for them).
    leaf = get_nullable_type(type_)
    if leaf is GraphQLString or leaf is GraphQLID:
        return _passing(str, general)
    if isinstance(leaf, GraphQLScalarType) and leaf.name == "DateTime":
        # The schema's DateTime scalar serializes with app.core.clock.isoformat.
        return _datetime_completer(general)
    return general


def _passing(value_type: type, general: Completer) -> Completer:
    def complete(value: Any) -> Any:
        if type(value) is value_type:
            return value
        return general(value)

    return complete


def _general_completer(
    type_: GraphQLOutputType,
    selection_set: SelectionSetNode | None,
    fragments: dict[str, FragmentDefinitionNode],
) -> Completer | None:
    if isinstance(type_, GraphQLNonNull):
        inner = _general_completer(type_.of_type, selection_set, fragments)
        if inner is None:
            return None
        return _non_null(inner)
    if is_leaf_type(type_):
        if selection_set is not None:
            return None
        return leaf_value_completer(type_)
    if isinstance(type_, GraphQLList):
        item = _completer(type_.of_type, selection_set, fragments)
        return None if item is None else _list(item)
    if isinstance(type_, GraphQLObjectType) and selection_set is not None:
        return _object(type_, selection_set, fragments)
    return None  # interfaces and unions: the general executor resolves their runtime type


def _object(
    object_type: GraphQLObjectType,
    selection_set: SelectionSetNode,
    fragments: dict[str, FragmentDefinitionNode],
) -> Completer | None:
    if object_type.is_type_of is not None:
        return None
    collected = _collect(object_type, selection_set, fragments)
    if collected is None:
        return None
    entries: list[tuple[str, Callable[[Any], Any], Completer]] = []
    for response_key, node in collected:
        name = node.name.value
        if name == "__typename":
            type_name = object_type.name
            entries.append((response_key, _constant(type_name), _identity))
            continue
        field_def = object_type.fields.get(name)
        if field_def is None or node.arguments:
            return None
        getter = plain_getter(field_def)
        complete = _completer(field_def.type, node.selection_set, fragments)
        if getter is None or complete is None:
            return None
        entries.append((response_key, getter, complete))

    def complete_object(value: Any) -> Any:
        if value is None:
            return None
        if type(value) not in _PLAIN_OBJECT_TYPES and not _is_plain_object(value):
            raise _Fallback
        return {key: complete(get(value)) for key, get, complete in entries}

    return complete_object


# Types whose instances are neither awaitable nor exceptions (both depend on the type alone,
# except generators, never added): a set lookup per object instead of inspect.isawaitable.
_PLAIN_OBJECT_TYPES: set[type] = set()


def _is_plain_object(value: Any) -> bool:
    if inspect.isawaitable(value) or isinstance(value, Exception):
        return False
    if not inspect.isgenerator(value):
        _PLAIN_OBJECT_TYPES.add(type(value))
    return True


def _datetime_completer(generic: Completer) -> Completer:
    # UTC datetimes stay objects: the response encoder (orjson, OPT_UTC_Z) writes exactly what
    # the DateTime scalar's isoformat would, at a fraction of the cost.
    def complete(value: Any) -> Any:
        if type(value) is datetime and value.tzinfo is UTC:
            return value
        return generic(value)

    return complete


def _non_null(inner: Completer) -> Completer:
    def complete(value: Any) -> Any:
        completed = inner(value)
        if completed is None:
            raise _Fallback
        return completed

    return complete


def _list(item: Completer) -> Completer:
    def complete(value: Any) -> Any:
        if value is None:
            return None
        if type(value) not in (list, tuple):
            raise _Fallback
        return [item(element) for element in value]

    return complete


def _constant(value: str) -> Callable[[Any], str]:
    return lambda _source: value


def _identity(value: Any) -> Any:
    return value
