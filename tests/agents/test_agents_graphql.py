"""Agents over GraphQL: the same service operations as REST, typed errors, isolation, paging
and the same scopes."""

from __future__ import annotations

import uuid
from typing import Any

import httpx

from tests.conftest import Tenant, TenantFactory, graphql

FIELDS = """id organizationId name agentType timezone status isActive description
  configuration { language voice model temperature } tasks createdAt updatedAt"""
CREATE = f"""
mutation($input: AgentCreateInput!) {{
  createAgent(input: $input) {{ agent {{ {FIELDS} }} errors {{ code message field }} }}
}}"""
UPDATE = f"""
mutation($id: ID!, $input: AgentUpdateInput!) {{
  updateAgent(id: $id, input: $input) {{ agent {{ {FIELDS} }} errors {{ code message field }} }}
}}"""
DELETE = "mutation($id: ID!) { deleteAgent(id: $id) { deletedId errors { code message field } } }"
GET = f"query($id: ID!) {{ agent(id: $id) {{ {FIELDS} }} }}"
LIST = """
query($first: Int, $after: String, $last: Int, $before: String) {
  agents(first: $first, after: $after, last: $last, before: $before) {
    totalCount
    nodes { id name }
    edges { cursor node { id } }
    pageInfo { hasNextPage hasPreviousPage startCursor endCursor }
  }
}"""
CONFIG: dict[str, Any] = {
    "systemPrompt": "You are Ava.",
    "language": "fr-FR",
    "llmProvider": "groq",
    "temperature": 0.3,
    "voiceSettings": {"voiceId": "v-42", "name": "Ava", "provider": "cartesia"},
    "bookingConfig": {"bookingEnabled": True},
    "customTools": [
        {
            "name": "lookup",
            "description": "Look an order up",
            "url": "https://93.184.216.34/lookup",
            "method": "GET",
            "parameters": {"type": "object", "properties": {"id": {"type": "string"}}},
        }
    ],
    "mcpTools": [{"name": "crm", "url": "https://93.184.216.35", "allowedTools": ["find"]}],
}


async def create(client: httpx.AsyncClient, tenant: Tenant, **fields: Any) -> dict[str, Any]:
    body = await graphql(client, CREATE, {"input": {"name": "Ava", **fields}}, tenant.headers)
    payload = body["data"]["createAgent"]
    assert payload["errors"] == [], payload
    return payload["agent"]  # type: ignore[no-any-return]


async def test_crud(client: httpx.AsyncClient, acme: Tenant) -> None:
    agent = await create(client, acme, timezone="Europe/Paris", agentConfig=CONFIG)
    assert agent["organizationId"] == acme.organization_id
    assert agent["agentType"] == "prompt"
    assert agent["timezone"] == "Europe/Paris"
    assert (agent["status"], agent["isActive"]) == ("active", "active")
    assert agent["description"] == "You are Ava."
    assert agent["configuration"] == {
        "language": "fr-FR",
        "voice": "v-42",
        "model": "llama-3.3-70b-versatile",
        "temperature": 0.3,
    }
    assert agent["tasks"] == ["book_appointment", "lookup", "crm.find"]
    assert agent["createdAt"].endswith("Z")

    fetched = await graphql(client, GET, {"id": agent["id"]}, acme.headers)
    assert fetched["data"]["agent"] == agent

    # REST sees the same agent, in its get-agent shape.
    rest = (await client.get(f"/api/v1/agents/{agent['id']}", headers=acme.headers)).json()
    assert rest["configuration"] == agent["configuration"]
    assert rest["tasks"] == agent["tasks"]

    updated = await graphql(
        client,
        UPDATE,
        {"id": agent["id"], "input": {"isActive": "inactive", "agentConfig": {"language": "de"}}},
        acme.headers,
    )
    payload = updated["data"]["updateAgent"]
    assert payload["errors"] == []
    assert payload["agent"]["status"] == "inactive"
    assert payload["agent"]["isActive"] == "inactive"
    # The new configuration replaced the old one whole.
    assert payload["agent"]["configuration"]["voice"] is None
    assert payload["agent"]["configuration"]["language"] == "de"
    assert payload["agent"]["tasks"] == []
    assert payload["agent"]["description"] is None
    assert payload["agent"]["timezone"] == "Europe/Paris"

    # Any form of the UUID names the agent; deletedId is the canonical one.
    deleted = await graphql(client, DELETE, {"id": agent["id"].upper()}, acme.headers)
    assert deleted["data"]["deleteAgent"] == {"deletedId": agent["id"], "errors": []}
    gone = await graphql(client, GET, {"id": agent["id"]}, acme.headers)
    assert gone["data"]["agent"] is None
    again = await graphql(client, DELETE, {"id": agent["id"]}, acme.headers)
    assert again["data"]["deleteAgent"]["errors"] == [
        {"code": "not_found", "message": "Agent not found", "field": None}
    ]


async def test_typed_errors(client: httpx.AsyncClient, acme: Tenant) -> None:
    async def create_errors(input_: dict[str, Any]) -> list[dict[str, Any]]:
        body = await graphql(client, CREATE, {"input": input_}, acme.headers)
        assert body["data"]["createAgent"]["agent"] is None
        return body["data"]["createAgent"]["errors"]  # type: ignore[no-any-return]

    [error] = await create_errors({"name": " "})
    assert (error["field"], error["code"]) == ("name", "string_blank")
    [error] = await create_errors({"name": "A", "agentConfig": {"temperature": 1.5}})
    assert (error["field"], error["code"]) == ("agentConfig.temperature", "less_than_equal")
    [error] = await create_errors({"name": "A", "timezone": "Mars/Base"})
    assert error["field"] == "timezone"
    assert "unknown timezone" in error["message"]
    [error] = await create_errors(
        {
            "name": "A",
            "agentConfig": {"voiceSettings": {"voiceId": "v", "name": "n", "provider": "x"}},
        }
    )
    assert error["field"] == "agentConfig.voiceSettings.provider"
    [error] = await create_errors(
        {
            "name": "A",
            "agentConfig": {"customTools": [{"name": "t", "description": "d", "url": "x"}]},
        }
    )
    assert error["field"] == "agentConfig.customTools.0.url"
    [error] = await create_errors(
        {
            "name": "A",
            "agentConfig": {
                "mcpTools": [{"name": "m", "url": "https://m.example", "transport": "ws"}]
            },
        }
    )
    assert error["field"] == "agentConfig.mcpTools.0.transport"

    # Required nested fields are required by the GraphQL schema itself.
    body = await graphql(
        client,
        CREATE,
        {"input": {"name": "A", "agentConfig": {"voiceSettings": {"name": "n"}}}},
        acme.headers,
    )
    assert body["data"] is None
    assert "voiceId" in body["errors"][0]["message"]

    agent = await create(client, acme)
    null_name = await graphql(
        client, UPDATE, {"id": agent["id"], "input": {"name": None}}, acme.headers
    )
    [error] = null_name["data"]["updateAgent"]["errors"]
    assert (error["field"], error["code"]) == ("name", "value_error")
    bad_flag = await graphql(
        client, UPDATE, {"id": agent["id"], "input": {"isActive": "training"}}, acme.headers
    )
    assert bad_flag["data"]["updateAgent"]["errors"][0]["field"] == "isActive"


async def test_invalid_id_form(client: httpx.AsyncClient, acme: Tenant) -> None:
    body = await graphql(client, GET, {"id": "nope"}, acme.headers)
    assert body["data"] == {"agent": None}
    assert body["errors"][0]["message"] == "Invalid or missing agent_id"
    assert body["errors"][0]["extensions"] == {"code": "invalid_input", "field": "id"}
    expected = [{"code": "invalid_input", "message": "Invalid or missing agent_id", "field": "id"}]
    update = await graphql(client, UPDATE, {"id": "nope", "input": {"name": "x"}}, acme.headers)
    assert update["data"]["updateAgent"] == {"agent": None, "errors": expected}
    delete = await graphql(client, DELETE, {"id": "123"}, acme.headers)
    assert delete["data"]["deleteAgent"] == {"deletedId": None, "errors": expected}
    unknown = await graphql(client, GET, {"id": str(uuid.uuid4())}, acme.headers)
    assert unknown == {"data": {"agent": None}}


async def test_isolation(client: httpx.AsyncClient, acme: Tenant, globex: Tenant) -> None:
    theirs = await create(client, globex, name="Secret", agentConfig=CONFIG)
    mine = await create(client, acme)
    assert (await graphql(client, GET, {"id": theirs["id"]}, acme.headers))["data"] == {
        "agent": None
    }
    update = await graphql(
        client, UPDATE, {"id": theirs["id"], "input": {"name": "pwned"}}, acme.headers
    )
    assert update["data"]["updateAgent"]["errors"][0]["code"] == "not_found"
    delete = await graphql(client, DELETE, {"id": theirs["id"]}, acme.headers)
    assert delete["data"]["deleteAgent"]["errors"][0]["code"] == "not_found"
    listed = (await graphql(client, LIST, {}, acme.headers))["data"]["agents"]
    assert listed["totalCount"] == 1
    assert [node["id"] for node in listed["nodes"]] == [mine["id"]]
    foreign_cursor = await graphql(client, LIST, {"after": theirs["id"]}, acme.headers)
    assert foreign_cursor["errors"][0]["extensions"]["code"] == "invalid_input"
    still = await graphql(client, GET, {"id": theirs["id"]}, globex.headers)
    assert still["data"]["agent"] == theirs


async def test_paging_forward_and_back(client: httpx.AsyncClient, acme: Tenant) -> None:
    ids = [(await create(client, acme, name=f"N{i}"))["id"] for i in range(7)]
    seen: list[str] = []
    after = None
    while True:
        page = (await graphql(client, LIST, {"first": 3, "after": after}, acme.headers))["data"][
            "agents"
        ]
        assert page["totalCount"] == 7
        assert [edge["cursor"] for edge in page["edges"]] == [node["id"] for node in page["nodes"]]
        seen.extend(node["id"] for node in page["nodes"])
        if not page["pageInfo"]["hasNextPage"]:
            break
        after = page["pageInfo"]["endCursor"]
    assert seen == list(reversed(ids))
    back = (await graphql(client, LIST, {"last": 3, "before": seen[3]}, acme.headers))["data"][
        "agents"
    ]
    assert [node["id"] for node in back["nodes"]] == seen[:3]
    assert back["pageInfo"]["hasPreviousPage"] is False
    assert back["pageInfo"]["hasNextPage"] is True
    for variables in ({"first": 0}, {"first": 101}, {"last": 2}):
        body = await graphql(client, LIST, variables, acme.headers)
        assert body["data"] == {"agents": None}  # the root field is nullable
        assert body["errors"][0]["extensions"]["code"] == "invalid_input", variables


async def test_scope_matrix(
    client: httpx.AsyncClient, acme: Tenant, tenants: TenantFactory
) -> None:
    reader = await tenants.key(acme, ["agents:read"])
    writer = await tenants.key(acme, ["agents:write"])
    outsider = await tenants.key(acme, ["calls:read", "webhooks:admin"])
    agent = await create(client, writer)
    reads = [(LIST, {}), (GET, {"id": agent["id"]})]
    writes = [
        (CREATE, {"input": {"name": "New"}}),
        (UPDATE, {"id": agent["id"], "input": {"name": "Renamed"}}),
        (DELETE, {"id": agent["id"]}),
    ]

    async def refused(tenant: Tenant, query: str, variables: dict[str, Any], scope: str) -> None:
        body = await graphql(client, query, variables, tenant.headers)
        # Non-null fields null the whole result; the nullable `agent` field is null itself.
        assert not any((body["data"] or {}).values()), query
        assert body["errors"][0]["extensions"]["code"] == "insufficient_scope"
        assert scope in body["errors"][0]["message"]

    listed = await graphql(client, LIST, {}, reader.headers)
    assert listed["data"]["agents"]["totalCount"] == 1
    assert (await graphql(client, GET, {"id": agent["id"]}, reader.headers))["data"]["agent"]
    for query, variables in writes:
        await refused(reader, query, variables, "agents:write")
    for query, variables in reads:
        await refused(writer, query, variables, "agents:read")
    for query, variables in [*reads, *writes]:
        scope = "agents:read" if (query, variables) in reads else "agents:write"
        await refused(outsider, query, variables, scope)

    renamed = await graphql(
        client, UPDATE, {"id": agent["id"], "input": {"name": "Renamed"}}, writer.headers
    )
    assert renamed["data"]["updateAgent"]["agent"]["name"] == "Renamed"
    assert (await graphql(client, GET, {"id": agent["id"]}, acme.headers))["data"]["agent"][
        "name"
    ] == "Renamed"
    deleted = await graphql(client, DELETE, {"id": agent["id"]}, acme.headers)
    assert deleted["data"]["deleteAgent"]["deletedId"] == agent["id"]
