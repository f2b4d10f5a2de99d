"""Call analysis: agent_config.analysis_schema/success_criteria validation, POST
/call-logs/{id}/analyze and analyzeCallLog (pending state, the queued job, refusals, tenancy,
scopes, test mode), and the offline extractor. The job itself runs in
tests/calls/test_call_analysis_engine.py."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.agents.models import Agent
from app.calls.analysis import ANALYZE_ACTOR
from app.engine.analysis import analyze_offline, offline_extract, tool_parameters
from app.kit.outbox_models import OutboxJob
from tests.calls.conftest import CallLogFactory
from tests.conftest import Tenant, TenantFactory, graphql

BASE = "/api/v1/call-logs"
UNKNOWN_ID = "00000000-0000-0000-0000-000000000000"
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "customer_name": {"type": "string"},
        "email": {"type": "string", "format": "email"},
        "wants_callback": {"type": "boolean"},
        "plan": {"type": "string", "enum": ["basic", "premium"]},
        "seats": {"type": "integer", "minimum": 1},
    },
    "required": ["email"],
}
CRITERIA = "The caller gave an e-mail address and asked for a callback."
TRANSCRIPT = [
    {"speaker": "agent", "text": "Hi, this is Ava from Acme. How can I help?", "timestamp": 0},
    {"speaker": "caller", "text": "Hello, my name is Ada Lovelace.", "timestamp": 2.5},
    {"speaker": "caller", "text": "My email is ada@example.com.", "timestamp": 5.0},
    {"speaker": "caller", "text": "Yes, I'd like a callback tomorrow please.", "timestamp": 8},
    {"speaker": "caller", "text": "We need 12 seats.", "timestamp": 11},
]
ANALYZE = """
mutation($id: ID!) {
  analyzeCallLog(id: $id) { callLog { id analysis } errors { code message field } }
}"""


async def create_agent(client: httpx.AsyncClient, tenant: Tenant, **config: Any) -> httpx.Response:
    return await client.post(
        "/api/v1/agents",
        json={"name": "Ava", "agent_config": {"welcome_message": "Hi", **config}},
        headers=tenant.headers,
    )


async def analysed_agent(client: httpx.AsyncClient, tenant: Tenant) -> str:
    response = await create_agent(client, tenant, analysis_schema=SCHEMA, success_criteria=CRITERIA)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"analysis_schema": {"type": "string"}}, '"type": "object"'),
        ({"analysis_schema": {"type": "object"}}, "at least one field"),
        (
            {"analysis_schema": {"type": "object", "properties": {"a": {"type": "strnig"}}}},
            "not a valid JSON Schema",
        ),
        (
            {
                "analysis_schema": {
                    "type": "object",
                    "properties": {"a": {"$ref": "https://example.com/schema.json"}},
                }
            },
            "only refer within itself",
        ),
        (
            {
                "analysis_schema": {
                    "type": "object",
                    "properties": {f"f{i}": {"type": "string"} for i in range(51)},
                }
            },
            "at most 50 properties",
        ),
        (
            {
                "analysis_schema": {
                    "type": "object",
                    "properties": {"a": {"type": "string", "description": "x" * 17_000}},
                }
            },
            "at most 16384 bytes",
        ),
        ({"analysis_schema": ["not", "an", "object"]}, "agent_config.analysis_schema"),
        ({"success_criteria": "   "}, "agent_config.success_criteria"),
        ({"success_criteria": "x" * 2001}, "agent_config.success_criteria"),
    ],
)
async def test_bad_analysis_settings_are_400_in_the_agents_shape(
    client: httpx.AsyncClient, acme: Tenant, config: dict[str, Any], message: str
) -> None:
    response = await create_agent(client, acme, **config)
    assert response.status_code == 400, response.text
    body = response.json()
    assert set(body) == {"error", "message"}
    assert body["error"] == 400
    assert message in body["message"]


async def stored_config(
    sessionmaker: async_sessionmaker[AsyncSession], agent_id: str
) -> dict[str, Any]:
    async with sessionmaker() as session:
        agent = await session.get(Agent, agent_id)
        assert agent is not None
        return dict(agent.config)


async def test_analysis_settings_are_stored_with_the_agent(
    client: httpx.AsyncClient, acme: Tenant, sessionmaker: async_sessionmaker[AsyncSession]
) -> None:
    agent_id = await analysed_agent(client, acme)
    config = await stored_config(sessionmaker, agent_id)
    assert config["analysis_schema"] == SCHEMA
    assert config["success_criteria"] == CRITERIA
    updated = await client.put(
        f"/api/v1/agents/{agent_id}",
        json={"agent_config": {"welcome_message": "Hello"}},
        headers=acme.headers,
    )
    assert updated.status_code == 200, updated.text
    config = await stored_config(sessionmaker, agent_id)
    assert config["analysis_schema"] is None
    assert config["success_criteria"] is None


async def finished_call(
    calls: CallLogFactory, tenant: Tenant, agent_id: str, **fields: Any
) -> dict[str, Any]:
    values: dict[str, Any] = {"agent_id": agent_id, "transcript": TRANSCRIPT, **fields}
    return await calls.record(tenant, **values)


async def analyze_jobs(sessionmaker: async_sessionmaker[AsyncSession]) -> list[OutboxJob]:
    async with sessionmaker() as session:
        rows = await session.scalars(select(OutboxJob).where(OutboxJob.actor == ANALYZE_ACTOR))
        return list(rows.all())


async def test_analyze_marks_the_analysis_pending_and_queues_one_job(
    client: httpx.AsyncClient,
    acme: Tenant,
    calls: CallLogFactory,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    agent_id = await analysed_agent(client, acme)
    call = await finished_call(calls, acme, agent_id)
    assert call["analysis"] is None
    response = await client.post(f"{BASE}/{call['id']}/analyze", headers=acme.headers)
    assert response.status_code == 202, response.text
    body = response.json()
    assert body["id"] == call["id"]
    analysis = body["analysis"]
    assert analysis["status"] == "pending"
    assert analysis["requested_at"].endswith("Z")
    assert analysis["data"] is None
    assert analysis["error"] is None
    [job] = await analyze_jobs(sessionmaker)
    assert job.args == [call["id"], analysis["requested_at"]]

    # A second request while one is pending answers that one.
    again = await client.post(f"{BASE}/{call['id']}/analyze", headers=acme.headers)
    assert again.status_code == 202
    assert again.json()["analysis"] == analysis
    assert len(await analyze_jobs(sessionmaker)) == 1
    fetched = await client.get(f"{BASE}/{call['id']}", headers=acme.headers)
    assert fetched.json()["analysis"] == analysis


async def test_analyze_refusals_are_400(
    client: httpx.AsyncClient, acme: Tenant, calls: CallLogFactory
) -> None:
    agent_id = await analysed_agent(client, acme)
    plain = await create_agent(client, acme)
    cases = [
        (
            await finished_call(calls, acme, agent_id, status="in-progress"),
            "The call is still in progress; it is analyzed once it ends",
        ),
        (
            await finished_call(calls, acme, agent_id, transcript=[]),
            "The call has no transcript to analyze",
        ),
        (
            await finished_call(calls, acme, plain.json()["id"]),
            "The call's agent defines no analysis_schema or success_criteria",
        ),
        (
            await finished_call(calls, acme, UNKNOWN_ID),
            "The call's agent no longer exists",
        ),
    ]
    for call, message in cases:
        response = await client.post(f"{BASE}/{call['id']}/analyze", headers=acme.headers)
        assert response.status_code == 400, response.text
        assert response.json() == {"detail": message}
        graph = await graphql(client, ANALYZE, {"id": call["id"]}, acme.headers)
        payload = graph["data"]["analyzeCallLog"]
        assert payload["callLog"] is None
        assert payload["errors"] == [{"code": "invalid_state", "message": message, "field": None}]


async def test_other_tenants_and_unknown_ids_are_404(
    client: httpx.AsyncClient, acme: Tenant, globex: Tenant, calls: CallLogFactory
) -> None:
    agent_id = await analysed_agent(client, acme)
    call = await finished_call(calls, acme, agent_id)
    for call_log_id in (call["id"], UNKNOWN_ID, "not-a-uuid"):
        response = await client.post(f"{BASE}/{call_log_id}/analyze", headers=globex.headers)
        assert response.status_code == 404, response.text
        assert response.json() == {"detail": "Call log not found"}
    graph = await graphql(client, ANALYZE, {"id": call["id"]}, globex.headers)
    assert graph["data"]["analyzeCallLog"]["errors"][0]["code"] == "not_found"
    own = await client.get(f"{BASE}/{call['id']}", headers=acme.headers)
    assert own.json()["analysis"] is None


async def test_a_test_key_never_analyzes_a_live_call(
    client: httpx.AsyncClient, acme: Tenant, tenants: TenantFactory, calls: CallLogFactory
) -> None:
    agent_id = await analysed_agent(client, acme)
    live_call = await finished_call(calls, acme, agent_id, livemode=True)
    response = await client.post(f"{BASE}/{live_call['id']}/analyze", headers=acme.headers)
    assert response.status_code in (403, 404)
    graph = await graphql(client, ANALYZE, {"id": live_call["id"]}, acme.headers)
    assert graph["data"]["analyzeCallLog"]["errors"][0]["code"] in (
        "livemode_mismatch",
        "not_found",
    )
    live = await tenants.key(acme, ["calls:dispatch"], livemode=True)
    allowed = await client.post(f"{BASE}/{live_call['id']}/analyze", headers=live.headers)
    assert allowed.status_code == 202, allowed.text
    assert allowed.json()["analysis"]["status"] == "pending"


@pytest.mark.parametrize(
    ("scopes", "allowed"),
    [(["calls:dispatch"], True), (["full_access"], True), (["calls:read"], False)],
)
async def test_scopes(
    client: httpx.AsyncClient,
    acme: Tenant,
    tenants: TenantFactory,
    calls: CallLogFactory,
    scopes: list[str],
    allowed: bool,
) -> None:
    agent_id = await analysed_agent(client, acme)
    call = await finished_call(calls, acme, agent_id)
    key = await tenants.key(acme, scopes)
    response = await client.post(f"{BASE}/{call['id']}/analyze", headers=key.headers)
    graph = await graphql(client, ANALYZE, {"id": call["id"]}, key.headers)
    if allowed:
        assert response.status_code == 202, response.text
        assert graph["data"]["analyzeCallLog"]["callLog"]["analysis"]["status"] == "pending"
        return
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "insufficient_scope"
    assert graph["data"]["analyzeCallLog"] is None
    assert graph["errors"][0]["extensions"]["code"] == "insufficient_scope"


async def test_analyze_over_graphql(
    client: httpx.AsyncClient, acme: Tenant, calls: CallLogFactory
) -> None:
    agent_id = await analysed_agent(client, acme)
    call = await finished_call(calls, acme, agent_id)
    graph = await graphql(client, ANALYZE, {"id": call["id"]}, acme.headers)
    payload = graph["data"]["analyzeCallLog"]
    assert payload["errors"] == []
    assert payload["callLog"]["id"] == call["id"]
    assert payload["callLog"]["analysis"]["status"] == "pending"
    read = await graphql(
        client,
        "query($id: ID!) { callLog(id: $id) { analysis } }",
        {"id": call["id"]},
        acme.headers,
    )
    assert read["data"]["callLog"]["analysis"] == payload["callLog"]["analysis"]


def test_offline_extractor_fills_what_the_transcript_states() -> None:
    data, unfilled = offline_extract(SCHEMA, TRANSCRIPT)
    assert data == {
        "customer_name": "Ada Lovelace",
        "email": "ada@example.com",
        "wants_callback": True,
        "seats": 12,
    }
    assert unfilled == ["plan"]
    result = analyze_offline(TRANSCRIPT, SCHEMA, CRITERIA)
    assert result.error is None
    assert result.extractor == "offline"
    assert result.success is None  # never judged without a model, and says so
    assert result.reason is not None
    assert "not judged" in result.reason


def test_offline_extractor_reports_what_it_could_not_fill() -> None:
    said = [{"speaker": "caller", "text": "No, I don't want a callback.", "timestamp": 1}]
    result = analyze_offline(said, SCHEMA, None)
    assert result.data == {"wants_callback": False}
    assert result.error is not None
    assert result.error.code == "incomplete"
    assert "'email' is a required property" in result.error.message
    assert set(result.unfilled) == {"customer_name", "email", "plan", "seats"}


def test_the_model_is_offered_the_schema_as_its_function_parameters() -> None:
    parameters = tool_parameters(SCHEMA, CRITERIA)
    assert parameters["properties"]["data"] == SCHEMA
    assert parameters["required"] == ["data", "success", "reason"]
    assert tool_parameters(None, CRITERIA)["required"] == ["success", "reason"]
    assert tool_parameters(SCHEMA, None)["required"] == ["data"]
