"""FastExecutionContext must give exactly graphql-core's results, only faster.

A standalone schema with plain and non-plain fields runs every query twice: with the fast
executor and with Strawberry's default one; data and errors (message, path, locations)
must be identical. Counting `execute_field` calls shows the fast path was really taken.
"""

from __future__ import annotations

import asyncio
import operator
from collections.abc import AsyncIterator, Callable, Generator
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Any, NewType

import httpx
import pytest
import strawberry
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strawberry.directive import DirectiveLocation, DirectiveValue
from strawberry.extensions import FieldExtension, SchemaExtension
from strawberry.permission import BasePermission
from strawberry.scalars import JSON
from strawberry.schema.config import StrawberryConfig
from strawberry.schema.schema import StrawberryGraphQLCoreExecutionContext
from strawberry.types import ExecutionResult, Info

from app.graphql.execution import FastExecutionContext
from app.graphql.schema import DATETIME_UTC, build_schema
from app.resources import Resources
from tests.conftest import Tenant, client_with, graphql

EPOCH = datetime(2026, 1, 31, 9, 30, tzinfo=UTC)


# Serializes "" to None: graphql-core turns that into an error, never into a null.
Code = NewType("Code", str)
CODE = strawberry.scalar(name="Code", serialize=lambda value: value or None, parse_value=str)


@strawberry.enum
class Color(Enum):
    RED = "red"
    GREEN = "green"


class Upper(FieldExtension):
    """Changes the value: if the field were treated as plain, the result would differ."""

    def resolve(self, next_: Callable[..., Any], source: Any, info: Info, **kwargs: Any) -> Any:
        return str(next_(source, info, **kwargs)).upper()


class Deny(BasePermission):
    message = "denied"

    def has_permission(self, source: Any, info: Info, **kwargs: Any) -> bool:
        return False


@strawberry.type
class Item:
    id: strawberry.ID
    name: str
    nickname: str | None
    color: Color
    tags: list[str]
    scores: list[int | None] | None
    extra: JSON | None
    created_at: datetime
    code: Code | None
    shout: str = strawberry.field(extensions=[Upper()])
    secret: str | None = strawberry.field(permission_classes=[Deny])

    @strawberry.field
    def computed(self) -> str:
        return f"{self.name}!"

    @strawberry.field
    def greet(self, who: str = "you") -> str:
        return f"hi {who}"


class Later:
    """A reusable awaitable: graphql-core awaits it, the fast path must not serialize it."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __await__(self) -> Generator[Any, None, Any]:
        if False:  # pragma: no cover - makes this a generator
            yield
        return self.value


class Row:
    """A plain source object, like an ORM entity."""

    def __init__(self, index: int, **overrides: Any) -> None:
        self.id: Any = f"it_{index}"
        self.name: Any = f"Item {index}"
        self.nickname: Any = None if index % 2 else f"nick{index}"
        self.color: Any = Color.RED if index % 2 else Color.GREEN
        self.tags: Any = ["a", "b"] if index % 3 else []
        self.scores: Any = [index, None] if index % 2 else None
        self.extra: Any = {"n": index, "list": [1, "x"]} if index % 4 else None
        self.created_at: Any = EPOCH + timedelta(minutes=index)
        self.code: Any = f"c{index}"
        self.shout: Any = f"shout {index}"
        self.secret: Any = "s"
        for name, value in overrides.items():
            setattr(self, name, value)


# Broken values: each must give graphql-core's own error (or value), with its path.
BROKEN: dict[str, dict[str, Any]] = {
    "null_name": {"name": None},
    "null_tag": {"tags": ["a", None]},
    "bad_color": {"color": "purple"},
    "bad_date": {"created_at": "yesterday"},
    "int_name": {"name": 7},
    "tuple_tags": {"tags": ("x", "y")},
    "generator_tags": {"tags": None},  # replaced per use: generators are single-use
    "string_tags": {"tags": "abc"},
    "exception_nickname": {"nickname": ValueError("boom")},
    "missing_extra": {},
    "float_id": {"id": 1.5},
    "empty_code": {"code": ""},
    # A generator read by a failed fast attempt would be exhausted for graphql-core.
    "generator_null_tag": {"tags": None},
}


def broken_row(index: int, kind: str) -> Row:
    row = Row(index, **BROKEN[kind])
    if kind == "generator_tags":
        row.tags = (tag for tag in ["g1", "g2"])
    if kind == "generator_null_tag":
        row.tags = (tag for tag in ["g1", None])
    if kind == "missing_extra":
        del row.extra
    return row


@strawberry.type
class Query:
    rows: strawberry.Private[list[Row]]

    @strawberry.field
    def items(self) -> list[Item | None]:
        return self.rows  # type: ignore[return-value]

    @strawberry.field
    def strict_items(self) -> list[Item]:
        return self.rows  # type: ignore[return-value]

    @strawberry.field
    async def async_items(self) -> list[Item | None]:
        await asyncio.sleep(0)
        return self.rows  # type: ignore[return-value]


@strawberry.type
class Mutation:
    @strawberry.mutation
    def touch(self) -> Item:
        return Row(1)  # type: ignore[return-value]


def make_schema(
    execution_context_class: type[Any], config: StrawberryConfig | None = None
) -> strawberry.Schema:
    config = config or StrawberryConfig()
    config.scalar_map = {datetime: DATETIME_UTC, Code: CODE}
    return strawberry.Schema(
        query=Query,
        mutation=Mutation,
        config=config,
        execution_context_class=execution_context_class,
    )


class CountingFast(FastExecutionContext):
    calls = 0

    def execute_field(self, *args: Any, **kwargs: Any) -> Any:
        type(self).calls += 1
        return super().execute_field(*args, **kwargs)


class CountingDefault(StrawberryGraphQLCoreExecutionContext):
    calls = 0

    def execute_field(self, *args: Any, **kwargs: Any) -> Any:
        type(self).calls += 1
        return super().execute_field(*args, **kwargs)


FAST = make_schema(CountingFast)
DEFAULT = make_schema(CountingDefault)


def outcome(result: ExecutionResult) -> tuple[Any, list[dict[str, Any]]]:
    errors = [
        {**error.formatted, "original": type(error.original_error).__name__}
        for error in result.errors or []
    ]
    return result.data, errors


def run_sync(query: str, rows: list[Row], variables: dict[str, Any] | None = None) -> Any:
    root = Query(rows=rows)
    fast = FAST.execute_sync(query, variables, root_value=root)
    default = DEFAULT.execute_sync(query, variables, root_value=root)
    assert outcome(fast) == outcome(default)
    return outcome(fast)


async def run_async(query: str, rows: list[Row], variables: dict[str, Any] | None = None) -> Any:
    root = Query(rows=rows)
    fast = await FAST.execute(query, variables, root_value=root)
    default = await DEFAULT.execute(query, variables, root_value=root)
    assert outcome(fast) == outcome(default)
    return outcome(fast)


PLAIN = "id name nickname color tags scores extra createdAt code __typename"


@pytest.fixture(autouse=True)
def reset_counters() -> None:
    CountingFast.calls = CountingDefault.calls = 0


def test_plain_objects_skip_field_execution() -> None:
    rows = [Row(i) for i in range(20)]
    data, errors = run_sync(f"{{ items {{ {PLAIN} }} }}", rows)
    assert errors == []
    assert data["items"][1] == {
        "id": "it_1",
        "name": "Item 1",
        "nickname": None,
        "color": "RED",
        "tags": ["a", "b"],
        "scores": [1, None],
        "extra": {"n": 1, "list": [1, "x"]},
        "createdAt": "2026-01-31T09:31:00Z",
        "code": "c1",
        "__typename": "Item",
    }
    # Only the root field ran through execute_field; graphql-core ran all 20 x 10 as well.
    assert CountingFast.calls == 1
    assert CountingDefault.calls == 1 + 20 * 10


@pytest.mark.parametrize("field", ["shout", "secret", "computed", "greet", 'greet(who: "x")'])
def test_non_plain_fields_keep_resolvers(field: str) -> None:
    rows = [Row(i) for i in range(3)]
    data, errors = run_sync(f"{{ items {{ id {field} }} }}", rows)
    assert CountingFast.calls == CountingDefault.calls == 1 + 3 * 2
    if field == "shout":
        assert data["items"][0]["shout"] == "SHOUT 0"
    if field == "secret":
        assert {error["message"] for error in errors} == {"denied"}


@pytest.mark.parametrize("kind", sorted(BROKEN))
@pytest.mark.parametrize("root", ["items", "strictItems"])
def test_broken_values_give_graphql_core_errors(kind: str, root: str) -> None:
    rows = [Row(0), broken_row(1, kind), Row(2)]
    query = f"{{ {root} {{ {PLAIN} }} }}"
    root_value = Query(rows=rows)
    fast = outcome(FAST.execute_sync(query, root_value=root_value))
    rows[1] = broken_row(1, kind)  # fresh generator for the second run
    default = outcome(DEFAULT.execute_sync(query, root_value=Query(rows=rows)))
    assert fast == default


def test_null_for_non_null_field_has_the_normal_path() -> None:
    _data, errors = run_sync("{ items { id name } }", [Row(0), Row(1, name=None)])
    assert [(error["message"], error["path"]) for error in errors] == [
        ("Cannot return null for non-nullable field Item.name.", ["items", 1, "name"])
    ]


async def test_async_execution_and_awaitable_values() -> None:
    rows = [Row(0), Row(1, nickname=Later("later")), Row(2, tags=Later(["t"])), Row(3)]
    data, errors = await run_async(f"{{ asyncItems {{ {PLAIN} }} items {{ id }} }}", rows)
    assert errors == []
    assert data["asyncItems"][1]["nickname"] == "later"
    assert data["asyncItems"][2]["tags"] == ["t"]


def test_mutations_are_unchanged() -> None:
    data, errors = run_sync(f"mutation {{ touch {{ {PLAIN} }} again: touch {{ id }} }}", [])
    assert errors == []
    assert data["touch"]["id"] == "it_1"


def test_skip_include_fragments_and_aliases() -> None:
    query = """
    query ($yes: Boolean!, $no: Boolean!) {
      items {
        ...Basic
        ... on Item { alias: name color }
        dup: id
        dup: id
        tags @include(if: $yes)
        extra @include(if: $no)
        nickname @skip(if: $yes)
        createdAt @skip(if: $no)
        t: __typename
      }
    }
    fragment Basic on Item { id name @include(if: $no) }
    """
    rows = [Row(i) for i in range(4)]
    for yes, no in [(True, False), (False, True), (True, True), (False, False)]:
        data, errors = run_sync(query, rows, {"yes": yes, "no": no})
        assert errors == []
        assert ("tags" in data["items"][0]) is yes
        assert ("nickname" in data["items"][0]) is not yes
        assert ("name" in data["items"][0]) is no
    assert CountingFast.calls == 4


@strawberry.directive(locations=[DirectiveLocation.FIELD])
def shouting(value: DirectiveValue[str]) -> str:
    return value.upper()


class ShoutStrings(SchemaExtension):
    """A resolver middleware: it must see every field, plain or not."""

    def resolve(
        self, _next: Callable[..., Any], root: Any, info: Any, *args: Any, **kwargs: Any
    ) -> Any:
        result = _next(root, info, *args, **kwargs)
        return result.upper() if isinstance(result, str) else result


@pytest.mark.parametrize(
    ("query", "directives", "extensions"),
    [
        # Strawberry runs operation directives as middleware too.
        ("{ items { id name @shouting } }", [shouting], []),
        ("{ items { id name } }", [], [ShoutStrings]),
    ],
)
def test_middleware_disables_the_fast_path(
    query: str, directives: list[Any], extensions: list[Any]
) -> None:
    fast, default = (
        strawberry.Schema(
            query=Query,
            directives=directives,
            extensions=extensions,
            config=StrawberryConfig(scalar_map={Code: CODE}),
            execution_context_class=cls,
        )
        for cls in (CountingFast, CountingDefault)
    )
    root = Query(rows=[Row(0), Row(1)])
    result = fast.execute_sync(query, root_value=root)
    assert outcome(result) == outcome(default.execute_sync(query, root_value=root))
    assert result.data is not None
    assert [item["name"] for item in result.data["items"]] == ["ITEM 0", "ITEM 1"]
    assert CountingFast.calls == CountingDefault.calls == 1 + 2 * 2


def test_custom_default_resolver_is_mirrored() -> None:
    fast, default = (
        make_schema(cls, StrawberryConfig(default_resolver=operator.getitem))
        for cls in (CountingFast, CountingDefault)
    )
    good = {"id": "d1", "name": "Dict", "tags": ["x"], "color": Color.GREEN}
    query = "{ items { id name tags color __typename } }"
    for rows in ([good, good], [good, {"id": "d2", "tags": []}]):  # the second lacks keys
        root = Query(rows=rows)  # type: ignore[arg-type]
        result = fast.execute_sync(query, root_value=root)
        assert outcome(result) == outcome(default.execute_sync(query, root_value=root))
    assert result.data == {"items": [{**good, "color": "GREEN", "__typename": "Item"}, None]}
    assert CountingFast.calls < CountingDefault.calls


@strawberry.interface
class Named:
    name: str


@strawberry.type
class Person(Named):
    age: int


@strawberry.type
class Pet(Named):
    owner: str | None


@strawberry.type
class NamedQuery:
    values: strawberry.Private[list[Any]]

    @strawberry.field
    def named(self) -> list[Named | None]:
        return self.values


def test_abstract_types_and_is_type_of_are_unchanged() -> None:
    fast, default = (
        strawberry.Schema(query=NamedQuery, types=[Person, Pet], execution_context_class=cls)
        for cls in (CountingFast, CountingDefault)
    )
    query = "{ named { __typename name ... on Person { age } ... on Pet { owner } } }"
    people = [Person(name="Ada", age=36), Pet(name="Rex", owner=None), Person(name="Al", age=1)]
    # A Row is no Named: resolving its type fails the normal way.
    for values in (people, [*people, Row(0)]):
        root = NamedQuery(values=values)
        result = fast.execute_sync(query, root_value=root)
        assert outcome(result) == outcome(default.execute_sync(query, root_value=root))
    assert result.data is not None
    assert result.data["named"][:2] == [
        {"__typename": "Person", "name": "Ada", "age": 36},
        {"__typename": "Pet", "name": "Rex", "owner": None},
    ]
    assert result.data["named"][3] is None
    assert CountingFast.calls == 2


async def incremental(schema: strawberry.Schema, query: str) -> list[Any]:
    result: Any = await schema.execute(query, root_value=Query(rows=[Row(0), Row(1)]))
    payloads = [result.initial_result.formatted]
    payloads.extend([payload.formatted async for payload in result.subsequent_results])
    return payloads


async def test_stream_and_defer_are_unchanged() -> None:
    fast, default = (
        make_schema(cls, StrawberryConfig(enable_experimental_incremental_execution=True))
        for cls in (CountingFast, CountingDefault)
    )
    for query in (
        "{ items { id tags @stream(initialCount: 1) } }",
        '{ items { id ... @defer(label: "later") { name tags } } }',
    ):
        fast_payloads = await incremental(fast, query)
        assert fast_payloads == await incremental(default, query)
        assert len(fast_payloads) > 1, query


# Property: any mix of selections, aliases, fragments and directives over any rows.
SELECTIONS = [
    "id",
    "name",
    "nickname",
    "color",
    "tags",
    "scores",
    "extra",
    "createdAt",
    "code",
    "__typename",
    "shout",
    "computed",
    'greet(who: "z")',
]


@st.composite
def selection(draw: st.DrawFn) -> str:
    field = draw(st.sampled_from(SELECTIONS))
    index = draw(st.integers(0, 99))
    if draw(st.booleans()):
        # The alias names the field, so equal aliases never select different fields.
        field = f"{field.split('(')[0].strip('_')}{index}: {field}"
    directive = draw(st.sampled_from(["", "@include(if: $flag)", "@skip(if: $flag)"]))
    text = f"{field} {directive}"
    wrapper = draw(st.sampled_from(["plain", "inline", "inline_directive"]))
    if wrapper == "inline":
        return f"... on Item {{ {text} }}"
    if wrapper == "inline_directive":
        return f"... @include(if: $flag) {{ {text} }}"
    return text


@st.composite
def rows(draw: st.DrawFn) -> list[tuple[int, str | None]]:
    kinds = st.one_of(st.none(), st.sampled_from(sorted(BROKEN)))
    return draw(st.lists(st.tuples(st.integers(0, 9), kinds), max_size=5))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    selections=st.lists(selection(), min_size=1, max_size=8),
    fragment=st.lists(selection(), max_size=3),
    specs=rows(),
    flag=st.booleans(),
    root=st.sampled_from(["items", "strictItems"]),
)
def test_equivalence_property(
    selections: list[str],
    fragment: list[str],
    specs: list[tuple[int, str | None]],
    flag: bool,
    root: str,
) -> None:
    spread = "...F" if fragment else ""
    # The root __typename keeps $flag used whatever was drawn.
    query = (
        f"query ($flag: Boolean!) {{ t: __typename @skip(if: $flag) "
        f"{root} {{ {' '.join(selections)} {spread} }} }}"
    )
    if fragment:
        query += f" fragment F on Item {{ {' '.join(fragment)} }}"

    def build() -> list[Row]:
        return [Row(i) if kind is None else broken_row(i, kind) for i, kind in specs]

    variables = {"flag": flag}
    fast = FAST.execute_sync(query, variables, root_value=Query(rows=build()))
    default = DEFAULT.execute_sync(query, variables, root_value=Query(rows=build()))
    # Every error is a field error: the generated query itself is valid.
    assert all(error.path for error in fast.errors or [])
    assert outcome(fast) == outcome(default)


# End to end through /graphql: the project's schema, fast vs default executor.
CONTACT_FIELDS = "id organizationId phoneNumber name tags notes customFields createdAt updatedAt"
LIST_ALL = f"""
query ($first: Int) {{
  contacts(first: $first) {{
    totalCount
    nodes {{ {CONTACT_FIELDS} __typename }}
    edges {{ cursor node {{ key: id phone: phoneNumber tags }} }}
  }}
}}"""
CREATE = """
mutation($input: ContactCreateInput!) {
  createContact(input: $input) { contact { id } errors { code } }
}"""


@pytest.fixture
async def executor_clients(
    resources: Resources,
) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    """The app with SWITCHBOARD_GRAPHQL_FAST_EXECUTOR on, and with it off."""
    on = client_with(resources, graphql_fast_executor=True)
    off = client_with(resources, graphql_fast_executor=False)
    async with on, off:
        yield on, off


async def test_contacts_list_matches_default_executor(
    executor_clients: tuple[httpx.AsyncClient, httpx.AsyncClient],
    acme: Tenant,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The fast executor on and off (the setting) answer alike; off, every field runs."""
    client, switched_off = executor_clients
    inputs: list[dict[str, Any]] = [
        {"phoneNumber": "+14155550100", "name": "Ada", "tags": ["vip", "lead"]},
        {"phoneNumber": "+442071838750", "name": "Grace", "notes": "call after 5"},
        {"phoneNumber": "+14155550101", "name": "Alan", "customFields": {"tier": 2, "x": [1]}},
    ]
    for variables in inputs:
        body = await graphql(client, CREATE, {"input": variables}, acme.headers)
        assert body["data"]["createContact"]["errors"] == []

    schema = build_schema()
    assert schema.execution_context_class is FastExecutionContext
    calls = {"fields": 0}
    original = StrawberryGraphQLCoreExecutionContext.execute_field

    def counting(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls["fields"] += 1
        return original(self, *args, **kwargs)

    monkeypatch.setattr(StrawberryGraphQLCoreExecutionContext, "execute_field", counting)
    fast = await graphql(client, LIST_ALL, {"first": 20}, acme.headers)
    fast_calls, calls["fields"] = calls["fields"], 0

    default = await graphql(switched_off, LIST_ALL, {"first": 20}, acme.headers)

    assert "errors" not in fast
    assert fast == default
    nodes = fast["data"]["contacts"]["nodes"]
    assert {node["name"] for node in nodes} == {"Ada", "Grace", "Alan"}
    assert all(node["createdAt"].endswith("Z") for node in nodes)
    # contacts, totalCount, nodes, edges, and cursor + node per edge; no Contact leaf fields.
    assert fast_calls == 4 + 3 * 2
    assert calls["fields"] == fast_calls + 3 * 10 + 3 * 3
