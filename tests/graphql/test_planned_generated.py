"""Every root field marked `@plannable`, found in the schema, is planned, and its plans answer
exactly what Strawberry answers with planning switched off (SWITCHBOARD_GRAPHQL_PLANNING), on
either executor (SWITCHBOARD_GRAPHQL_FAST_EXECUTOR on and off, both sides alike).

The cases are generated from each field's arguments (scalars, enums, IDs, with literals and
variables, nulls, values the resolver refuses), aliases, and a credential without the scope;
the selection is every plain sub-field the schema gives the field's type.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from graphql import (
    GraphQLArgument,
    GraphQLEnumType,
    GraphQLField,
    GraphQLList,
    GraphQLNonNull,
    GraphQLObjectType,
    GraphQLOutputType,
    GraphQLScalarType,
    Undefined,
    get_named_type,
    get_nullable_type,
    is_leaf_type,
)
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.graphql.execution import plain_getter
from app.graphql.planned import is_plannable
from app.graphql.schema import build_schema
from tests.calls.conftest import CallLogFactory
from tests.conftest import GRAPHQL, Tenant, TenantFactory

QUERY_TYPE = build_schema()._schema.query_type
assert QUERY_TYPE is not None
PLANNABLE = sorted(name for name, field in QUERY_TYPE.fields.items() if is_plannable(field))
MISSING_ID = "00000000-0000-4000-8000-000000000000"
MAX_SELECTION_DEPTH = 3


def test_the_plannable_fields_are_found_in_the_schema() -> None:
    # Every domain's list and lookup: a field that loses its marker silently loses its plan.
    assert {"contacts", "contact", "tickets", "ticket", "agents", "callLogs"} <= set(PLANNABLE)


def selection(type_: GraphQLOutputType, depth: int = 0) -> str:
    """Every plain sub-field of an object type (nested objects to a bounded depth)."""
    named = get_named_type(type_)
    if is_leaf_type(named):
        return ""
    assert isinstance(named, GraphQLObjectType)
    parts = ["__typename"]
    for name, field in named.fields.items():
        if field.args or plain_getter(field) is None:
            continue
        if is_leaf_type(get_named_type(field.type)):
            parts.append(name)
        elif depth < MAX_SELECTION_DEPTH:
            inner = selection(field.type, depth + 1)
            if inner:
                parts.append(f"{name} {inner}")
    return "{ " + " ".join(parts) + " }"


def samples(argument: GraphQLArgument, known_ids: list[str]) -> list[Any]:
    """Values for one argument: valid ones, refused ones, and null where it is allowed."""
    named = get_named_type(argument.type)
    values: list[Any]
    if isinstance(named, GraphQLEnumType):
        values = list(named.values)
    elif isinstance(named, GraphQLScalarType) and named.name == "ID":
        values = [*known_ids, MISSING_ID, "not-an-id"]
    elif isinstance(named, GraphQLScalarType) and named.name == "Int":
        values = [1, 2, 0, -1, 1000]
    elif isinstance(named, GraphQLScalarType) and named.name == "Boolean":
        values = [True, False]
    else:
        values = ["vip", "/hi", "Ada", "inbound", "completed", "nope", ""]
    if isinstance(get_nullable_type(argument.type), GraphQLList):
        values = [[value] for value in values]
    if not isinstance(argument.type, GraphQLNonNull):
        values.append(None)
    return values


def literal(value: Any, argument: GraphQLArgument) -> str:
    if value is None:
        return "null"
    if isinstance(value, list):
        return "[" + ", ".join(literal(item, argument) for item in value) + "]"
    if isinstance(get_named_type(argument.type), GraphQLEnumType):
        return str(value)
    return json.dumps(value)


@dataclass(frozen=True)
class Case:
    query: str
    variables: dict[str, Any] | None
    credential: str  # "full" or "unscoped"
    must_plan: bool


def required_choices(field: GraphQLField, known_ids: list[str]) -> list[dict[str, str]]:
    """Literals for the required arguments: one choice per known id for a required ID (the
    test keeps the first the field answers without an error), the first sample otherwise."""
    fixed = {}
    id_arguments = []
    for name, argument in field.args.items():
        if not isinstance(argument.type, GraphQLNonNull) or argument.default_value is not Undefined:
            continue
        if get_named_type(argument.type).name == "ID":
            id_arguments.append(name)
        else:
            fixed[name] = literal(samples(argument, known_ids)[0], argument)
    if not id_arguments:
        return [fixed]
    return [{**fixed, **dict.fromkeys(id_arguments, json.dumps(id_))} for id_ in known_ids]


def call(name: str, arguments: dict[str, str], alias: str | None = None) -> str:
    field = QUERY_TYPE.fields[name]  # type: ignore[union-attr]
    args = ", ".join(f"{key}: {value}" for key, value in arguments.items())
    head = f"{alias}: {name}" if alias else name
    return f"{head}{f'({args})' if args else ''} {selection(field.type)}"


def cases(name: str, known_ids: list[str], required: dict[str, str]) -> Iterator[Case]:
    field = QUERY_TYPE.fields[name]  # type: ignore[union-attr]
    # The plain query: answered by the plan, or the field's marker is a lie.
    yield Case(f"{{ {call(name, required)} }}", None, "full", True)
    yield Case(
        f"{{ a: {call(name, required)} b: {call(name, required)} __typename }}",
        None,
        "full",
        True,
    )
    yield Case(f"{{ {call(name, required)} }}", None, "unscoped", False)
    for arg_name, argument in field.args.items():
        values = samples(argument, known_ids)
        for index, value in enumerate(values):
            arguments = {**required, arg_name: literal(value, argument)}
            yield Case(f"{{ {call(name, arguments)} }}", None, "full", False)
            if index < 2 or value is None:
                arguments = {**required, arg_name: "$value"}
                yield Case(
                    f"query Generated($value: {argument.type}) {{ {call(name, arguments)} }}",
                    {"value": value},
                    "full",
                    False,
                )
        if not isinstance(argument.type, GraphQLNonNull):
            # A declared variable that is not sent: the argument's default applies.
            arguments = {**required, arg_name: "$value"}
            yield Case(
                f"query Generated($value: {argument.type}) {{ {call(name, arguments)} }}",
                {},
                "full",
                False,
            )


@dataclass
class World:
    full: Tenant
    unscoped: Tenant
    ids: list[str]


@pytest.fixture
async def world(
    client: httpx.AsyncClient,
    acme: Tenant,
    tenants: TenantFactory,
    sessionmaker: async_sessionmaker[AsyncSession],
    globex: Tenant,
) -> World:
    """One of each kind of object, and another organization's contact (never visible)."""
    calls = CallLogFactory(sessionmaker)

    async def create(path: str, body: dict[str, Any], tenant: Tenant = acme) -> str:
        headers = {**tenant.headers, "organization_id": tenant.organization_id}
        response = await client.post(f"/api/v1/{path}", json=body, headers=headers)
        assert response.status_code in (200, 201), response.text
        return str(response.json()["id"])

    ids = []
    for phone, name, tags in [
        ("+14155550100", "Ada", ["vip"]),
        ("+442071838750", "Grace", []),
        ("+14155550101", "Alan", ["vip", "x"]),
    ]:
        ids.append(
            await create(
                "contacts",
                {"phone_number": phone, "name": name, "tags": tags, "custom_fields": {"n": [1]}},
            )
        )
    ids.append(await create("inbox/tickets", {"contact_id": ids[0]}))
    ids.append(await create("quick-replies", {"shortcut": "/hi", "content": "Hello!"}))
    ids.append(
        await create("webhooks", {"url": "https://93.184.216.34/hooks", "events": ["lead.created"]})
    )
    ids.append(await create("agents", {"name": "Ava"}))
    ids.append(
        await create(
            "channels",
            {
                "display_phone_number": "+1 (415) 555-0142",
                "phone_number_id": "106540352242922",
                "business_account_id": "102290129340398",
                "access_token": "EAAGm0PX4ZCpsBAKZCsecret-upstream-token_123",
            },
        )
    )
    for minutes, direction in [(0, "inbound"), (5, "outbound")]:
        ids.append(str((await calls.record(acme, minutes=minutes, direction=direction))["id"]))
    ids.append(await create("contacts", {"phone_number": "+14155550199", "name": "Other"}, globex))
    unscoped = await tenants.key(acme, ["campaigns:manage"])
    return World(acme, unscoped, ids)


async def _post(client: httpx.AsyncClient, tenant: Tenant, case: Case) -> tuple[int, Any]:
    response = await client.post(
        GRAPHQL, json={"query": case.query, "variables": case.variables}, headers=tenant.headers
    )
    return response.status_code, response.json()


@pytest.mark.parametrize("name", PLANNABLE)
async def test_generated_cases_answer_what_strawberry_answers(
    planning_clients: tuple[httpx.AsyncClient, httpx.AsyncClient],
    world: World,
    plan_answers: list[bool],
    name: str,
) -> None:
    planned_client, unplanned_client = planning_clients
    field = QUERY_TYPE.fields[name]  # type: ignore[union-attr]
    required = None
    for choice in required_choices(field, world.ids):
        probe = Case(f"{{ {call(name, choice)} }}", None, "full", True)
        if "errors" not in (await _post(planned_client, world.full, probe))[1]:
            required = choice
            break
    assert required is not None, f"{name}: no seeded object it answers without an error"
    generated = list(cases(name, world.ids, required))
    answered_by_plan = 0
    for case in generated:
        tenant = world.full if case.credential == "full" else world.unscoped
        plan_answers.clear()
        with_plans = await _post(planned_client, tenant, case)
        planned_here = any(plan_answers)
        answered_by_plan += planned_here
        if case.must_plan:
            assert planned_here, (case, with_plans)
        if case.credential == "unscoped":
            assert not planned_here, case
        plan_answers.clear()
        without_plans = await _post(unplanned_client, tenant, case)
        assert plan_answers == [], "planning is off: no plan may run"
        assert with_plans == without_plans, case
        assert with_plans[0] == 200
    # More than the must-plan cases: arguments, variables and nulls are planned too.
    assert answered_by_plan > 2, (name, answered_by_plan, len(generated))
