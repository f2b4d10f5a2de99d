"""A graphql-core executor that completes objects of plain fields without resolver calls.

graphql-core spends most of a list query's CPU per leaf field: building a ResolveInfo,
calling Strawberry's resolver wrapper and walking complete_value. When every collected
field of an object is "plain" (a resolver-less Strawberry field without arguments or
field extensions, or a shape's field whose resolver reads the row alone, app/kit/shape.py,
of a scalar/enum type or a list of them, or `__typename`), the result
dict is built directly with the same attribute read and the same `coerce_output_value`
call. Anything unusual (None for a non-null field, a coercion failure, an exception, an
awaitable, a non-list iterable) makes that object run through graphql-core's normal path,
which then produces the usual errors and paths (reading its attributes once more).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import date, datetime
from decimal import Decimal
from functools import lru_cache
from inspect import isawaitable
from operator import attrgetter
from typing import Any

from graphql import (
    GraphQLField,
    GraphQLID,
    GraphQLLeafType,
    GraphQLList,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLOutputType,
    GraphQLResolveInfo,
    GraphQLSchema,
    GraphQLString,
    get_nullable_type,
    is_leaf_type,
)
from graphql.execution.collect_fields import FieldDetailsList, GroupedFieldSet
from graphql.pyutils import AwaitableOrValue, Path, Undefined
from strawberry.schema.schema import StrawberryGraphQLCoreExecutionContext
from strawberry.schema.schema_converter import GraphQLCoreConverter
from strawberry.types.field import StrawberryField

from app.kit.shape import ROW_FUNCTION

__all__ = ["FastExecutionContext"]

PLAN_CACHE_SIZE = 1024

# Directives that collect_fields has already applied; any other one (e.g. @stream) may
# change how a field completes, so such fields are never plain.
_COLLECTION_DIRECTIVES = frozenset({"skip", "include"})

# Exact types that are neither awaitable nor exceptions: their checks can be skipped.
_SIMPLE_TYPES: frozenset[type] = frozenset(
    {str, int, float, bool, datetime, date, Decimal, dict, list, tuple}
)
# Only these are completed as lists here; other iterables (generators, async iterables,
# sets) keep graphql-core's handling.
_LIST_TYPES: frozenset[type] = frozenset({list, tuple})

_TYPENAME = "__typename"


class _Fallback(Exception):
    """The fast path cannot produce exactly graphql-core's result for this object."""


# A plan entry: (response key, read the value from the source, complete it).
_Entry = tuple[str, Callable[[Any], Any], Callable[[Any, Callable[[Any], bool]], Any]]
_Plan = tuple[_Entry, ...]
# (response key, field name, has directives other than @skip/@include)
_PlanKey = tuple[tuple[str, str, bool], ...]


def _leaf_completer(
    leaf: GraphQLLeafType, non_null: bool
) -> Callable[[Any, Callable[[Any], bool]], Any]:
    """Mirrors complete_value for a (non-null) leaf: None stays None, else coerced."""
    coerce = leaf.coerce_output_value
    # String and ID output a str unchanged (graphql-core's serializers return it as is).
    passes_str = leaf is GraphQLString or leaf is GraphQLID

    def complete(value: Any, is_awaitable: Callable[[Any], bool]) -> Any:
        if value is None or value is Undefined:
            if non_null:
                raise _Fallback
            return None
        if passes_str and type(value) is str:
            return value
        if type(value) not in _SIMPLE_TYPES and (
            is_awaitable(value) or isinstance(value, Exception)
        ):
            raise _Fallback
        coerced = coerce(value)
        if coerced is None or coerced is Undefined:
            raise _Fallback
        return coerced

    return complete


def _list_completer(
    item: Callable[[Any, Callable[[Any], bool]], Any], non_null: bool
) -> Callable[[Any, Callable[[Any], bool]], Any]:
    def complete(value: Any, is_awaitable: Callable[[Any], bool]) -> Any:
        if value is None or value is Undefined:
            if non_null:
                raise _Fallback
            return None
        if type(value) not in _LIST_TYPES:
            raise _Fallback
        return [item(element, is_awaitable) for element in value]

    return complete


def _completer(
    type_: GraphQLOutputType,
) -> Callable[[Any, Callable[[Any], bool]], Any] | None:
    """A completer for leaf types and lists of them (one level); None for anything else."""
    non_null = isinstance(type_, GraphQLNonNull)
    inner = get_nullable_type(type_)
    if is_leaf_type(inner):
        return _leaf_completer(inner, non_null)
    if isinstance(inner, GraphQLList):
        item_type = inner.of_type
        item_non_null = isinstance(item_type, GraphQLNonNull)
        item_inner = get_nullable_type(item_type)
        if is_leaf_type(item_inner):
            return _list_completer(_leaf_completer(item_inner, item_non_null), non_null)
    return None


def _getter(field_def: GraphQLField) -> Callable[[Any], Any] | None:
    """How Strawberry's basic resolver reads the value, if the field has one; for a shape's
    field with a resolver (`computed`, or a `graphql_convert` column: app/kit/shape.py), that
    resolver, a function of the row alone."""
    field = (field_def.extensions or {}).get(GraphQLCoreConverter.DEFINITION_BACKREF)
    if (
        not isinstance(field, StrawberryField)
        or field.extensions
        or field.is_subscription
        or field_def.args
        # Subclasses may read the value differently (e.g. relay's node ids).
        or type(field).get_result is not StrawberryField.get_result
    ):
        return None
    if field.base_resolver is not None:
        return _row_function(field)
    if not getattr(field_def.resolve, "_is_default", False):
        return None
    default_resolver = field.default_resolver
    name = field.python_name
    if default_resolver is getattr:
        return attrgetter(name)
    return lambda source: default_resolver(source, name)


def _row_function(field: StrawberryField) -> Callable[[Any], Any] | None:
    """The resolver of a shape field marked `ROW_FUNCTION`, called with the row as Strawberry
    calls it (its only parameter is the parent); None for any other resolver."""
    resolver = field.base_resolver
    if (
        resolver is None
        or not field.metadata.get(ROW_FUNCTION)
        or resolver.is_async
        or resolver.info_parameter is not None
        or resolver.arguments
    ):
        return None
    function = resolver.wrapped_func
    if isinstance(function, (staticmethod, classmethod)):
        return None
    return function


def plain_getter(field_def: GraphQLField) -> Callable[[Any], Any] | None:
    """How a plain field's value is read, or None when the field is not plain."""
    return _getter(field_def)


def leaf_value_completer(leaf: GraphQLLeafType) -> Callable[[Any], Any]:
    """A nullable leaf's output value, as complete_value makes it; raises on anything odd."""
    complete = _leaf_completer(leaf, non_null=False)
    return lambda value: complete(value, isawaitable)


def _return_none(_source: Any) -> None:
    return None


def _typename_completer(name: str) -> Callable[[Any, Callable[[Any], bool]], Any]:
    return lambda _value, _is_awaitable: name


@lru_cache(maxsize=PLAN_CACHE_SIZE)
def _build_plan(
    schema: GraphQLSchema, parent_type: GraphQLObjectType, key: _PlanKey
) -> _Plan | None:
    entries: list[_Entry] = []
    for response_key, field_name, has_other_directives in key:
        if has_other_directives:
            return None
        if field_name == _TYPENAME:
            entries.append((response_key, _return_none, _typename_completer(parent_type.name)))
            continue
        field_def = schema.get_field(parent_type, field_name)
        if field_def is None:
            return None
        getter = _getter(field_def)
        complete = _completer(field_def.type)
        if getter is None or complete is None:
            return None
        entries.append((response_key, getter, complete))
    return tuple(entries)


def _plan_key(grouped_field_set: GroupedFieldSet) -> _PlanKey:
    return tuple(
        (
            response_key,
            details[0].node.name.value,
            any(
                directive.name.value not in _COLLECTION_DIRECTIVES
                for field_details in details
                for directive in field_details.node.directives or ()
            ),
        )
        for response_key, details in grouped_field_set.items()
    )


def _enabled(context: Any) -> bool:
    """False when the request's settings turn the fast executor off (SWITCHBOARD_GRAPHQL_
    FAST_EXECUTOR); a schema run without the service's context (tests) keeps it on."""
    resources = getattr(context, "resources", None)
    return resources is None or resources.settings.graphql_fast_executor


class FastExecutionContext(StrawberryGraphQLCoreExecutionContext):
    """Strawberry's executor with a resolver-free path for objects of plain fields."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Per operation: grouped field sets are memoized by identity in collect_subfields,
        # so every item of a list reuses one; the set is kept so its id is not reused.
        self._plain_plans: dict[
            tuple[GraphQLObjectType, int], tuple[GroupedFieldSet, _Plan | None]
        ] = {}
        manager = self.middleware_manager
        # Middleware (extensions with a `resolve` hook) must see every field; the setting
        # turns the fast path off (app/config.py), e.g. to rule it out after an upgrade.
        self._fast_path = (manager is None or not manager.middlewares) and _enabled(
            self.context_value
        )

    def execute_fields(
        self,
        parent_type: GraphQLObjectType,
        source_value: Any,
        path: Path | None,
        grouped_field_set: GroupedFieldSet,
        position_context: Any,
    ) -> AwaitableOrValue[dict[str, Any]]:
        if self._fast_path:
            plan = self._plan(parent_type, grouped_field_set)
            if plan is not None:
                is_awaitable = self.is_awaitable
                try:
                    return {
                        key: complete(get(source_value), is_awaitable)
                        for key, get, complete in plan
                    }
                except Exception:  # noqa: S110
                    # graphql-core reproduces the failure with its errors and paths;
                    # it runs outside this block so its errors get no chained context.
                    pass
        return super().execute_fields(
            parent_type, source_value, path, grouped_field_set, position_context
        )

    def complete_iterable_value(
        self,
        item_type: GraphQLOutputType,
        field_details_list: FieldDetailsList,
        info: GraphQLResolveInfo[Any],
        path: Path,
        items: Iterable[Any],
        position_context: Any,
    ) -> AwaitableOrValue[list[Any]]:
        # A list of plain objects (e.g. a page of nodes) is built in one comprehension,
        # skipping graphql-core's per-item completion chain.
        if self._fast_path and type(items) in _LIST_TYPES:
            object_type = get_nullable_type(item_type)
            if isinstance(object_type, GraphQLObjectType) and object_type.is_type_of is None:
                grouped_field_set, new_defer_usages, _ = self.collect_subfields(
                    object_type, field_details_list
                )
                plan = None if new_defer_usages else self._plan(object_type, grouped_field_set)
                if plan is not None:
                    is_awaitable = self.is_awaitable
                    try:
                        return [
                            {key: complete(get(item), is_awaitable) for key, get, complete in plan}
                            for item in items
                        ]
                    except Exception:  # noqa: S110
                        pass  # graphql-core redoes the list, with its errors and paths
        return super().complete_iterable_value(
            item_type, field_details_list, info, path, items, position_context
        )

    def _plan(
        self, parent_type: GraphQLObjectType, grouped_field_set: GroupedFieldSet
    ) -> _Plan | None:
        memo_key = (parent_type, id(grouped_field_set))
        memo = self._plain_plans.get(memo_key)
        if memo is not None:
            return memo[1]
        plan = _build_plan(self.schema, parent_type, _plan_key(grouped_field_set))
        self._plain_plans[memo_key] = (grouped_field_set, plan)
        return plan
