"""Fields a dependent domain adds to a lower domain's GraphQL type: `@extends(Type)`.

Domains import each other one way (docs/architecture.md, "Import layers"): calls and the inbox
read contacts, conversations read tickets. A field that links the other way (a contact's recent
calls, a ticket's messages) is declared by the dependent domain, beside the loader it uses:

    @extends(Contact)
    class ContactCalls(Contact):
        @strawberry.field(description="The contact's newest calls first")
        async def recent_calls(self, info: Info[Context, None], limit: int = 5) -> list[CallLog]:
            return await load_recent_calls(info.context, self.id, limit)

The class's own fields become fields of the extended type; `self` is the root (the extended
type's row), and the class subclasses the extended type only so that mypy types it as one. A
link is a resolver: a plain field would read an attribute the extended type's rows do not have.

Every `LinkedSchema` (`SwitchboardSchema` is one) publishes them through Strawberry's public
`Schema.get_fields`, after the type's own fields and in the order of app/domains.py (the
declaring module's domain, then the order of declaration), whatever order the modules were
imported in. Nothing of Strawberry is modified: the extended type's definition keeps its own
fields, and a plain `strawberry.Schema` shows the type without its links. Whether Strawberry
still builds an object type from `get_fields` is checked when this module is imported
(`check_strawberry_publishes_links`), so an upgrade that changed it fails at start, not with
fields silently missing.
"""

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import version
from typing import Any, TypeVar

import strawberry
from strawberry.schema.name_converter import NameConverter
from strawberry.types.base import StrawberryObjectDefinition, get_object_definition
from strawberry.types.field import StrawberryField

from app.domains import DOMAINS

ClassT = TypeVar("ClassT", bound=type)


class LinkDeclarationError(TypeError):
    """`@extends` used in a way that would not add the fields it declares."""


@dataclass(frozen=True, slots=True)
class _Link:
    domain: int  # the declaring module's place in DOMAINS (after them all: not a domain)
    order: int  # declaration order
    declared: StrawberryField

    @property
    def rank(self) -> tuple[int, int]:
        return (self.domain, self.order)


def _graphql_name(field: StrawberryField) -> str:
    return NameConverter().from_field(field)


class Links:
    """The fields declared on types from outside them, by the type they extend."""

    def __init__(self, domains: Sequence[str] = DOMAINS) -> None:
        self._domains = tuple(domains)
        self._by_type: dict[type, list[_Link]] = {}
        # Types whose fields a LinkedSchema has read: a link added later would be missing.
        self._published: set[type] = set()
        self._counter = itertools.count()

    def _domain_of(self, module: str) -> int:
        for index, package in enumerate(self._domains):
            if module == package or module.startswith(f"{package}."):
                return index
        return len(self._domains)

    def add(self, target: type, declaring: type) -> None:
        """Adds the resolver fields `declaring` defines itself to `target`'s links."""
        where = f"@extends({getattr(target, '__name__', target)!s}) on {declaring.__qualname__}"
        definition = _extensible_definition(target, where)
        if target in self._published:
            raise LinkDeclarationError(
                f"{where}: {definition.name} is already part of a built schema, which would "
                "lack the link; declare links at import of the declaring domain's graphql "
                "module, before the schema is built"
            )
        fields = _fields_declared_by(declaring, target, where)
        taken = {
            name
            for existing in (*definition.fields, *self._linked(target))
            for name in (existing.python_name, _graphql_name(existing))
        }
        for declared in fields:
            for name in (declared.python_name, _graphql_name(declared)):
                if name in taken:
                    raise LinkDeclarationError(
                        f"{where}: {definition.name} already has a field {name}"
                    )
        domain = self._domain_of(declaring.__module__)
        self._by_type.setdefault(target, []).extend(
            _Link(domain, next(self._counter), declared) for declared in fields
        )

    def _linked(self, target: type) -> list[StrawberryField]:
        links = sorted(self._by_type.get(target, ()), key=lambda link: link.rank)
        return [link.declared for link in links]

    def fields_of(
        self, definition: StrawberryObjectDefinition, name_of: Callable[[StrawberryField], str]
    ) -> list[StrawberryField]:
        """The type's own fields, then its links (app/domains.py order); `name_of` is the
        schema's field naming, under which no two may share a name."""
        self._published.add(definition.origin)
        linked = self._linked(definition.origin)
        if not linked:
            return definition.fields
        fields = [*definition.fields, *linked]
        names = [name_of(published) for published in fields]
        if len(set(names)) != len(names):
            repeated = sorted({name for name in names if names.count(name) > 1})
            raise LinkDeclarationError(f"{definition.name} would have two fields {repeated}")
        return fields


def _extensible_definition(target: Any, where: str) -> StrawberryObjectDefinition:
    definition = get_object_definition(target)
    if (
        definition is None
        or definition.origin is not target
        or definition.is_input
        or definition.is_interface
    ):
        raise LinkDeclarationError(f"{where}: only a @strawberry.type class can be extended")
    if definition.is_graphql_generic:
        raise LinkDeclarationError(
            f"{where}: a generic type is copied per use; extend a concrete type"
        )
    return definition


def _fields_declared_by(declaring: type, target: type, where: str) -> list[StrawberryField]:
    """The fields `declaring` defines in its own body, read by making it a Strawberry type."""
    if "__strawberry_definition__" in vars(declaring):
        raise LinkDeclarationError(f"{where}: leave @strawberry.type off; @extends applies it")
    if declaring.__bases__ not in ((object,), (target,)):
        raise LinkDeclarationError(
            f"{where}: the class may subclass the type it extends (to type `self`), nothing else"
        )
    own = {
        *(name for name, value in vars(declaring).items() if isinstance(value, StrawberryField)),
        *vars(declaring).get("__annotations__", {}),
    }
    if not own:
        raise LinkDeclarationError(f"{where}: the class declares no field")
    definition = get_object_definition(strawberry.type(declaring), strict=True)
    fields = [declared for declared in definition.fields if declared.python_name in own]
    plain = sorted(own - {declared.python_name for declared in fields if declared.base_resolver})
    if plain:
        raise LinkDeclarationError(
            f"{where}: {', '.join(plain)} must be resolver fields (@strawberry.field on a "
            "method, the root as `self`): a plain field reads an attribute the rows lack"
        )
    return fields


LINKS = Links()


class LinkedSchema(strawberry.Schema):
    """A schema whose object types show the links declared on them with `@extends`."""

    links: Links = LINKS

    def get_fields(self, type_definition: StrawberryObjectDefinition) -> list[StrawberryField]:
        return self.links.fields_of(type_definition, self.config.name_converter.from_field)


def extends(target: type) -> Callable[[ClassT], ClassT]:
    """Declares the resolver fields of the decorated class on `target` (module docstring)."""

    def declare(declaring: ClassT) -> ClassT:
        LINKS.add(target, declaring)
        return declaring

    return declare


def check_strawberry_publishes_links() -> None:
    """Fails unless a link declared on a type is in a built schema, resolving with its root:
    `LinkedSchema` relies on Strawberry building each object type from `Schema.get_fields`."""

    @strawberry.type
    class Probe:
        value: int

    class ProbeLink(Probe):
        @strawberry.field
        def doubled(self) -> int:
            return self.value * 2

    @strawberry.type
    class ProbeQuery:
        @strawberry.field
        def probe(self) -> Probe:
            return Probe(value=21)

    probe_links = Links()
    probe_links.add(Probe, ProbeLink)

    class ProbeSchema(LinkedSchema):
        links = probe_links

    result = ProbeSchema(query=ProbeQuery).execute_sync("{ probe { value doubled } }")
    if result.errors or result.data != {"probe": {"value": 21, "doubled": 42}}:
        raise RuntimeError(
            f"strawberry-graphql {version('strawberry-graphql')} no longer builds an object "
            "type from Schema.get_fields (or no longer passes the root as `self`): the fields "
            "declared with @extends would be missing from the schema. Revisit "
            f"app/graphql/links.py before upgrading (found {result.data}, {result.errors})."
        )


check_strawberry_publishes_links()
