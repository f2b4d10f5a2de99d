"""POST /api/v1/calls and dispatchCall: validation, tenancy, scopes, what a dispatch writes
(call log, call.started, the placement job), and callLog { agent } batched over GraphQL.
Jobs are recorded here, not run (tests/calls/test_calls_engine.py runs them)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.calls.telephony import PLACE_ACTOR
from app.events.models import Event
from app.kit.outbox_models import OutboxJob
from tests.calls.conftest import CallLogFactory
from tests.conftest import StatementCounter, Tenant, TenantFactory, graphql

CALLS = "/api/v1/calls"
DISPATCH = """
mutation($input: DispatchCallInput!) {
  dispatchCall(input: $input) {
    callLog { id status direction livemode toNumber fromNumber agentId callId }
    errors { code message field }
  }
}"""
LOGS_WITH_AGENTS = """
query { callLogs(pageSize: 50) { items { id transcript { text } agent { id name } } } }
"""


async def create_agent(client: httpx.AsyncClient, tenant: Tenant, name: str = "Ava") -> str:
    response = await client.post(
        "/api/v1/agents",
        json={"name": name, "agent_config": {"welcome_message": "Hi"}},
        headers=tenant.headers,
    )
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


async def test_dispatch_logs_an_outbound_call_and_queues_it(
    client: httpx.AsyncClient, acme: Tenant, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    agent_id = await create_agent(client, acme)
    script = ["When do you open?"]
    response = await client.post(
        CALLS,
        json={
            "agent_id": agent_id.upper(),
            "to_number": "+44 20 7946 0958",
            "metadata": {"script": script, "crm_id": 7},
        },
        headers=acme.headers,
    )
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["status"] == "in-progress"
    assert body["direction"] == "outbound"
    assert body["agent_id"] == agent_id
    assert body["to_number"] == "+442079460958"
    assert body["from_number"] == "+15005550006"
    assert body["organization_id"] == acme.organization_id
    assert body["livemode"] is False
    assert body["duration_seconds"] == 0
    assert body["transcript"] == []
    assert body["ended_at"] is None
    assert body["call_id"].startswith("sb_")

    fetched = await client.get(f"/api/v1/call-logs/{body['id']}", headers=acme.headers)
    assert fetched.json() == body
    async with sessionmaker() as session:
        [job] = await session.scalars(select(OutboxJob).where(OutboxJob.actor == PLACE_ACTOR))
        [event] = await session.scalars(select(Event).where(Event.type == "call.started"))
    assert job.args == [body["id"], script]
    assert event.data["id"] == body["id"]
    assert event.data["status"] == "in-progress"


async def test_another_organizations_agent_is_the_agents_404(
    client: httpx.AsyncClient, acme: Tenant, globex: Tenant
) -> None:
    foreign = await create_agent(client, globex)
    for agent_id in (foreign, "6f1c3c4e-0000-4000-8000-000000000000"):
        response = await client.post(
            CALLS, json={"agent_id": agent_id, "to_number": "+14155550123"}, headers=acme.headers
        )
        assert response.status_code == 404
        assert response.json() == {"error": 404, "message": "Agent not found"}


@pytest.mark.parametrize(
    ("body", "status", "detail"),
    [
        (
            {"agent_id": "not-a-uuid", "to_number": "+14155550123"},
            400,
            "Invalid or missing agent_id",
        ),
        ({"to_number": "abc"}, 400, "Invalid phone number format or length"),
        ({"to_number": "+1415"}, 400, "Invalid phone number format or length"),
        (
            {"to_number": "+14155550123", "from_number": "12"},
            400,
            "Invalid phone number format or length",
        ),
    ],
)
async def test_bad_input_is_400(
    client: httpx.AsyncClient, acme: Tenant, body: dict[str, Any], status: int, detail: str
) -> None:
    agent_id = await create_agent(client, acme)
    response = await client.post(CALLS, json={"agent_id": agent_id, **body}, headers=acme.headers)
    assert response.status_code == status, response.text
    assert response.json() == {"detail": detail}


@pytest.mark.parametrize(
    "body",
    [
        {"to_number": "+14155550123"},
        {"agent_id": "x"},
        {"agent_id": "x", "to_number": "+14155550123", "metadata": {"script": []}},
        {"agent_id": "x", "to_number": "+14155550123", "metadata": {"script": ["ok", 3]}},
        {"agent_id": "x", "to_number": "+14155550123", "metadata": {"script": ["a" * 501]}},
        {"agent_id": "x", "to_number": "+14155550123", "metadata": "nope"},
    ],
)
async def test_malformed_body_is_422(
    client: httpx.AsyncClient, acme: Tenant, body: dict[str, Any]
) -> None:
    response = await client.post(CALLS, json=body, headers=acme.headers)
    assert response.status_code == 422, response.text
    assert isinstance(response.json()["detail"], list)


async def test_inactive_agent_is_400(client: httpx.AsyncClient, acme: Tenant) -> None:
    agent_id = await create_agent(client, acme)
    updated = await client.put(
        f"/api/v1/agents/{agent_id}", json={"is_active": "inactive"}, headers=acme.headers
    )
    assert updated.status_code == 200, updated.text
    response = await client.post(
        CALLS, json={"agent_id": agent_id, "to_number": "+14155550123"}, headers=acme.headers
    )
    assert response.status_code == 400
    assert response.json() == {"detail": "Agent is not active (status: inactive)"}


async def test_live_calls_need_a_from_number(
    client: httpx.AsyncClient, acme: Tenant, tenants: TenantFactory
) -> None:
    live = await tenants.key(acme, ["full_access"], livemode=True)
    agent_id = await create_agent(client, live)
    response = await client.post(
        CALLS, json={"agent_id": agent_id, "to_number": "+14155550123"}, headers=live.headers
    )
    assert response.status_code == 400
    assert response.json() == {"detail": "from_number is required for live calls"}
    response = await client.post(
        CALLS,
        json={"agent_id": agent_id, "to_number": "+14155550123", "from_number": "+14155550100"},
        headers=live.headers,
    )
    assert response.status_code == 201
    assert response.json()["livemode"] is True


@pytest.mark.parametrize(
    ("scopes", "status"),
    [
        (["calls:read"], 403),
        (["agents:read", "agents:write"], 403),
        (["calls:dispatch"], 201),
    ],
)
async def test_scopes(
    client: httpx.AsyncClient,
    acme: Tenant,
    tenants: TenantFactory,
    scopes: list[str],
    status: int,
) -> None:
    agent_id = await create_agent(client, acme)
    key = await tenants.key(acme, scopes)
    response = await client.post(
        CALLS, json={"agent_id": agent_id, "to_number": "+14155550123"}, headers=key.headers
    )
    assert response.status_code == status, response.text
    if status == 403:
        assert response.json()["error"]["code"] == "insufficient_scope"
        body = await graphql(
            client,
            DISPATCH,
            {"input": {"agentId": agent_id, "toNumber": "+14155550123"}},
            key.headers,
        )
        assert body["data"]["dispatchCall"] is None
        assert body["errors"][0]["extensions"]["code"] == "insufficient_scope"


async def test_dispatch_over_graphql(
    client: httpx.AsyncClient, acme: Tenant, globex: Tenant
) -> None:
    agent_id = await create_agent(client, acme)
    body = await graphql(
        client,
        DISPATCH,
        {"input": {"agentId": agent_id, "toNumber": "+14155550123", "metadata": {"a": 1}}},
        acme.headers,
    )
    payload = body["data"]["dispatchCall"]
    assert payload["errors"] == []
    call = payload["callLog"]
    assert call["status"] == "in-progress"
    assert call["direction"] == "outbound"
    assert call["livemode"] is False
    assert call["agentId"] == agent_id

    foreign = await create_agent(client, globex)
    for variables, code, field in (
        ({"agentId": foreign, "toNumber": "+14155550123"}, "not_found", None),
        ({"agentId": agent_id, "toNumber": "nope"}, "invalid_input", "toNumber"),
    ):
        body = await graphql(client, DISPATCH, {"input": variables}, acme.headers)
        payload = body["data"]["dispatchCall"]
        assert payload["callLog"] is None
        [error] = payload["errors"]
        assert error["code"] == code
        if field:
            assert error["field"] in (field, "to_number")


async def test_call_log_agents_are_loaded_in_one_batch(
    client: httpx.AsyncClient,
    acme: Tenant,
    calls: CallLogFactory,
    sql_counter: StatementCounter,
) -> None:
    counts = []
    agents = [await create_agent(client, acme, f"Agent {index}") for index in range(6)]
    for many in (False, True):
        for agent_id in agents[:3] if not many else agents[3:]:
            await calls.record(acme, agent_id=agent_id)
        sql_counter.count = 0
        body = await graphql(client, LOGS_WITH_AGENTS, None, acme.headers)
        assert "errors" not in body, body
        items = body["data"]["callLogs"]["items"]
        assert len(items) == (6 if many else 3)
        assert {item["agent"]["id"] for item in items} <= set(agents)
        counts.append(sql_counter.count)
    assert counts[0] == counts[1]


async def test_call_log_agent_needs_agents_read(
    client: httpx.AsyncClient, acme: Tenant, tenants: TenantFactory, calls: CallLogFactory
) -> None:
    agent_id = await create_agent(client, acme)
    await calls.record(acme, agent_id=agent_id)
    reader = await tenants.key(acme, ["calls:read"])
    body = await graphql(client, LOGS_WITH_AGENTS, None, reader.headers)
    [item] = body["data"]["callLogs"]["items"]
    assert item["agent"] is None
    assert body["errors"][0]["extensions"]["code"] == "insufficient_scope"
