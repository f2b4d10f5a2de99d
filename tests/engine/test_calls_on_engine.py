"""Test-mode calls answered by the conversation engine on a real model (the OpenAI SDK
against the local fake): the model's words in the transcript, the events of its tools and
replies, the call's cost; and a model that stays down hands the call off, saying nothing
invented. SQLite and PostgreSQL, through the worker."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.calls.test_calls_engine import call_log, create_agent, dispatch, ended
from tests.conftest import Tenant, fresh_database, graphql
from tests.engine.fakes import FakeProviders, running_providers
from tests.webhooks.receiver import running_receiver
from tests.webhooks.test_delivery_engine import Engine, running_engine

EVENTS = ["ai.reply.generated", "ai.tool.executed", "agent.handoff"]


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def committed_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    with fresh_database(request.param, tmp_path_factory.mktemp("llm_calls"), "sb_llm_calls") as url:
        yield url


@pytest.fixture(scope="module")
def providers() -> Iterator[tuple[FakeProviders, str]]:
    with running_providers() as running:
        yield running


@pytest.fixture
async def engine(committed_url: str, tmp_path: Path) -> AsyncIterator[Engine]:
    async with running_engine(
        committed_url,
        tmp_path,
        llm_retry_backoff_seconds=0.0,
        storage_url=f"file://{tmp_path / 'o'}",
    ) as running:
        yield running


async def play_call(
    engine: Engine, tenant: Tenant, agent_id: str, script: list[str], events: int
) -> tuple[dict[str, Any], dict[str, Any], list[Any]]:
    """A test-mode call of `script`: its start, its ended log and the first `events`
    webhook deliveries of the engine's events."""
    with running_receiver() as hooks:
        await engine.subscribe(tenant, f"{hooks.url}/hook", EVENTS)
        started = await dispatch(
            engine, tenant, agent_id=agent_id, to_number="+14155550123", metadata={"script": script}
        )
        log = await ended(engine, tenant, started["id"])
        received = await asyncio.to_thread(hooks.wait_for, events, 15.0)
    return started, log, received


async def test_a_test_call_on_the_model(
    engine: Engine, providers: tuple[FakeProviders, str]
) -> None:
    fake, url = providers
    fake.reset()
    tenant = await engine.tenants.organization()
    response = await engine.client.put(
        "/api/v1/provider-credentials/openai",
        json={"api_key": "sk-proj-call-0001", "base_url": url + "/v1"},
        headers=tenant.headers,
    )
    assert response.status_code == 200
    agent_id = await create_agent(engine, tenant)
    started, log, received = await play_call(
        engine, tenant, agent_id, ["Hello there", "Can I speak to a person?"], 4
    )
    texts = [segment["text"] for segment in log["transcript"]]
    assert texts == [
        "Hi, this is Ava.",
        "Hello there",
        "Hello! How can I help you today?",
        "Can I speak to a person?",
        "Of course. Let me connect you with a member of our team. Please hold.",
    ]
    assert log["status"] == "completed"
    # Two model requests (the handoff ends its turn at once), 120 in / 30 out each.
    assert log["cost"] == pytest.approx(2 * (120 * 0.15 + 30 * 0.60) / 1_000_000)
    assert "handed off" in log["summary"]
    tokens = await graphql(
        engine.client,
        "query One($id: ID!) { callLog(id: $id) { inputTokens outputTokens } }",
        {"id": started["id"]},
        tenant.headers,
    )
    assert tokens["data"]["callLog"] == {"inputTokens": 240, "outputTokens": 60}
    by_type = {delivery.json["type"]: delivery.json["data"] for delivery in received}
    reply = by_type["ai.reply.generated"]
    assert (reply["source"], reply["provider"], reply["model"]) == ("llm", "openai", "gpt-4o-mini")
    assert reply["usage"] == {"input_tokens": 120, "output_tokens": 30}
    assert reply["call_log_id"] == started["id"]
    tool = by_type["ai.tool.executed"]
    assert (tool["name"], tool["arguments"]) == (
        "transfer_to_human",
        {"reason": "the customer asked for a person"},
    )
    assert "sk-proj-call-0001" not in str(received[0].body)
    assert by_type["agent.handoff"]["reason"] == "the customer asked for a person"
    # What the agent said while handing off is a generated reply too, before the handoff.
    kinds = Counter(delivery.json["type"] for delivery in received)
    assert kinds == {"ai.reply.generated": 2, "ai.tool.executed": 1, "agent.handoff": 1}
    said = [d.json["data"]["reply"] for d in received if d.json["type"] == "ai.reply.generated"]
    assert texts[-1] in said


async def test_a_model_that_stays_down_hands_off(
    engine: Engine, providers: tuple[FakeProviders, str]
) -> None:
    fake, url = providers
    fake.reset()
    fake.failures = [500] * 3
    tenant = await engine.tenants.organization()
    agent_id = await create_agent(engine, tenant, llm_base_url=url + "/v1")
    started, log, [handoff] = await play_call(
        engine, tenant, agent_id, ["Hello there", "Anyone?"], 1
    )
    assert [s["speaker"] for s in log["transcript"]] == ["agent", "caller"]
    assert handoff.json["type"] == "agent.handoff"
    assert handoff.json["data"]["reason"] == "llm_unavailable"
    assert handoff.json["data"]["error"]["code"] == "llm_unavailable"
    assert "authorization" not in fake.model_requests()[0].headers  # no key: none sent
    assert (await call_log(engine, tenant, started["id"]))["cost"] == 0
