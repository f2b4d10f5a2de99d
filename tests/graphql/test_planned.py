"""Compiled plans (app/graphql/planned.py) answer exactly what Strawberry answers.

Every query below is sent twice through /graphql: once with plans on and once with planning
switched off (SWITCHBOARD_GRAPHQL_PLANNING), both on the fast executor and both on graphql-core's
own. The HTTP status and the JSON body must be identical, and the plan must have answered
precisely the queries it is meant to (the rest fall back to Strawberry). The other tests here
are about plans, so they run with planning on whatever the environment says.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from graphql import parse
from strawberry.extensions import SchemaExtension

from app.core.clock import isoformat
from app.core.jsonutil import dumps
from app.graphql.permissions import HasScope
from app.graphql.planned import compile_plan, extensions_allow_plans
from app.graphql.schema import SwitchboardSchema, build_schema
from tests.conftest import GRAPHQL, Tenant, TenantFactory, graphql

FIELDS = "id organizationId phoneNumber name tags notes customFields createdAt updatedAt"
CREATE = """mutation($input: ContactCreateInput!) {
  createContact(input: $input) { contact { id } errors { code } }
}"""
MISSING_ID = "00000000-0000-4000-8000-000000000000"

# (query, variables, answered by the plan?)
CASES: list[tuple[str, dict[str, Any] | None, bool]] = [
    (f"{{ contacts(first: 20) {{ nodes {{ {FIELDS} }} totalCount }} }}", None, True),
    (
        "query Page($n: Int, $after: String) { contacts(first: $n, after: $after) {"
        " pageInfo { hasNextPage hasPreviousPage startCursor endCursor }"
        " nodes { __typename key: id name } } __typename }",
        {"n": 2},
        True,
    ),
    (
        'fragment C on Contact { id tags } query { contacts(tag: "vip") {'
        " nodes { ...C ... on Contact { phoneNumber } } } }",
        None,
        True,
    ),
    (
        '{ a: contacts(first: 1) { totalCount } b: contacts(search: "Gr") { totalCount } }',
        None,
        True,
    ),
    (f'{{ contact(id: "{MISSING_ID}") {{ id }} }}', None, True),  # null: no such contact
    ("query One($id: ID!) { contact(id: $id) { name customFields } }", {"id": "KNOWN"}, True),
    ("{ contacts { edges { cursor node { id } } } }", None, False),  # a resolver field
    ("{ contacts(first: 0) { totalCount } }", None, False),  # the resolver raises
    ('{ contacts(after: "nope") { totalCount } }', None, False),
    ("query($n: Int) { contacts(first: $n) { totalCount } }", {"n": "x"}, False),
    ("{ contacts @include(if: true) { totalCount } }", None, False),  # a directive
    ("{ contacts { nodes { id } } viewer { livemode } }", None, False),  # not plannable root
    ("{ contacts { totalCount nodes { nope } } }", None, False),  # invalid
    ("{ contacts { totalCount", None, False),  # syntax error
]


@pytest.fixture
async def seeded(client: httpx.AsyncClient, acme: Tenant) -> str:
    first_id = ""
    for phone, name, tags in [
        ("+14155550100", "Ada", ["vip"]),
        ("+442071838750", "Grace", []),
        ("+14155550101", "Alan", ["vip", "x"]),
    ]:
        body = await graphql(
            client,
            CREATE,
            {
                "input": {
                    "phoneNumber": phone,
                    "name": name,
                    "tags": tags,
                    "customFields": {"n": {"deep": [1, 2]}},
                }
            },
            acme.headers,
        )
        first_id = first_id or body["data"]["createContact"]["contact"]["id"]
    return first_id


async def _post(
    client: httpx.AsyncClient, tenant: Tenant, query: str, variables: dict[str, Any] | None
) -> tuple[int, Any]:
    response = await client.post(
        GRAPHQL, json={"query": query, "variables": variables}, headers=tenant.headers
    )
    return response.status_code, response.json()


@pytest.mark.parametrize(("query", "variables", "planned_path"), CASES)
async def test_plans_answer_what_strawberry_answers(
    planning_clients: tuple[httpx.AsyncClient, httpx.AsyncClient],
    acme: Tenant,
    seeded: str,
    plan_answers: list[bool],
    query: str,
    variables: dict[str, Any] | None,
    planned_path: bool,
) -> None:
    planned_client, unplanned_client = planning_clients
    if variables and variables.get("id") == "KNOWN":
        variables = {"id": seeded}
    answered = plan_answers
    with_plans = await _post(planned_client, acme, query, variables)
    assert any(answered) is planned_path, with_plans

    answered.clear()
    without_plans = await _post(unplanned_client, acme, query, variables)
    assert answered == []
    assert with_plans == without_plans


async def test_a_plan_still_checks_scopes_and_tenants(
    planning_clients: tuple[httpx.AsyncClient, httpx.AsyncClient],
    acme: Tenant,
    seeded: str,
    tenants: TenantFactory,
) -> None:
    client, _ = planning_clients
    query = "query One($id: ID!) { contact(id: $id) { id } }"
    reader = await tenants.key(acme, ["calls:read"])
    status, body = await _post(client, reader, query, {"id": seeded})
    assert status == 200
    assert body["data"] == {"contact": None}
    assert body["errors"][0]["extensions"]["code"] == "insufficient_scope"
    globex = await tenants.organization("Globex")
    status, body = await _post(client, globex, query, {"id": seeded})
    assert body == {"data": {"contact": None}}
    _, listed = await _post(client, globex, "{ contacts { totalCount } }", None)
    assert listed == {"data": {"contacts": {"totalCount": 0}}}


async def test_without_credentials_the_general_path_answers(
    client: httpx.AsyncClient, seeded: str
) -> None:
    response = await client.post(GRAPHQL, json={"query": "{ contacts { totalCount } }"})
    assert response.status_code == 200
    assert response.json()["errors"][0]["extensions"]["code"] == "unauthenticated"


@pytest.mark.parametrize(
    "moment",
    [
        datetime(2026, 1, 1, tzinfo=UTC),
        datetime(2026, 1, 1, 0, 0, 0, 5, tzinfo=UTC),
        datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    ],
)
def test_the_encoder_writes_utc_datetimes_as_the_scalar_does(moment: datetime) -> None:
    # Plans leave UTC datetimes to the response encoder instead of the DateTime scalar.
    assert dumps(moment) == f'"{isoformat(moment)}"'.encode()


async def test_a_plan_calls_the_fields_permission_class(
    planning_clients: tuple[httpx.AsyncClient, httpx.AsyncClient],
    acme: Tenant,
    seeded: str,
    tenants: TenantFactory,
    monkeypatch: pytest.MonkeyPatch,
    plan_answers: list[bool],
) -> None:
    planned_client, _ = planning_clients
    checked: list[tuple[str, dict[str, Any]]] = []
    original = HasScope.has_permission

    def spy(self: HasScope, source: Any, info: Any, **kwargs: Any) -> bool:
        checked.append((self.scope.value, kwargs))
        return original(self, source, info, **kwargs)

    monkeypatch.setattr(HasScope, "has_permission", spy)
    answered = plan_answers
    query = "query($s: TicketStatus) { tickets(status: $s, first: 5) { totalCount } }"
    status, body = await _post(planned_client, acme, query, {"s": "OPEN"})
    assert (status, body) == (200, {"data": {"tickets": {"totalCount": 0}}})
    assert answered == [True]
    # Called with the resolver's converted arguments, as Strawberry calls it.
    ((scope, kwargs),) = checked
    assert scope == "full_access"
    assert kwargs["first"] == 5
    assert kwargs["status"].name == "OPEN"


def test_no_plan_while_the_schema_has_an_extension_plans_would_skip() -> None:
    class Audit(SchemaExtension):
        """Stands for any extension that must see every operation."""

    schema = build_schema()
    document = parse("{ contacts { totalCount } }")
    assert compile_plan(schema, document, None) is not None
    audited = SwitchboardSchema(
        query=schema.query,  # type: ignore[arg-type]
        extensions=[*schema.extensions, Audit],
    )
    assert not extensions_allow_plans(audited)
    assert compile_plan(audited, document, None) is None


@pytest.mark.parametrize(
    "query",
    [
        # A shape's computed fields (app/kit/shape.py) are read as plain fields: a ticket's
        # contact brief, from the joined contact's columns, and a contact's opt-out.
        "{ tickets(first: 5) { nodes { id status livemode contact {"
        " __typename id name phoneNumber tags notes customFields } } } }",
        "{ contacts(first: 5) { nodes { id marketingOptOut { at source } } } }",
    ],
)
async def test_computed_fields_keep_the_plan(
    planning_clients: tuple[httpx.AsyncClient, httpx.AsyncClient],
    acme: Tenant,
    seeded: str,
    plan_answers: list[bool],
    query: str,
) -> None:
    planned_client, unplanned_client = planning_clients
    created = await _post(
        planned_client,
        acme,
        "mutation($id: ID!) { createTicket(input: {contactId: $id}) { ticket { id } } }",
        {"id": seeded},
    )
    assert created[1]["data"]["createTicket"]["ticket"]["id"], created
    answered = plan_answers
    answered.clear()  # the ticket's creation above is not a planned read
    with_plans = await _post(planned_client, acme, query, None)
    assert answered == [True], with_plans
    assert "errors" not in with_plans[1]
    assert with_plans == await _post(unplanned_client, acme, query, None)
