"""Call analysis end to end: a call ends → the analysis job (Dramatiq, StubBroker or Redis) →
the engine (the agent's model through a local OpenAI-format server, or the offline
extractor) → `analysis` on the call log, read over REST and GraphQL; re-runs; model
failures and answers that do not match the schema recorded as the analysis's error."""

from __future__ import annotations

from typing import Any

from tests.calls.test_call_analysis import CRITERIA, SCHEMA, TRANSCRIPT
from tests.calls.test_calls_engine import create_agent
from tests.conftest import Tenant, graphql
from tests.engine.fakes import ANALYSIS_ANSWER, FakeProviders
from tests.engine.fixtures import backend_fixture, engine_fixture
from tests.engine.fixtures import providers as providers
from tests.webhooks.test_delivery_engine import Engine, eventually

SCRIPT = [segment["text"] for segment in TRANSCRIPT if segment["speaker"] == "caller"]
MODEL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "customer_name": {"type": "string"},
        "wants_callback": {"type": "boolean"},
        "plan": {"type": "string", "enum": ["basic", "premium"]},
    },
    "required": ["customer_name"],
}


backend = backend_fixture("analysis")
engine = engine_fixture(
    llm_retry_backoff_seconds=0.0, llm_max_retries=1, engine_turn_deadline_seconds=10.0
)


async def call_log(engine: Engine, tenant: Tenant, call_log_id: str) -> dict[str, Any]:
    response = await engine.client.get(f"/api/v1/call-logs/{call_log_id}", headers=tenant.headers)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def analysed(
    engine: Engine, tenant: Tenant, call_log_id: str, after: str | None = None
) -> dict[str, Any]:
    """The call log once its analysis (requested after `after`) is no longer pending."""
    found: dict[str, Any] = {}

    async def done() -> bool:
        found.update(await call_log(engine, tenant, call_log_id))
        analysis = found.get("analysis") or {}
        return analysis.get("status") in ("completed", "failed") and (
            after is None or analysis.get("requested_at") != after
        )

    await eventually(done, 20.0)
    return found


async def finished_call(engine: Engine, tenant: Tenant, agent_id: str) -> dict[str, Any]:
    response = await engine.client.post(
        "/api/v1/calls",
        json={"agent_id": agent_id, "to_number": "+14155550123", "metadata": {"script": SCRIPT}},
        headers=tenant.headers,
    )
    assert response.status_code == 201, response.text
    started: dict[str, Any] = response.json()
    assert started["analysis"] is None
    return await analysed(engine, tenant, started["id"])


async def test_offline_analysis_after_a_call(engine: Engine) -> None:
    tenant = await engine.tenants.organization()
    agent_id = await create_agent(engine, tenant, analysis_schema=SCHEMA, success_criteria=CRITERIA)
    log = await finished_call(engine, tenant, agent_id)
    assert log["status"] == "completed"
    analysis = log["analysis"]
    assert analysis["status"] == "completed", analysis
    assert analysis["extractor"] == "offline"
    assert analysis["data"]["email"] == "ada@example.com"
    assert analysis["data"]["customer_name"] == "Ada Lovelace"
    assert analysis["data"]["wants_callback"] is True
    assert "plan" in analysis["unfilled"]
    assert analysis["success"] is None
    assert analysis["criteria"] == CRITERIA
    assert "not judged" in analysis["reason"]
    assert analysis["error"] is None
    assert analysis["analyzed_at"].endswith("Z")


async def test_an_agent_without_analysis_settings_gets_none(engine: Engine) -> None:
    tenant = await engine.tenants.organization()
    agent_id = await create_agent(engine, tenant)
    response = await engine.client.post(
        "/api/v1/calls",
        json={"agent_id": agent_id, "to_number": "+14155550123", "metadata": {"script": SCRIPT}},
        headers=tenant.headers,
    )
    call_log_id = response.json()["id"]

    async def ended() -> bool:
        return (await call_log(engine, tenant, call_log_id))["status"] != "in-progress"

    await eventually(ended, 15.0)
    assert (await call_log(engine, tenant, call_log_id))["analysis"] is None


async def test_model_analysis_then_a_failing_model_on_rerun(
    engine: Engine, providers: tuple[FakeProviders, str]
) -> None:
    fake, url = providers
    tenant = await engine.tenants.organization()
    agent_id = await create_agent(
        engine,
        tenant,
        llm_base_url=f"{url}/v1",
        analysis_schema=MODEL_SCHEMA,
        success_criteria=CRITERIA,
    )
    log = await finished_call(engine, tenant, agent_id)
    analysis = log["analysis"]
    assert analysis["status"] == "completed", analysis
    assert analysis["extractor"] == "llm"
    assert analysis["model"] == "gpt-4o-mini"
    assert analysis["data"] == ANALYSIS_ANSWER["data"]
    assert analysis["success"] is True
    assert analysis["reason"] == ANALYSIS_ANSWER["reason"]
    [request] = [
        r.body
        for r in fake.model_requests()
        if any(t["function"]["name"] == "record_call_analysis" for t in r.body.get("tools") or [])
    ]
    [tool] = request["tools"]
    assert tool["function"]["parameters"]["properties"]["data"] == MODEL_SCHEMA
    assert "Caller: My email is ada@example.com." in request["messages"][-1]["content"]
    assert CRITERIA in request["messages"][0]["content"]

    graph = await graphql(
        engine.client,
        "query($id: ID!) { callLog(id: $id) { analysis } }",
        {"id": log["id"]},
        tenant.headers,
    )
    assert graph["data"]["callLog"]["analysis"] == analysis

    # The model fails on every attempt of the re-run: the failure is the analysis's error,
    # the last data stays readable, and nothing answers 5xx.
    fake.failures.extend([500] * 10)
    rerun = await graphql(
        engine.client,
        "mutation($id: ID!) { analyzeCallLog(id: $id) { callLog { analysis } errors { code } } }",
        {"id": log["id"]},
        tenant.headers,
    )
    pending = rerun["data"]["analyzeCallLog"]["callLog"]["analysis"]
    assert pending["status"] == "pending"
    assert pending["data"] == ANALYSIS_ANSWER["data"]
    failed = (await analysed(engine, tenant, log["id"], after=analysis["requested_at"]))["analysis"]
    assert failed["status"] == "failed"
    assert failed["error"]["code"] == "llm_unavailable"
    assert "500" in failed["error"]["message"]
    assert failed["extractor"] == "llm"
    fake.reset()

    # Once the model answers again, a REST re-run completes.
    response = await engine.client.post(
        f"/api/v1/call-logs/{log['id']}/analyze", headers=tenant.headers
    )
    assert response.status_code == 202, response.text
    again = (await analysed(engine, tenant, log["id"], after=failed["requested_at"]))["analysis"]
    assert again["status"] == "completed"
    assert again["success"] is True


async def test_model_data_that_breaks_the_schema_is_recorded_as_an_error(
    engine: Engine, providers: tuple[FakeProviders, str]
) -> None:
    _fake, url = providers
    tenant = await engine.tenants.organization()
    strict = {
        **MODEL_SCHEMA,
        "properties": {**MODEL_SCHEMA["properties"], "order_id": {"type": "string"}},
        "required": ["order_id"],
    }
    agent_id = await create_agent(engine, tenant, llm_base_url=f"{url}/v1", analysis_schema=strict)
    analysis = (await finished_call(engine, tenant, agent_id))["analysis"]
    assert analysis["status"] == "failed"
    assert analysis["error"]["code"] == "invalid_output"
    assert "'order_id' is a required property" in analysis["error"]["message"]
    assert analysis["data"] == ANALYSIS_ANSWER["data"]  # what the model said, for a look
    assert analysis["success"] is None
    assert analysis["criteria"] is None
