"""Agent tests end to end: REST/GraphQL → outbox → worker (StubBroker, and RedisBroker) →
conversation engine → the offline responder or a real provider SDK against local fakes of
OpenAI, Anthropic and Groq, MCP servers built with the `mcp` SDK (both transports), Cal.com
and Google Calendar → the run's verdict. SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from redis.asyncio import Redis

from app.engine.limits import ConversationLimits
from tests.conftest import Tenant, graphql
from tests.engine.fakes import FakeProviders, running_mcp_server
from tests.engine.fixtures import backend_fixture, engine_fixture
from tests.engine.fixtures import providers as providers
from tests.webhooks.receiver import Answer, running_receiver
from tests.webhooks.test_delivery_engine import Engine, eventually

FINISHED = ("passed", "failed", "error")
ORDER_TOOL = {
    "name": "order_status",
    "description": "Where an order is",
    "url": "https://93.184.216.34/orders",
    "parameters": {
        "type": "object",
        "properties": {"order_id": {"type": "string"}},
        "required": ["order_id"],
    },
}


backend = backend_fixture("agent_tests")


@pytest.fixture(scope="module")
def mcp_url() -> Iterator[str]:
    with running_mcp_server() as (url, _calls):
        yield url


engine = engine_fixture(
    llm_retry_backoff_seconds=0.0,
    engine_turn_deadline_seconds=15.0,
    agent_tool_timeout_seconds=3.0,
    ai_max_concurrent_conversations=2,
)


async def create_agent(engine: Engine, tenant: Tenant, **config: Any) -> str:
    response = await engine.client.post(
        "/api/v1/agents",
        json={"name": "Ava", "timezone": "America/New_York", "agent_config": config},
        headers=tenant.headers,
    )
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


async def credential(engine: Engine, tenant: Tenant, provider: str, **body: Any) -> None:
    response = await engine.client.put(
        f"/api/v1/provider-credentials/{provider}", json=body, headers=tenant.headers
    )
    assert response.status_code == 200, response.text


async def run_test(engine: Engine, tenant: Tenant, agent_id: str, **body: Any) -> dict[str, Any]:
    response = await engine.client.post(
        f"/api/v1/agents/{agent_id}/tests", json=body, headers=tenant.headers
    )
    assert response.status_code == 201, response.text
    run = response.json()
    assert run["status"] == "queued"
    found: dict[str, Any] = {}

    async def finished() -> bool:
        got = await engine.client.get(
            f"/api/v1/agents/{agent_id}/tests/{run['id']}", headers=tenant.headers
        )
        assert got.status_code == 200, got.text
        found.update(got.json())
        return found["status"] in FINISHED

    await eventually(finished, 20.0)
    return found


async def test_offline_runs_their_verdicts_and_the_surfaces(engine: Engine) -> None:
    tenant = await engine.tenants.organization()
    # Made before any run: on SQLite, its writes would otherwise wait on the worker's.
    other = await engine.tenants.organization("Globex")
    agent_id = await create_agent(engine, tenant, custom_tools=[ORDER_TOOL])
    spec = {
        "name": "order then person",
        "turns": ["Where is my order 1234?", "Can I talk to a real person please?", "never said"],
        "tool_mocks": {"order_status": {"answer": "Order 1234 shipped on Monday."}},
        "expectations": [
            {"type": "tool_called", "tool": "order_status", "arguments": {"order_id": "1234"}},
            {"type": "reply_contains", "text": "SHIPPED", "turn": 1},
            {"type": "reply_not_contains", "text": "sorry"},
            {"type": "handoff", "reason": "real person"},
        ],
    }
    run = await run_test(engine, tenant, agent_id, **spec)
    assert run["status"] == "passed", (run["results"], run["transcript"], run["error"])
    assert all(result["passed"] for result in run["results"])
    assert run["provider"] == "offline"
    assert run["cost"] == 0
    assert run["error"] is None
    assert [(e["role"], e["turn"]) for e in run["transcript"]] == [
        ("user", 1),
        ("agent", 1),
        ("user", 2),
        ("agent", 2),
    ]
    assert run["transcript"][1]["text"] == "Order 1234 shipped on Monday."
    assert run["transcript"][3]["action"] == {
        "kind": "handoff",
        "reason": "Can I talk to a real person please?",
    }

    failing = await run_test(
        engine,
        tenant,
        agent_id,
        turns=["Where is my order 9?"],
        tool_mocks={"order_status": "Order 9 is lost"},
        expectations=[
            {"type": "end"},
            {"type": "tool_called", "tool": "order_status", "arguments": {"order_id": "8"}},
            {"type": "reply_contains", "text": "lost"},
        ],
    )
    assert failing["status"] == "failed"
    assert [r["passed"] for r in failing["results"]] == [False, False, True]
    assert failing["results"][0]["detail"] == "the conversation did not end"

    listed = await engine.client.get(
        f"/api/v1/agents/{agent_id}/tests?limit=1", headers=tenant.headers
    )
    page = listed.json()
    assert (page["object"], page["total_count"], page["has_more"]) == ("list", 2, True)
    assert page["data"][0]["id"] == failing["id"]

    hidden = await engine.client.get(
        f"/api/v1/agents/{agent_id}/tests/{run['id']}", headers=other.headers
    )
    assert hidden.status_code == 404
    assert hidden.json() == {"error": 404, "message": "Agent not found"}
    bad = await engine.client.post(
        f"/api/v1/agents/{agent_id}/tests",
        json={"turns": [], "expectations": [{"type": "end"}]},
        headers=tenant.headers,
    )
    assert bad.status_code == 400
    assert bad.json()["message"].startswith("Validation error: turns:")
    unknown = await engine.client.post(
        f"/api/v1/agents/{agent_id}/tests",
        json={"turns": ["hi"], "expectations": [{"type": "telepathy"}]},
        headers=tenant.headers,
    )
    assert unknown.status_code == 400
    reader = await engine.tenants.key(tenant, ["agents:read"])
    refused = await engine.client.post(
        f"/api/v1/agents/{agent_id}/tests", json=spec, headers=reader.headers
    )
    assert refused.status_code == 403

    mutation = """
    mutation Run($agentId: ID!, $input: AgentTestInput!) {
      runAgentTest(agentId: $agentId, input: $input) {
        agentTestRun { id status } errors { code message field }
      }
    }"""
    queued = await graphql(
        engine.client,
        mutation,
        {"agentId": agent_id, "input": {"turns": ["Bye!"], "expectations": [{"type": "end"}]}},
        tenant.headers,
    )
    run_id = queued["data"]["runAgentTest"]["agentTestRun"]["id"]
    query = (
        "query One($id: ID!) { agentTestRun(id: $id) "
        "{ status results usage { inputTokens } transcript } }"
    )
    seen: dict[str, Any] = {}

    async def done() -> bool:
        seen.update(
            (await graphql(engine.client, query, {"id": run_id}, tenant.headers))["data"][
                "agentTestRun"
            ]
        )
        return seen["status"] in FINISHED

    await eventually(done, 20.0)
    assert seen["status"] == "passed"
    # GraphQL shows every field of the REST body (`object` aside), timestamps as the text
    # REST writes, `usage` in camel case.
    fields = (
        "id agentId name status livemode turns toolMocks expectations results transcript "
        "error provider model usage { inputTokens outputTokens } cost createdAt startedAt "
        "finishedAt updatedAt"
    )
    shown = (
        await graphql(
            engine.client,
            f"query One($id: ID!) {{ agentTestRun(id: $id) {{ {fields} }} }}",
            {"id": run_id},
            tenant.headers,
        )
    )["data"]["agentTestRun"]
    response = await engine.client.get(
        f"/api/v1/agents/{agent_id}/tests/{run_id}", headers=tenant.headers
    )
    body = response.json()
    assert body.pop("object") == "agent_test_run"
    usage = body.pop("usage")
    assert shown.pop("usage") == {
        "inputTokens": usage["input_tokens"],
        "outputTokens": usage["output_tokens"],
    }
    camel = {
        "".join(w.capitalize() if i else w for i, w in enumerate(k.split("_"))): v
        for k, v in body.items()
    }
    assert shown == camel
    assert shown["turns"] == ["Bye!"]
    assert shown["expectations"] == [{"type": "end"}]
    invalid = await graphql(
        engine.client,
        mutation,
        {"agentId": agent_id, "input": {"turns": ["hi"], "expectations": []}},
        tenant.headers,
    )
    assert invalid["data"]["runAgentTest"]["errors"][0]["field"] == "expectations"


async def test_openai_streaming_with_a_real_tool_call(
    engine: Engine, providers: tuple[FakeProviders, str]
) -> None:
    fake, url = providers
    tenant = await engine.tenants.organization()
    await credential(engine, tenant, "openai", api_key="sk-proj-abcd1234", base_url=url + "/v1")
    with running_receiver() as tool_server:
        tool_server.default = Answer(body=b'{"answer": "Order 55 shipped.", "eta": "Friday"}')
        agent_id = await create_agent(
            engine,
            tenant,
            system_prompt="You are Ava of Acme.",
            custom_tools=[{**ORDER_TOOL, "url": f"{tool_server.url}/orders"}],
        )
        run = await run_test(
            engine,
            tenant,
            agent_id,
            turns=["Where is order 55?"],
            expectations=[
                {"type": "tool_called", "tool": "order_status", "arguments": {"order_id": "55"}},
                {"type": "reply_contains", "text": "Friday"},
            ],
        )
        [tool_request] = tool_server.requests
    assert run["status"] == "passed", (run["results"], run["transcript"], run["error"])
    assert (run["provider"], run["model"]) == ("openai", "gpt-4o-mini")
    assert run["usage"] == {"input_tokens": 240, "output_tokens": 60}
    assert run["cost"] == pytest.approx((240 * 0.15 + 60 * 0.60) / 1_000_000)
    assert tool_request.body == b'{"order_id":"55"}'
    first, second = fake.model_requests()[-2:]
    assert first.headers["authorization"] == "Bearer sk-proj-abcd1234"
    assert first.body["stream"] is True
    assert first.body["messages"][0]["content"].startswith("You are Ava of Acme.")
    assert {t["function"]["name"] for t in first.body["tools"]} >= {
        "search_knowledge",
        "transfer_to_human",
        "end_conversation",
        "order_status",
    }
    assert second.body["messages"][-1]["role"] == "tool"


async def test_anthropic_with_mcp_and_cal_com_booking(
    engine: Engine, providers: tuple[FakeProviders, str], mcp_url: str
) -> None:
    fake, url = providers
    tenant = await engine.tenants.organization()
    await credential(engine, tenant, "anthropic", api_key="sk-ant-key-9999", base_url=url)
    await credential(
        engine, tenant, "cal_com", api_key="cal_live_key", base_url=url, event_type_id=77
    )
    agent_id = await create_agent(
        engine,
        tenant,
        llm_provider="anthropic",
        booking_config={
            "booking_enabled": True,
            "provider": "cal_com",
            "prompt": "Offer mornings first.",
        },
        mcp_tools=[{"name": "weather", "url": f"{mcp_url}/mcp", "allowed_tools": ["get_weather"]}],
    )
    run = await run_test(
        engine,
        tenant,
        agent_id,
        turns=[
            "What's the weather like?",
            "What times are available on Monday?",
            "Please book 10 am",
        ],
        expectations=[
            {"type": "tool_called", "tool": "get_weather", "arguments": {"city": "Paris"}},
            {"type": "tool_called", "tool": "check_availability"},
            {
                "type": "tool_called",
                "tool": "book_appointment",
                "arguments": {"email": "ada@example.com"},
            },
            {"type": "reply_contains", "text": "Sunny", "turn": 1},
            {"type": "reply_contains", "text": "2026-03-02T10:00:00-05:00", "turn": 2},
            {"type": "reply_contains", "text": "bk_abc123", "turn": 3},
        ],
    )
    assert run["status"] == "passed", (run["results"], run["transcript"], run["error"])
    assert run["provider"] == "anthropic"
    messages = [r for r in fake.requests if r.path == "/v1/messages"]
    assert "Offer mornings first." in messages[0].body["system"]
    assert all(
        r.headers.get("x-api-key") == "sk-ant-key-9999"
        or r.headers.get("authorization") == "Bearer sk-ant-key-9999"
        for r in messages
    )
    [slots] = [r for r in fake.requests if r.path == "/v2/slots"]
    assert slots.headers["cal-api-version"] == "2024-09-04"
    [booking] = [r for r in fake.requests if r.path == "/v2/bookings"]
    assert booking.body == {
        "start": "2026-03-02T15:00:00Z",
        "eventTypeId": 77,
        "attendee": {
            "name": "Ada Lovelace",
            "email": "ada@example.com",
            "timeZone": "America/New_York",
        },
        "bookingFieldsResponses": {"notes": "first visit"},
    }


async def test_groq_with_sse_mcp_and_google_calendar_refresh(
    engine: Engine, providers: tuple[FakeProviders, str], mcp_url: str
) -> None:
    fake, url = providers
    fake.google_token = "google-access-1"
    tenant = await engine.tenants.organization()
    await credential(engine, tenant, "groq", api_key="gsk_key_4242", base_url=url)
    await credential(
        engine,
        tenant,
        "google_calendar",
        api_key="expired-token",
        base_url=url,
        client_id="client-1",
        client_secret="secret-1",
        refresh_token="refresh-1",
        token_url=f"{url}/token",
        calendar_id="team@example.com",
        slot_minutes=60,
    )
    fake.busy = [{"start": "2026-03-02T00:00:00-05:00", "end": "2026-03-02T09:00:00-05:00"}]
    agent_id = await create_agent(
        engine,
        tenant,
        llm_provider="groq",
        booking_config={"booking_enabled": True, "provider": "google_calendar"},
        mcp_tools=[{"name": "weather", "url": f"{mcp_url}/sse", "transport": "sse"}],
    )
    run = await run_test(
        engine,
        tenant,
        agent_id,
        turns=["Weather please", "Anything available?", "Book it"],
        expectations=[
            {"type": "tool_called", "tool": "get_weather"},
            {"type": "reply_contains", "text": "2026-03-02T09:00:00-05:00", "turn": 2},
            {"type": "reply_contains", "text": "evt123", "turn": 3},
        ],
    )
    assert run["status"] == "passed", (run["results"], run["transcript"], run["error"])
    assert run["provider"] == "groq"
    assert run["usage"]["input_tokens"] > 0  # from x_groq.usage
    [refresh] = [r for r in fake.requests if r.path == "/token"]
    assert refresh.body["client_secret"] == "secret-1"
    [event] = [r for r in fake.requests if r.path.endswith("/events")]
    assert event.path == "/calendar/v3/calendars/team%40example.com/events"
    assert event.headers["authorization"] == "Bearer google-access-2"
    assert event.body["end"]["dateTime"] == "2026-03-02T11:00:00-05:00"


async def test_provider_refusals_and_outages_are_typed_errors(
    engine: Engine, providers: tuple[FakeProviders, str]
) -> None:
    fake, url = providers
    tenant = await engine.tenants.organization()
    await credential(engine, tenant, "openai", api_key="sk-wrong-0000", base_url=url + "/v1")
    agent_id = await create_agent(engine, tenant)
    fake.failures = [401]
    refused = await run_test(engine, tenant, agent_id, turns=["hi"], expectations=[{"type": "end"}])
    assert refused["status"] == "error"
    assert refused["error"]["code"] == "llm_rejected"
    assert refused["error"]["status"] == 401
    assert refused["transcript"][1]["text"] is None
    fake.failures = [503, 503, 503]
    down = await run_test(
        engine, tenant, agent_id, turns=["hi", "again"], expectations=[{"type": "end"}]
    )
    assert down["status"] == "error"
    assert down["error"]["code"] == "llm_unavailable"
    assert down["transcript"][-1]["action"] == {"kind": "handoff", "reason": "llm_unavailable"}
    assert len(down["transcript"]) == 2  # nothing said, nothing more asked


async def test_concurrent_conversations_are_limited(
    engine: Engine, backend: tuple[str, str | None]
) -> None:
    tenant = await engine.tenants.organization()
    agent_id = await create_agent(engine, tenant)
    redis = Redis.from_url(backend[1]) if backend[1] else None
    limits = ConversationLimits(SimpleNamespace(settings=engine.settings, redis=redis))  # type: ignore[arg-type]
    try:
        async with (
            limits.conversation(tenant.organization_id, "a"),
            limits.conversation(tenant.organization_id, "b"),
        ):
            response = await engine.client.post(
                f"/api/v1/agents/{agent_id}/tests",
                json={"turns": ["hi"], "expectations": [{"type": "end"}]},
                headers=tenant.headers,
            )
            assert response.status_code == 429
            body = response.json()
            assert body["error"] == "rate_limit_exceeded"
            assert body["retry_after"] == 60
            assert "concurrent AI conversations" in body["message"]
            assert int(response.headers["retry-after"]) >= 1
    finally:
        if redis is not None:
            await redis.aclose()
    after = await engine.client.post(
        f"/api/v1/agents/{agent_id}/tests",
        json={"turns": ["hi"], "expectations": [{"type": "end"}]},
        headers=tenant.headers,
    )
    assert after.status_code == 201


DISPATCH_CALL = """
mutation($input: DispatchCallInput!) {
  dispatchCall(input: $input) { callLog { id } errors { code message field } }
}"""


async def test_calls_wait_for_a_free_ai_conversation(
    engine: Engine, backend: tuple[str, str | None]
) -> None:
    """A call is an AI conversation: while the organization holds all of them, POST /calls
    and dispatchCall answer 429 (the documented body) and log nothing; another organization
    is not affected, and a freed slot lets the call through."""
    tenant = await engine.tenants.organization()
    other = await engine.tenants.organization()
    agent_id = await create_agent(engine, tenant)
    other_agent = await create_agent(engine, other)
    call = {"agent_id": agent_id, "to_number": "+14155550123"}
    redis = Redis.from_url(backend[1]) if backend[1] else None
    limits = ConversationLimits(SimpleNamespace(settings=engine.settings, redis=redis))  # type: ignore[arg-type]
    try:
        async with (
            limits.conversation(tenant.organization_id, "a"),
            limits.conversation(tenant.organization_id, "b"),
        ):
            response = await engine.client.post("/api/v1/calls", json=call, headers=tenant.headers)
            assert response.status_code == 429, response.text
            assert response.json() == {
                "error": "rate_limit_exceeded",
                "message": "Too many concurrent AI conversations for this organization; "
                "retry later.",
                "retry_after": 60,
            }
            assert int(response.headers["retry-after"]) >= 1
            body = await graphql(
                engine.client,
                DISPATCH_CALL,
                {"input": {"agentId": agent_id, "toNumber": "+14155550123"}},
                tenant.headers,
            )
            assert body["data"]["dispatchCall"] is None
            assert body["errors"][0]["extensions"]["code"] == "rate_limit_exceeded"
            assert "concurrent AI conversations" in body["errors"][0]["message"]
            logs = await engine.client.get("/api/v1/call-logs", headers=tenant.headers)
            assert logs.json()["total"] == 0
            # An unknown agent is still the agents' 404, before any limit.
            unknown = {**call, "agent_id": "00000000-0000-4000-8000-000000000000"}
            missing = await engine.client.post(
                "/api/v1/calls", json=unknown, headers=tenant.headers
            )
            assert missing.status_code == 404
            elsewhere = await engine.client.post(
                "/api/v1/calls", json={**call, "agent_id": other_agent}, headers=other.headers
            )
            assert elsewhere.status_code == 201, elsewhere.text
    finally:
        if redis is not None:
            await redis.aclose()
    after = await engine.client.post("/api/v1/calls", json=call, headers=tenant.headers)
    assert after.status_code == 201, after.text
