"""One shape declaration per resource (app/kit/shape.py): what REST and GraphQL derive."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any, Literal, cast

import pytest
import strawberry
from sqlalchemy import String, create_engine, select
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from app.kit.shape import GRAPHQL_ONLY, SAME, Rest, Shape, column, computed, linked


class _Base(DeclarativeBase):
    pass


class Widget(_Base):
    __tablename__ = "widgets"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    organization_id: Mapped[str] = mapped_column(String(36))
    kind: Mapped[str] = mapped_column(String(8))
    tags: Mapped[list[str] | None] = mapped_column(String(8))
    first: Mapped[str] = mapped_column(String(8))
    last: Mapped[str] = mapped_column(String(8))
    created_at: Mapped[datetime] = mapped_column()
    secret: Mapped[str] = mapped_column(String(8))


def _full_name(root: strawberry.Parent[Any]) -> str:
    return f"{root.first} {root.last}"


@strawberry.type(description="A widget.")
class WidgetType:
    id: strawberry.ID = column(Widget.id, as_type=strawberry.ID)
    account_id: str = column(Widget.organization_id)
    kind: str = column(
        Widget.kind, description="a or b", rest=Rest(annotation=Literal["a", "b"], description=SAME)
    )
    tags: list[str] | None = column(Widget.tags, rest=Rest(convert=lambda tags: tags or []))
    full_name: str = computed(
        _full_name,
        sources=(Widget.first, Widget.last),
        rest=Rest(annotation=str, value=lambda row: f"{row.first} {row.last}"),
    )
    created_at: datetime = column(Widget.created_at, rest=Rest(default=None))
    first: str = column(Widget.first, rest=GRAPHQL_ONLY)


WIDGET = Shape(WidgetType, rest_name="WidgetResponse", rest_doc="A widget, for REST.")


def test_the_rest_model_follows_the_declaration() -> None:
    schema = WIDGET.rest_model.model_json_schema(mode="serialization")
    assert WIDGET.rest_model.__name__ == "WidgetResponse"
    assert schema["description"] == "A widget, for REST."
    assert list(schema["properties"]) == [
        "id",
        "account_id",
        "kind",
        "tags",
        "full_name",
        "created_at",
    ]
    # IDs and datetimes are strings; a field with a REST default is not required.
    assert schema["properties"]["id"]["type"] == "string"
    assert schema["properties"]["created_at"]["type"] == "string"
    assert "created_at" not in schema["required"]
    assert schema["properties"]["kind"] == {
        "description": "a or b",
        "enum": ["a", "b"],
        "title": "Kind",
        "type": "string",
    }


def test_the_serializer_reads_columns_renames_and_computed_values() -> None:
    now = datetime.now(UTC)
    entity = Widget(
        id="w1",
        organization_id="o1",
        kind="a",
        tags=None,
        first="Ada",
        last="L",
        created_at=now,
        secret="never",
    )
    assert WIDGET.to_public(entity) == {
        "id": "w1",
        "account_id": "o1",
        "kind": "a",
        "tags": [],
        "full_name": "Ada L",
        "created_at": now,
    }


def test_columns_select_each_source_once_and_renamed_ones_under_both_names() -> None:
    labels = [column.name for column in select(*WIDGET.columns()).selected_columns]
    assert labels == [
        "id",
        "organization_id",
        "account_id",
        "kind",
        "tags",
        "first",
        "last",
        "created_at",
    ]
    with_extra = WIDGET.columns(Widget.secret, Widget.id)
    assert len(with_extra) == len(labels) + 1


def test_rest_columns_are_what_the_serializer_reads_in_the_rest_order() -> None:
    # GraphQL-only `first` is read by the computed full_name; no column is selected renamed.
    keys = [column.key for column in WIDGET.rest_columns()]
    assert keys == ["id", "organization_id", "kind", "tags", "first", "last", "created_at"]
    with_extra = [column.key for column in WIDGET.rest_columns(Widget.secret, Widget.kind)]
    assert with_extra == [*keys, "secret"]
    row = SimpleNamespace(**{key: key for key in keys})
    assert WIDGET.to_public(row)["account_id"] == "organization_id"


def test_an_entity_of_a_shape_with_a_rename_is_read_as_a_row() -> None:
    entity = Widget(
        id="w1",
        organization_id="o1",
        kind="b",
        tags=["x"],
        first="A",
        last="B",
        created_at=datetime.now(UTC),
        secret="never",
    )
    served = WIDGET.as_graphql(entity)
    assert served.account_id == "o1"
    assert not hasattr(served, "secret")


def test_a_row_of_the_columns_is_served_as_it_is() -> None:
    engine = create_engine("sqlite://")
    _Base.metadata.create_all(engine)
    with Session(engine) as session:
        session.add(
            Widget(
                id="w1",
                organization_id="o1",
                kind="a",
                tags=None,
                first="A",
                last="B",
                created_at=datetime.now(UTC),
                secret="never",
            )
        )
        session.flush()
        row = session.execute(select(*WIDGET.columns())).one()
    assert WIDGET.as_graphql(row) is cast(Any, row)
    assert (row.account_id, row.organization_id) == ("o1", "o1")
    assert WIDGET.to_public(row)["account_id"] == "o1"


def test_a_field_without_a_declaration_or_a_wrong_order_is_refused() -> None:
    @strawberry.type
    class Loose:
        id: strawberry.ID = column(Widget.id, as_type=strawberry.ID)
        note: str

    with pytest.raises(ValueError, match=r"Loose\.note is not declared"):
        Shape(Loose, rest_name="LooseResponse")
    with pytest.raises(ValueError, match="rest_order"):
        Shape(WidgetType, rest_name="W", rest_order=("id",))


def test_a_graphql_type_served_for_a_shape_must_extend_it() -> None:
    @strawberry.type
    class Other:
        id: strawberry.ID

    with pytest.raises(TypeError, match="does not extend"):
        WIDGET.serving(Other)


@strawberry.type
class Kind:
    name: str


@strawberry.type
class LinkedShape:
    id: strawberry.ID = column(Widget.id, as_type=strawberry.ID)
    kind_of: object = linked(sources=(Widget.kind,))
    first: str = column(Widget.first)


LINKED = Shape(LinkedShape, rest_name="LinkedResponse")


def _kind_of(root: strawberry.Parent[Any]) -> Kind:
    return Kind(name=root.kind)


@strawberry.type(name="Linked")
class Linked(LinkedShape):
    kind_of: Kind = strawberry.field(resolver=_kind_of, description="The widget's kind")
    last: str = "never read"


def test_a_linked_field_keeps_its_place_and_its_columns_are_selected() -> None:
    @strawberry.type
    class Query:
        @strawberry.field
        def linked(self) -> Linked:
            row = SimpleNamespace(id="w1", kind="a", first="Ada")
            return LINKED.serving(Linked)(row)

    schema = strawberry.Schema(Query)
    printed = schema.as_str()
    assert printed.index("kindOf") < printed.index("first") < printed.index("last")
    result = schema.execute_sync("{ linked { id kindOf { name } first } }")
    assert result.data == {"linked": {"id": "w1", "kindOf": {"name": "a"}, "first": "Ada"}}
    labels = [column.name for column in select(*LINKED.columns()).selected_columns]
    assert labels == ["id", "kind", "first"]
    # GraphQL only: REST and its serializer leave it out.
    assert list(LINKED.rest_model.model_fields) == ["id", "first"]
    assert LINKED.to_public(SimpleNamespace(id="w1", kind="a", first="Ada")) == {
        "id": "w1",
        "first": "Ada",
    }


def test_a_graphql_type_that_leaves_a_linked_field_undeclared_is_refused() -> None:
    @strawberry.type
    class Unlinked(LinkedShape):
        extra: str = "x"

    with pytest.raises(TypeError, match="does not declare kind_of"):
        LINKED.serving(Unlinked)


def _initials(root: strawberry.Parent[Any]) -> str:
    return str(root.initials)


@strawberry.type
class WidgetBrief:
    id: strawberry.ID = column(Widget.id, as_type=strawberry.ID)
    old_kind: str = column(Widget.kind, deprecation_reason="Use kind", rest=Rest(include=False))
    initials: str = computed(
        _initials,
        sources=(Widget.first.label("initials"),),
        rest=Rest(annotation=str, value=lambda row: row.initials),
    )


def test_a_deprecated_column_and_a_computed_field_from_a_labelled_column() -> None:
    brief = Shape(WidgetBrief, rest_name="WidgetBriefResponse")
    # The label is selected as it is: a joined table's column read under its own name.
    labels = [column.name for column in select(*brief.columns()).selected_columns]
    assert labels == ["id", "kind", "old_kind", "initials"]
    assert list(brief.rest_model.model_fields) == ["id", "initials"]
    assert brief.to_public(SimpleNamespace(id="w1", kind="a", initials="A")) == {
        "id": "w1",
        "initials": "A",
    }

    @strawberry.type
    class Query:
        @strawberry.field
        def brief(self) -> WidgetBrief:
            return cast(WidgetBrief, SimpleNamespace(id="w1", kind="a", initials="A"))

    sdl = str(strawberry.Schema(query=Query))
    assert 'oldKind: String! @deprecated(reason: "Use kind")' in sdl


def test_rest_fields_and_views_are_bodies_of_one_row() -> None:
    brief = Shape(WidgetType, rest_name="WidgetBrief", rest_fields=("kind", "id"))
    detail = brief.rest_view("WidgetDetail", ("id", "full_name", "tags"), "A widget's detail.")
    row = SimpleNamespace(
        id="w1", organization_id="o", kind="a", tags=None, first="Ada", last="L", secret="x"
    )
    assert list(brief.rest_model.model_fields) == ["kind", "id"]
    assert brief.to_public(row) == {"kind": "a", "id": "w1"}
    assert detail.rest_model.__name__ == "WidgetDetail"
    assert detail.rest_model.__doc__ == "A widget's detail."
    assert detail.to_public(row) == {"id": "w1", "full_name": "Ada L", "tags": []}
    # The columns a row is selected with stay the shape's: every view reads from them.
    assert [column.key for column in brief.columns()] == [column.key for column in WIDGET.columns()]
    with pytest.raises(ValueError, match="first"):
        brief.rest_view("Nope", ("id", "first"))  # GraphQL only
    with pytest.raises(ValueError, match="not both"):
        Shape(WidgetType, rest_name="W", rest_order=("id",), rest_fields=("id",))


def _stamp(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


@strawberry.type
class StampedType:
    id: strawberry.ID = column(Widget.id, as_type=strawberry.ID)
    created_at: str = column(Widget.created_at, graphql_convert=_stamp)


@strawberry.type
class StampedQuery:
    item: StampedType


STAMPED = Shape(
    StampedType,
    rest_name="StampedResponse",
    rest_only=(("object", None, Rest(annotation=Literal["widget"], value=lambda _row: "widget")),),
    rest_order=("id", "object", "created_at"),
)


def test_a_constant_rest_field_and_a_column_graphql_converts() -> None:
    moment = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    row = SimpleNamespace(id="w1", created_at=moment)
    # REST: the constant in its place, the column as it is (the encoder writes it).
    assert STAMPED.to_public(row) == {"id": "w1", "object": "widget", "created_at": moment}
    schema = STAMPED.rest_model.model_json_schema(mode="serialization")
    assert schema["properties"]["object"]["const"] == "widget"
    assert [column.key for column in STAMPED.columns()] == ["id", "created_at"]
    # GraphQL: the converted value, read by the resolver as the fast paths read it.
    result = strawberry.Schema(query=StampedQuery).execute_sync(
        "{ item { id createdAt } }", root_value=SimpleNamespace(item=row)
    )
    assert result.data == {"item": {"id": "w1", "createdAt": "2026-01-02T03:04:05Z"}}
    with pytest.raises(ValueError, match="needs value"):
        Shape(StampedType, rest_name="N", rest_only=(("object", None, Rest(annotation=str)),))


@strawberry.type
class Counts:
    small: int
    large: int


def _counts_of(row: Any) -> dict[str, int]:
    return {"small": row.first.count("a"), "large": row.last.count("A")}


def _as_counts(counts: dict[str, int]) -> Counts:
    return Counts(**counts)


def _initial(root: strawberry.Parent[Any]) -> str:
    return str(root.first[:1])


@strawberry.type
class TalliedType:
    id: strawberry.ID = column(Widget.id, as_type=strawberry.ID)
    initial: str = computed(_initial, sources=(Widget.first,), rest=Rest())
    counts: Counts = computed(
        _counts_of,
        graphql_convert=_as_counts,
        sources=(Widget.first, Widget.last),
        rest=Rest(annotation=dict[str, int]),
    )


TALLIED = Shape(TalliedType, rest_name="TalliedResponse")


@strawberry.type
class TalliedQuery:
    item: TalliedType


def test_a_computed_field_is_one_function_for_both_surfaces() -> None:
    row = SimpleNamespace(id="w1", first="banana", last="ACAB")
    # REST: the function's value as it is (no `Rest.value` given).
    assert TALLIED.to_public(row) == {
        "id": "w1",
        "initial": "b",
        "counts": {"small": 3, "large": 2},
    }
    # GraphQL: the same function, its value through `graphql_convert` where one is given.
    result = strawberry.Schema(query=TalliedQuery).execute_sync(
        "{ item { initial counts { small large } } }", root_value=SimpleNamespace(item=row)
    )
    assert result.data == {"item": {"initial": "b", "counts": {"small": 3, "large": 2}}}
