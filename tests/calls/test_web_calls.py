"""POST /api/v1/calls/web and startWebCall: the session's shape, the call it logs, tenancy,
scopes, the concurrent-call limit and the sweep of sessions never opened (the stream itself:
tests/voice/test_browser_sessions.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import pytest
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.calls.models import CallLog
from app.calls.stream_tokens import token_call_log_id
from app.events.models import Event
from app.resources import Resources
from app.voice.record import fail_stale_streams
from tests.calls.test_calls_dispatch import create_agent
from tests.conftest import Tenant, TenantFactory, client_with, graphql

WEB = "/api/v1/calls/web"
START = """
mutation($input: StartWebCallInput!) {
  startWebCall(input: $input) {
    webCall { callLogId url token expiresAt }
    errors { code message field }
  }
}"""


async def test_a_session_logs_an_inbound_call_and_hands_back_its_stream(
    client: httpx.AsyncClient, acme: Tenant, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    agent_id = await create_agent(client, acme)
    before = datetime.now(UTC)
    response = await client.post(WEB, json={"agent_id": agent_id.upper()}, headers=acme.headers)
    assert response.status_code == 201, response.text
    body = response.json()
    assert set(body) == {"call_log_id", "url", "token", "expires_at"}
    assert body["url"] == "ws://testserver/voice/web"
    assert token_call_log_id(body["token"]) == body["call_log_id"]
    expires = datetime.fromisoformat(body["expires_at"].replace("Z", "+00:00"))
    assert before + timedelta(seconds=250) < expires < before + timedelta(seconds=310)

    log = (
        await client.get(f"/api/v1/call-logs/{body['call_log_id']}", headers=acme.headers)
    ).json()
    assert log["direction"] == "inbound"
    assert log["status"] == "in-progress"
    assert log["agent_id"] == agent_id
    assert log["call_id"].startswith("web_")
    assert log["from_number"] == log["to_number"] == "browser"
    assert log["livemode"] is False
    async with sessionmaker() as session:
        row = await session.get(CallLog, body["call_log_id"])
        assert row is not None
        assert row.stream_token_hash is not None
        assert body["token"] not in (row.stream_token_hash, row.call_id)  # only its hash is kept
        kinds = (await session.scalars(select(Event.type))).all()
    assert "call.started" in kinds


async def test_the_public_url_names_the_stream_host(resources: Resources, acme: Tenant) -> None:
    async with client_with(resources, telephony_public_url="https://voice.example.com") as client:
        agent_id = await create_agent(client, acme)
        response = await client.post(WEB, json={"agent_id": agent_id}, headers=acme.headers)
    assert response.status_code == 201, response.text
    assert response.json()["url"] == "wss://voice.example.com/voice/web"


async def test_unknown_and_other_organizations_agents_get_the_agents_404(
    client: httpx.AsyncClient, acme: Tenant, globex: Tenant
) -> None:
    theirs = await create_agent(client, globex)
    for agent_id in (theirs, "6f1c3c1e-8d1a-4b47-9b7c-2b7f9b0e0a11"):
        response = await client.post(WEB, json={"agent_id": agent_id}, headers=acme.headers)
        assert response.status_code == 404
        assert response.json() == {"error": 404, "message": "Agent not found"}
    bad = await client.post(WEB, json={"agent_id": "nope"}, headers=acme.headers)
    assert bad.status_code == 400
    assert bad.json() == {"detail": "Invalid or missing agent_id"}
    missing = await client.post(WEB, json={}, headers=acme.headers)
    assert missing.status_code == 422


async def test_an_inactive_agent_is_refused(client: httpx.AsyncClient, acme: Tenant) -> None:
    agent_id = await create_agent(client, acme)
    response = await client.put(
        f"/api/v1/agents/{agent_id}", json={"is_active": "inactive"}, headers=acme.headers
    )
    assert response.status_code == 200, response.text
    refused = await client.post(WEB, json={"agent_id": agent_id}, headers=acme.headers)
    assert refused.status_code == 400
    assert refused.json() == {"detail": "Agent is not active (status: inactive)"}


@pytest.mark.parametrize(
    ("scopes", "status"),
    [(["calls:dispatch"], 201), (["calls:read"], 403), (["agents:read", "agents:write"], 403)],
)
async def test_the_dispatch_scope_is_required(
    client: httpx.AsyncClient,
    acme: Tenant,
    tenants: TenantFactory,
    scopes: list[str],
    status: int,
) -> None:
    agent_id = await create_agent(client, acme)
    key = await tenants.key(acme, scopes)
    response = await client.post(WEB, json={"agent_id": agent_id}, headers=key.headers)
    assert response.status_code == status, response.text
    answer = await graphql(client, START, {"input": {"agentId": agent_id}}, key.headers)
    if status == 201:
        assert answer["data"]["startWebCall"]["webCall"]["token"]
    else:
        assert answer["data"]["startWebCall"] is None
        assert answer["errors"][0]["extensions"]["code"] == "insufficient_scope"


async def test_sessions_count_against_the_organizations_call_limit(
    resources: Resources, acme: Tenant, globex: Tenant
) -> None:
    async with client_with(resources, voice_max_concurrent_calls=2) as client:
        agent_id = await create_agent(client, acme)
        for _ in range(2):
            started = await client.post(WEB, json={"agent_id": agent_id}, headers=acme.headers)
            assert started.status_code == 201, started.text
        over = await client.post(WEB, json={"agent_id": agent_id}, headers=acme.headers)
        assert over.status_code == 429
        assert over.json()["error"] == "rate_limit_exceeded"
        assert int(over.headers["Retry-After"]) > 0
        answer = await graphql(client, START, {"input": {"agentId": agent_id}}, acme.headers)
        assert answer["data"]["startWebCall"] is None
        assert answer["errors"][0]["extensions"]["code"] == "rate_limit_exceeded"
        # Another organization is not held back.
        theirs = await create_agent(client, globex)
        other = await client.post(WEB, json={"agent_id": theirs}, headers=globex.headers)
        assert other.status_code == 201


async def test_graphql_starts_a_session_and_refuses_another_organizations_agent(
    client: httpx.AsyncClient, acme: Tenant, globex: Tenant
) -> None:
    agent_id = await create_agent(client, acme)
    answer = await graphql(client, START, {"input": {"agentId": agent_id}}, acme.headers)
    started = answer["data"]["startWebCall"]
    assert started["errors"] == []
    web_call = started["webCall"]
    assert web_call["url"] == "ws://testserver/voice/web"
    assert token_call_log_id(web_call["token"]) == web_call["callLogId"]
    assert web_call["expiresAt"].endswith("Z")
    log = await client.get(f"/api/v1/call-logs/{web_call['callLogId']}", headers=acme.headers)
    assert log.json()["direction"] == "inbound"

    refused = await graphql(client, START, {"input": {"agentId": agent_id}}, globex.headers)
    assert refused["data"]["startWebCall"] == {
        "webCall": None,
        "errors": [{"code": "not_found", "message": "Agent not found", "field": None}],
    }
    bad = await graphql(client, START, {"input": {"agentId": "nope"}}, acme.headers)
    [error] = bad["data"]["startWebCall"]["errors"]
    assert error["code"] == "invalid_input"
    assert error["field"] == "agentId"


async def test_a_session_never_opened_is_ended_by_the_sweep(
    client: httpx.AsyncClient,
    acme: Tenant,
    resources: Resources,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    agent_id = await create_agent(client, acme)
    body = (await client.post(WEB, json={"agent_id": agent_id}, headers=acme.headers)).json()
    call_log_id = body["call_log_id"]
    # Not yet: its token can still open it.
    assert await fail_stale_streams(resources, 60) == 0
    async with sessionmaker() as session:
        expired = datetime.now(UTC) - timedelta(seconds=120)
        await session.execute(
            update(CallLog).where(CallLog.id == call_log_id).values(media_heartbeat_at=expired)
        )
        await session.commit()
    assert await fail_stale_streams(resources, 60) == 1
    log = (await client.get(f"/api/v1/call-logs/{call_log_id}", headers=acme.headers)).json()
    assert log["status"] == "failed"
    assert log["end_reason"] == "not_connected"
    assert log["duration_seconds"] == 0
