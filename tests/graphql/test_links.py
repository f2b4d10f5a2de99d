"""`@extends` (app/graphql/links.py): a dependent domain declares a field on a lower domain's
type. The field is published after the type's own, in app/domains.py order, resolves with the
extended type's row as `self`, and every use that would not add it fails at declaration.

The types are built here (no annotations from the future: local classes must resolve), apart
from the app's; `Links` instances keep them out of the app's registry.
"""

from typing import Any

import pytest
import strawberry
from graphql import GraphQLObjectType
from strawberry.schema.schema_converter import GraphQLCoreConverter
from strawberry.types.base import StrawberryObjectDefinition

from app.graphql.execution import FastExecutionContext
from app.graphql.links import (
    LINKS,
    LinkDeclarationError,
    LinkedSchema,
    Links,
    check_strawberry_publishes_links,
    extends,
)
from app.graphql.schema import build_schema


@strawberry.type
class Box:
    id: strawberry.ID
    size: int


def query_of(*rows: Any) -> type:
    @strawberry.type
    class Query:
        @strawberry.field
        def boxes(self) -> list[Box]:
            return list(rows)

    return Query


def schema_of(links: Links, query: type, **options: Any) -> strawberry.Schema:
    class Schema(LinkedSchema):
        pass

    Schema.links = links
    return Schema(query=query, **options)


def field_names(schema: strawberry.Schema, name: str) -> list[str]:
    graphql_type = schema._schema.get_type(name)
    assert isinstance(graphql_type, GraphQLObjectType)
    return list(graphql_type.fields)


class Row:
    """A row as a repository returns it: attributes only, not the Strawberry type."""

    def __init__(self, id: str, size: int) -> None:
        self.id = id
        self.size = size


@pytest.mark.parametrize("executor", [None, FastExecutionContext], ids=["graphql-core", "fast"])
async def test_a_link_is_published_after_the_own_fields_and_resolves_with_its_root(
    executor: Any,
) -> None:
    links = Links(domains=("app.contacts", "app.calls", "app.inbox"))

    # Declared by a later domain first: the order is the domains', not the declarations'.
    class BoxLabel(Box):
        __module__ = "app.inbox.graphql"

        @strawberry.field(description="The box's label")
        def label(self, prefix: str = "box") -> str:
            return f"{prefix}-{self.id}"

    class BoxDoubled(Box):
        __module__ = "app.calls.graphql"

        @strawberry.field
        async def doubled(self) -> int:
            return self.size * 2

    links.add(Box, BoxLabel)
    links.add(Box, BoxDoubled)
    schema = schema_of(
        links,
        query_of(Row("a", 1), Row("b", 5)),
        **({"execution_context_class": executor} if executor else {}),
    )

    assert field_names(schema, "Box") == ["id", "size", "doubled", "label"]
    assert '"""The box\'s label"""\n  label(prefix: String! = "box"): String!' in str(schema)
    result = await schema.execute('{ boxes { id doubled label(prefix: "crate") } }')
    assert result.errors is None
    assert result.data == {
        "boxes": [
            {"id": "a", "doubled": 2, "label": "crate-a"},
            {"id": "b", "doubled": 10, "label": "crate-b"},
        ]
    }
    # The type itself is untouched: a plain schema shows it without its links.
    assert field_names(strawberry.Schema(query=query_of()), "Box") == ["id", "size"]


def test_the_app_types_carry_the_links_of_their_dependent_domains() -> None:
    schema = build_schema()
    assert field_names(schema, "Contact")[-2:] == ["recentCalls", "openTicket"]
    assert field_names(schema, "Ticket")[-1] == "messages"
    declared_in = {
        name: field.extensions[GraphQLCoreConverter.DEFINITION_BACKREF].origin.__module__
        for type_name, name in (
            ("Contact", "recentCalls"),
            ("Contact", "openTicket"),
            ("Ticket", "messages"),
        )
        for field in [schema._schema.get_type(type_name).fields[name]]  # type: ignore[union-attr]
    }
    assert declared_in == {
        "recentCalls": "app.calls.graphql",
        "openTicket": "app.inbox.graphql",
        "messages": "app.conversations.graphql",
    }


def test_a_wrong_use_fails_when_declared() -> None:
    links = Links()

    class NotAType:
        pass

    @strawberry.input
    class BoxInput:
        size: int

    def declare(target: type, **body: Any) -> None:
        links.add(target, type("Link", (), body))

    def resolver(self: Any) -> int:
        return 1

    with pytest.raises(LinkDeclarationError, match=r"only a @strawberry\.type class"):
        declare(NotAType, extra=strawberry.field(resolver=resolver))
    with pytest.raises(LinkDeclarationError, match=r"only a @strawberry\.type class"):
        declare(BoxInput, extra=strawberry.field(resolver=resolver))
    with pytest.raises(LinkDeclarationError, match="declares no field"):
        declare(Box)
    with pytest.raises(LinkDeclarationError, match="must be resolver fields"):
        declare(Box, __annotations__={"color": str})
    with pytest.raises(LinkDeclarationError, match="Box already has a field size"):
        declare(Box, size=strawberry.field(resolver=resolver))
    with pytest.raises(LinkDeclarationError, match="Box already has a field id"):
        declare(Box, id_=strawberry.field(resolver=resolver, name="id"))
    decorated = strawberry.type(type("Link", (), {"x": strawberry.field(resolver=resolver)}))
    with pytest.raises(LinkDeclarationError, match=r"leave @strawberry\.type off"):
        links.add(Box, decorated)
    with pytest.raises(LinkDeclarationError, match="may subclass the type it extends"):
        links.add(Box, type("Link", (Row,), {"x": strawberry.field(resolver=resolver)}))

    declare(Box, extra=strawberry.field(resolver=resolver))
    with pytest.raises(LinkDeclarationError, match="Box already has a field extra"):
        declare(Box, extra=strawberry.field(resolver=resolver))


def test_a_link_declared_after_its_type_was_built_into_a_schema_fails() -> None:
    @strawberry.type
    class Late:
        id: strawberry.ID

    @strawberry.type
    class Query:
        @strawberry.field
        def late(self) -> Late:
            return Late(id=strawberry.ID("1"))

    schema_of(LINKS, Query)
    with pytest.raises(LinkDeclarationError, match="already part of a built schema"):

        @extends(Late)
        class LateLink(Late):
            @strawberry.field
            def extra(self) -> int:
                return 1


def test_the_import_check_fails_loudly_if_strawberry_ignores_get_fields(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    check_strawberry_publishes_links()  # passes as the module's import did

    def own_fields_only(
        self: GraphQLCoreConverter, type_definition: StrawberryObjectDefinition
    ) -> Any:
        """A Strawberry that reads the definition's fields, not Schema.get_fields."""
        converter = self.get_fields
        self.get_fields = lambda definition: definition.fields  # type: ignore[method-assign]
        try:
            return original(self, type_definition)
        finally:
            self.get_fields = converter  # type: ignore[method-assign]

    original = GraphQLCoreConverter.get_graphql_fields
    monkeypatch.setattr(GraphQLCoreConverter, "get_graphql_fields", own_fields_only)
    with pytest.raises(
        RuntimeError, match=r"no longer builds an object type from Schema\.get_fields"
    ):
        check_strawberry_publishes_links()
