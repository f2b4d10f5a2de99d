"""One declaration per resource shape: the GraphQL type, from which REST is derived.

A resource's public shape is declared once, as its Strawberry type in the domain's
`schemas.py`, each field naming the model column it shows (`column(Model.attr)`) or the
resolver that computes it (`computed(...)`). mypy checks every declaration against the model:
a renamed or retyped column is a type error where the shape names it. From the type,
`Shape` derives everything else the surfaces need:

- `columns()`: the repository's `list_columns` (a field shown under another name than its
  column's is selected under the public name, so a row carries the shape's attributes);
- `rest_model`: the REST response model that documents OpenAPI (`Rest(...)` says where REST
  differs: a field it leaves out, its own annotation, description or default);
- `to_public`: the REST/event serializer (a dict in the REST model's order), and
  `rest_columns()` the columns it reads;
- `rest_view(name, fields)`: another REST body of the same rows (some of the REST fields, in
  its own order), its model and serializer, where a resource answers with several (agents;
  `rest_fields=` then names the main model's fields);
- `as_graphql`: a row or entity as the GraphQL type (rows of `columns()` are served as they
  are, so the fast paths of app/graphql read them directly; an entity of a shape with renamed
  fields is read as such a row).

The GraphQL type of a domain may extend the shape (`class Contact(ContactShape)` in
`graphql.py`, served by `serving`) with resolver fields that need the GraphQL layer
(loaders, other domains' types); those are GraphQL-only and REST never sees them. One shown
among the shape's fields rather than after them has its place held in the shape by
`linked(...)`, and the subclass declares it again (a redeclared field keeps its place). A
column only REST shows is `rest_only` (with no column, a value such as a constant `object`);
a REST field order unlike GraphQL's is `rest_order`. A column GraphQL shows converted (a
timestamp as text) is `column(..., graphql_convert=fn)`.
docs/architecture.md ("One declaration per resource shape") tells the whole design.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import operator
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, overload

import strawberry
from pydantic import BaseModel, Field, create_model
from sqlalchemy import Label
from sqlalchemy.engine import Row
from sqlalchemy.orm import QueryableAttribute

from app.kit.serialize import Serializer, compile_serializer

T = TypeVar("T")
U = TypeVar("U")
ShapeT = TypeVar("ShapeT")
GraphQLT = TypeVar("GraphQLT")

_KEY = "switchboard.shape"
_LINK = "switchboard.shape.link"
# Marks a field whose resolver is a function of the row alone (no `info`, no arguments): a
# `computed` field or a `graphql_convert` column. The plain-field executor and the compiled
# plans of app/graphql call it directly.
ROW_FUNCTION = "switchboard.shape.row_function"


class _Same:
    """The REST description is the GraphQL one."""

    def __repr__(self) -> str:
        return "SAME"


SAME: Any = _Same()


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


_REQUIRED: Any = _Required()


@dataclass(frozen=True, slots=True)
class Rest:
    """How a field appears in REST, where it differs from its GraphQL declaration.

    `include=False`: GraphQL only. `annotation`: the REST type (by default the GraphQL one,
    with `ID` and `datetime` written as strings). `description`: REST's own (None: none).
    `default`: the field may be absent from the document's `required`. `convert`: applied to
    the value; `value`: computes it from the whole row (for computed fields).
    """

    include: bool = True
    annotation: Any = None
    description: Any = None
    default: Any = _REQUIRED
    convert: Callable[[Any], Any] | None = None
    value: Callable[[Any], Any] | None = None
    # Pydantic Field constraints that the document shows (ge, le, ...).
    constraints: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class _Spec:
    sources: tuple[Any, ...]  # the model columns the field reads
    source: str | None  # the attribute a plain field reads (None: computed)
    rest: Rest


GRAPHQL_ONLY = Rest(include=False)


@overload
def column(
    source: QueryableAttribute[T],
    *,
    description: str | None = None,
    deprecation_reason: str | None = None,
    rest: Rest = Rest(),
) -> T: ...


@overload
def column(
    source: QueryableAttribute[T],
    *,
    as_type: Callable[[T], U],
    description: str | None = None,
    deprecation_reason: str | None = None,
    rest: Rest = Rest(),
) -> U: ...


@overload
def column(
    source: QueryableAttribute[T],
    *,
    graphql_convert: Callable[[T], U],
    description: str | None = None,
    deprecation_reason: str | None = None,
    rest: Rest = Rest(),
) -> U: ...


def column(
    source: QueryableAttribute[Any],
    *,
    as_type: Callable[[Any], Any] | None = None,
    graphql_convert: Callable[[Any], Any] | None = None,
    description: str | None = None,
    deprecation_reason: str | None = None,
    rest: Rest = Rest(),
) -> Any:
    """A field showing the model column `source` (its type is checked against the annotation;
    `as_type=strawberry.ID` or `JSON` where GraphQL shows the value as such a scalar).
    `graphql_convert`: GraphQL shows the column's value through it (a timestamp GraphQL
    writes as text), REST as it is (or through `rest.convert`); the field is then checked
    against the conversion's result. `deprecation_reason`: GraphQL marks the field
    deprecated (a name kept for old clients)."""
    spec = _Spec((source,), source.key, rest)
    if graphql_convert is not None:
        return strawberry.field(
            resolver=_converted(operator.attrgetter(source.key), graphql_convert),
            description=description,
            deprecation_reason=deprecation_reason,
            metadata={_KEY: spec, ROW_FUNCTION: True},
        )
    return strawberry.field(
        description=description, deprecation_reason=deprecation_reason, metadata={_KEY: spec}
    )


def _converted(read: Callable[[Any], Any], convert: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """The resolver of a field GraphQL shows converted: the row's value (`read`) through
    `convert` (no return annotation, so the field's own gives its GraphQL type)."""

    def resolve(root):  # type: ignore[no-untyped-def]
        return convert(read(root))

    return resolve


@overload
def computed(
    value_of: Callable[..., T],
    *,
    sources: Sequence[QueryableAttribute[Any] | Label[Any]] = (),
    description: str | None = None,
    rest: Rest = GRAPHQL_ONLY,
) -> T: ...


@overload
def computed(
    value_of: Callable[[Any], T],
    *,
    graphql_convert: Callable[[T], U],
    sources: Sequence[QueryableAttribute[Any] | Label[Any]] = (),
    description: str | None = None,
    rest: Rest = GRAPHQL_ONLY,
) -> U: ...


def computed(
    value_of: Callable[..., Any],
    *,
    graphql_convert: Callable[[Any], Any] | None = None,
    sources: Sequence[QueryableAttribute[Any] | Label[Any]] = (),
    description: str | None = None,
    rest: Rest = GRAPHQL_ONLY,
) -> Any:
    """A field computed from the row by `value_of`, reading the columns `sources` (selected by
    `columns()`; a labelled column, such as a joined table's `Contact.name.label(
    "contact_name")`, is read under its label). `value_of` takes the row alone and reads
    nothing else: the plain-field executor and the compiled plans (app/graphql) call it as they
    read a column. GraphQL shows its value as it is (`value_of` is then the resolver, its row
    parameter `root: strawberry.Parent[Any]`) or through `graphql_convert` (a dict as a
    GraphQL object); REST shows it as it is, unless `rest.value` computes REST's own."""
    if rest.include and rest.value is None:
        rest = dataclasses.replace(rest, value=value_of)
    resolver = value_of if graphql_convert is None else _converted(value_of, graphql_convert)
    spec = _Spec(tuple(sources), None, rest)
    return strawberry.field(
        resolver=resolver, description=description, metadata={_KEY: spec, ROW_FUNCTION: True}
    )


def linked(*, sources: Sequence[QueryableAttribute[Any]] = ()) -> Any:
    """The place of a GraphQL-only field that needs the GraphQL layer (another domain's type,
    a loader) and shows among the shape's fields. The GraphQL type that extends the shape in
    `graphql.py` declares the field again, with its type and resolver, and it keeps this
    place (`serving` refuses a type that does not); `sources` are the columns its resolver
    reads (selected by `columns()`). Annotate it `object` in the shape."""
    spec = _Spec(tuple(sources), None, GRAPHQL_ONLY)
    return strawberry.field(metadata={_KEY: spec, _LINK: True})


def _rest_annotation(annotation: Any) -> Any:
    """The GraphQL annotation as REST writes it: IDs and datetimes are strings."""
    if annotation is strawberry.ID or annotation is dt.datetime:
        return str
    origin = typing.get_origin(annotation)
    if origin in (types.UnionType, typing.Union):
        args = tuple(_rest_annotation(arg) for arg in typing.get_args(annotation))
        result = args[0]
        for arg in args[1:]:
            result = result | arg
        return result
    if origin is list:
        return list[_rest_annotation(typing.get_args(annotation)[0])]  # type: ignore[misc]
    return annotation


@dataclass(frozen=True, slots=True)
class RestView:
    """A REST body of a shape's rows: its model (OpenAPI) and serializer."""

    rest_model: type[BaseModel]
    to_public: Serializer
    sources: tuple[Any, ...]  # the columns `to_public` reads


class Shape(Generic[ShapeT]):
    """What the surfaces derive from one shape declaration (see the module's docstring)."""

    def __init__(
        self,
        graphql_type: type[ShapeT],
        *,
        rest_name: str,
        rest_doc: str | None = None,
        rest_order: Sequence[str] | None = None,
        rest_fields: Sequence[str] | None = None,
        rest_only: Sequence[tuple[str, QueryableAttribute[Any] | None, Rest]] = (),
    ) -> None:
        """`rest_order`: the REST model's order of all its fields, where GraphQL's differs.
        `rest_fields`: the REST model's fields, in order, where it shows only some (a
        resource with several REST bodies of one row names the others with `rest_view`)."""
        self.graphql_type = graphql_type
        hints = typing.get_type_hints(graphql_type, include_extras=True)
        self._specs: dict[str, _Spec] = {}
        self._rest_only_columns: list[Any] = []
        for field in dataclasses.fields(graphql_type):  # type: ignore[arg-type]
            spec = field.metadata.get(_KEY)
            if not isinstance(spec, _Spec):
                raise ValueError(
                    f"{graphql_type.__name__}.{field.name} is not declared with column() "
                    "or computed()"
                )
            self._specs[field.name] = spec
        # Fields the GraphQL type extending the shape must declare again (`linked`).
        self._links = tuple(
            field.name
            for field in dataclasses.fields(graphql_type)  # type: ignore[arg-type]
            if field.metadata.get(_LINK)
        )
        rest = [(name, spec.rest, spec) for name, spec in self._specs.items() if spec.rest.include]
        # REST-only fields: a column GraphQL does not show (its annotation given in Rest), or
        # with no column (None) a value of `Rest.value` (a constant such as `object`).
        for name, source, options in rest_only:
            if options.annotation is None:
                raise ValueError(f"{graphql_type.__name__}: REST-only {name} needs an annotation")
            if source is None:
                if options.value is None:
                    raise ValueError(
                        f"{graphql_type.__name__}: REST-only {name} without a column needs value"
                    )
                rest.append((name, options, _Spec((), None, options)))
                continue
            rest.append((name, options, _Spec((source,), source.key, options)))
            self._rest_only_columns.append(source)
        if rest_order is not None and rest_fields is not None:
            raise ValueError(f"{graphql_type.__name__}: rest_order or rest_fields, not both")
        self._rest_entries = {entry[0]: entry for entry in rest}
        if rest_order is not None:
            if sorted(self._rest_entries) != sorted(rest_order):
                raise ValueError(f"rest_order of {graphql_type.__name__} names other fields")
            rest = [self._rest_entries[name] for name in rest_order]
        if rest_fields is not None:
            rest = self._rest_fields(rest_fields)
        self._hints = hints
        self._graphql_fields = {f.name: f for f in dataclasses.fields(graphql_type)}  # type: ignore[arg-type]
        main = self._rest_body(rest_name, rest_doc, rest)
        self.rest_model: type[BaseModel] = main.rest_model
        self.to_public: Serializer = main.to_public
        self._rest_sources = main.sources
        # Renamed fields: rows of columns() carry the public name too; entities only the
        # model's (as_graphql reads them as such a row).
        self._renamed = any(
            spec.source is not None and spec.source != name for name, spec in self._specs.items()
        )
        self._attributes = tuple((label, source.key) for label, source in self._pairs())

    def rest_view(self, rest_name: str, fields: Sequence[str], doc: str | None = None) -> RestView:
        """Another REST body of the same row: the shape's REST fields `fields`, in that
        order (each as the shape's REST side declares it), as a model and its serializer."""
        return self._rest_body(rest_name, doc, self._rest_fields(fields))

    def _rest_fields(self, fields: Sequence[str]) -> list[tuple[str, Rest, _Spec]]:
        unknown = [name for name in fields if name not in self._rest_entries]
        if unknown or len(set(fields)) != len(fields):
            raise ValueError(
                f"{self.graphql_type.__name__}: REST fields {list(fields)} name a field twice "
                f"or one REST does not show ({unknown})"
            )
        return [self._rest_entries[name] for name in fields]

    def _rest_body(
        self, rest_name: str, rest_doc: str | None, rest: Sequence[tuple[str, Rest, _Spec]]
    ) -> RestView:
        definitions: dict[str, Any] = {}
        entries: list[tuple[str, str, Callable[[Any], Any] | None]] = []
        rest_sources: dict[str, Any] = {}  # the columns the serializer reads, by key
        for name, options, spec in rest:
            annotation = options.annotation
            if annotation is None:
                annotation = _rest_annotation(self._hints[name])
            description = options.description
            if description is SAME:
                description = self._graphql_fields[name].description  # type: ignore[attr-defined]
            field_args: dict[str, Any] = dict(options.constraints or {})
            if description is not None:
                field_args["description"] = description
            if options.default is not _REQUIRED:
                field_args["default"] = options.default
            definitions[name] = (annotation, Field(**field_args) if field_args else ...)
            for source in spec.sources:
                rest_sources.setdefault(source.key, source)
            if options.value is not None:
                entries.append((name, "", options.value))
            elif spec.source is None:
                raise ValueError(
                    f"{self.graphql_type.__name__}.{name}: a computed REST field needs value"
                )
            else:
                entries.append((name, spec.source, options.convert))
        model = create_model(
            rest_name,
            __doc__=rest_doc,
            __module__=self.graphql_type.__module__,
            **definitions,
        )
        return RestView(model, compile_serializer(rest_name, entries), tuple(rest_sources.values()))

    def _pairs(self, extra: Sequence[Any] = ()) -> list[tuple[str, Any]]:
        pairs: list[tuple[str, Any]] = []
        seen: set[str] = set()

        def add(label: str, source: Any) -> None:
            if label not in seen:
                seen.add(label)
                pairs.append((label, source))

        for name, spec in self._specs.items():
            for source in spec.sources:
                add(source.key, source)
                if spec.source is not None and spec.source != name:
                    add(name, source)
        for source in (*self._rest_only_columns, *extra):
            add(source.key, source)
        return pairs

    def columns(self, *extra: Any) -> tuple[Any, ...]:
        """The columns a row of this shape is selected with (`list_columns`), then `extra`.
        A renamed field's column is selected under both names: the serializer reads the
        model's, GraphQL the public one."""
        return tuple(
            source if label == source.key else source.label(label)
            for label, source in self._pairs(extra)
        )

    def rest_columns(self, *extra: Any) -> tuple[Any, ...]:
        """The columns `to_public` reads, in the REST order, then `extra`: what a statement
        whose rows only feed the serializer selects (an UPDATE … RETURNING for events)."""
        seen = {source.key for source in self._rest_sources}
        return (*self._rest_sources, *(source for source in extra if source.key not in seen))

    def as_graphql(self, value: Any) -> ShapeT:
        """`value` (a row of `columns()` or the model's entity) served as the GraphQL type."""
        if self._renamed and not isinstance(value, Row):
            return typing.cast(
                ShapeT,
                types.SimpleNamespace(
                    **{label: getattr(value, key) for label, key in self._attributes}
                ),
            )
        # A row of columns() or an entity carries every attribute the type reads: mypy checked
        # each column's type against the field's where the shape declares it.
        return typing.cast(ShapeT, value)

    def serving(self, graphql_type: type[GraphQLT]) -> Callable[[Any], GraphQLT]:
        """`as_graphql` for a GraphQL type that extends the shape with resolver fields of the
        GraphQL layer (its fields beyond the shape's read nothing but `id`-like attributes the
        shape declares), checked here once: the function a list then calls per row."""
        self._check_extension(graphql_type)
        return typing.cast(Callable[[Any], GraphQLT], self.as_graphql)

    def _check_extension(self, graphql_type: type[Any]) -> None:
        if not issubclass(graphql_type, self.graphql_type):
            raise TypeError(f"{graphql_type.__name__} does not extend {self.graphql_type.__name__}")
        fields = {f.name: f for f in dataclasses.fields(graphql_type)}  # type: ignore[arg-type]
        unresolved = [name for name in self._links if fields[name].metadata.get(_LINK)]
        if unresolved:
            raise TypeError(f"{graphql_type.__name__} does not declare {', '.join(unresolved)}")
