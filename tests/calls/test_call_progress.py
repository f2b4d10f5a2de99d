"""callProgress(id) over graphql-transport-ws: the call's current state, then its steps as
the worker plays the simulated call, until call.completed ends the subscription."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

import pytest

from app.calls import service as calls_service
from app.calls.schemas import CallLogRecord
from app.calls.service import record_call_log
from app.core.jsonutil import dumps
from tests.conftest import Tenant
from tests.events.test_graphql_subscription import (  # noqa: F401 (fixtures)
    Harness,
    Socket,
    committed_url,
    harness,
)

PROGRESS = """subscription($id: ID!) { callProgress(id: $id) { type status data } }"""


async def messages_until_complete(socket: Socket) -> list[dict[str, Any]]:
    steps = []
    while True:
        message = await socket.receive()
        if message["type"] == "complete":
            return steps
        assert message["type"] == "next", message
        assert "errors" not in message["payload"], message
        steps.append(message["payload"]["data"]["callProgress"])


async def test_progress_of_a_simulated_call(harness: Harness) -> None:  # noqa: F811
    tenant = await harness.tenants.organization()
    agent = await harness.client.post(
        "/api/v1/agents",
        json={"name": "Ava", "agent_config": {"welcome_message": "Hi"}},
        headers=tenant.headers,
    )
    agent_id = agent.json()["id"]
    async with harness.socket() as socket:
        ack = await socket.init({"Authorization": f"Bearer {tenant.api_key}"})
        assert ack == {"type": "connection_ack"}
        dispatched = await harness.client.post(
            "/api/v1/calls",
            json={
                "agent_id": agent_id,
                "to_number": "+14155550123",
                "metadata": {"script": ["Can I talk to a real person?"]},
            },
            headers=tenant.headers,
        )
        call_id = dispatched.json()["id"]
        await socket.subscribe(PROGRESS, {"id": call_id})
        steps = await messages_until_complete(socket)

        # Finished calls answer their state once and complete.
        await socket.subscribe(PROGRESS, {"id": call_id}, op="2")
        again = await messages_until_complete(socket)

    assert steps[0]["type"] == "snapshot"
    assert steps[0]["data"]["id"] == call_id
    assert steps[-1]["status"] == "completed"
    assert steps[-1]["data"]["transcript"]
    if steps[0]["status"] == "in-progress":  # subscribed before the worker ended the call
        types = [step["type"] for step in steps]
        assert types[-1] in ("call.completed", "snapshot")
    assert [(step["type"], step["status"]) for step in again] == [("snapshot", "completed")]


async def test_unknown_or_foreign_calls_and_scopes(harness: Harness) -> None:  # noqa: F811
    tenant = await harness.tenants.organization()
    other = await harness.tenants.organization("Globex")
    agent = await harness.client.post("/api/v1/agents", json={"name": "Ava"}, headers=other.headers)
    foreign = await harness.client.post(
        "/api/v1/calls",
        json={"agent_id": agent.json()["id"], "to_number": "+15005550002"},
        headers=other.headers,
    )
    agent_reader = await harness.tenants.key(tenant, ["agents:read"])
    async with harness.socket() as socket:
        await socket.init({"Authorization": f"Bearer {tenant.api_key}"})
        await socket.subscribe(PROGRESS, {"id": foreign.json()["id"]})
        refused = await socket.receive()
    assert refused["type"] == "error"
    assert refused["payload"][0]["extensions"]["code"] == "not_found"

    async with harness.socket() as socket:
        await socket.init({"Authorization": f"Bearer {agent_reader.api_key}"})
        await socket.subscribe(PROGRESS, {"id": foreign.json()["id"]})
        forbidden = await socket.receive()
    assert forbidden["type"] in ("error", "next")
    payload = forbidden["payload"]
    errors = payload if forbidden["type"] == "error" else payload["errors"]
    assert errors[0]["extensions"]["code"] == "insufficient_scope"


@dataclass(frozen=True)
class _Owner:
    organization_id: str
    livemode: bool


async def _in_progress_call(harness: Harness, tenant: Tenant, *, livemode: bool) -> str:  # noqa: F811
    """A call log in progress that no worker plays (nothing moves it but the test)."""
    async with harness.sessionmaker() as session:
        call_log = await record_call_log(
            session,
            _Owner(tenant.organization_id, livemode),
            CallLogRecord(
                call_id="CA" + uuid.uuid4().hex,
                from_number="+14155550100",
                to_number="+14155550123",
                direction="outbound",
                status="in-progress",
            ),
        )
        await session.commit()
    return call_log.id


async def _publish(harness: Harness, tenant: Tenant, type: str, data: dict[str, Any]) -> None:  # noqa: F811
    body = {
        "id": "evt_" + uuid.uuid4().hex,
        "type": type,
        "created_at": "2026-11-25T09:00:00Z",
        "organization_id": tenant.organization_id,
        "livemode": data.get("livemode", False),
        "data": data,
    }
    await harness.stream.publish(tenant.organization_id, dumps(body))


@pytest.mark.parametrize("harness", ["local", "redis"], indirect=True)
async def test_a_step_taken_while_the_snapshot_is_read_is_not_lost(
    harness: Harness,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tenant = await harness.tenants.organization()
    call_id = await _in_progress_call(harness, tenant, livemode=False)
    read_call_log = calls_service.get_call_log

    async def slow_snapshot(session: Any, subject: Any, call_log_id: str) -> Any:
        # The agent speaks while the snapshot is read (a slow database, say).
        step = {"call_log_id": call_log_id, "reply": "Hello!", "livemode": False}
        await _publish(harness, tenant, "ai.reply.generated", step)
        await asyncio.sleep(0.05)
        return await read_call_log(session, subject, call_log_id)

    monkeypatch.setattr(calls_service, "get_call_log", slow_snapshot)
    async with harness.socket() as socket:
        await socket.init({"Authorization": f"Bearer {tenant.api_key}"})
        await socket.subscribe(PROGRESS, {"id": call_id})
        first = await socket.receive()
        assert first["payload"]["data"]["callProgress"]["type"] == "snapshot", first
        monkeypatch.setattr(calls_service, "get_call_log", read_call_log)
        done = {"id": call_id, "status": "completed", "livemode": False}
        await _publish(harness, tenant, "call.completed", done)
        steps = await messages_until_complete(socket)
    assert [(step["type"], step["status"]) for step in steps] == [
        ("ai.reply.generated", "in-progress"),
        ("call.completed", "completed"),
    ]


async def test_call_progress_follows_the_calls_mode(harness: Harness) -> None:  # noqa: F811
    """A test key cannot follow a live call; a live key follows a test-mode call's steps."""
    tenant = await harness.tenants.organization()
    live = await harness.tenants.key(tenant, ["full_access"], livemode=True)
    live_call = await _in_progress_call(harness, tenant, livemode=True)
    async with harness.socket() as socket:
        await socket.init({"Authorization": f"Bearer {tenant.api_key}"})
        await socket.subscribe(PROGRESS, {"id": live_call})
        refused = await socket.receive()
    assert refused["type"] == "error"
    assert refused["payload"][0]["extensions"]["code"] == "livemode_mismatch"

    test_call = await _in_progress_call(harness, tenant, livemode=False)
    async with harness.socket() as socket:
        await socket.init({"Authorization": f"Bearer {live.api_key}"})
        await socket.subscribe(PROGRESS, {"id": test_call})
        first = await socket.receive()
        assert first["payload"]["data"]["callProgress"]["type"] == "snapshot", first
        await _publish(harness, tenant, "call.completed", {"id": test_call, "status": "completed"})
        steps = await messages_until_complete(socket)
    assert [step["type"] for step in steps] == ["call.completed"]


class StreamLostAfterSubscribing:
    """An event stream that subscribes, then loses its connection (Redis gone, say) with a
    message that must not reach clients."""

    async def publish(self, organization_id: str, body: bytes) -> None:
        raise AssertionError("not used")

    async def publish_many(self, messages: list[tuple[str, bytes]]) -> None:
        raise AssertionError("not used")

    async def _lost(self) -> AsyncGenerator[dict[str, Any], None]:
        raise ConnectionError("redis://internal-host:6379 went away")
        yield {}  # a generator, like the real streams

    def subscribe(self, organization_id: str) -> AsyncGenerator[dict[str, Any], None]:
        return self._lost()

    async def open(self, organization_id: str) -> AsyncGenerator[dict[str, Any], None]:
        return self._lost()

    async def aclose(self) -> None:
        pass


async def test_a_lost_event_stream_ends_the_subscription_with_a_clean_error(
    harness: Harness,  # noqa: F811
) -> None:
    """The snapshot arrives, then the stream fails: the subscription ends with
    `stream_interrupted`, never the stream's own message, and frees its subscription slot."""
    tenant = await harness.tenants.organization()
    call_id = await _in_progress_call(harness, tenant, livemode=False)
    harness.resources.event_stream = StreamLostAfterSubscribing()
    async with harness.socket() as socket:
        await socket.init({"Authorization": f"Bearer {tenant.api_key}"})
        await socket.subscribe(PROGRESS, {"id": call_id})
        first = await socket.receive()
        assert first["payload"]["data"]["callProgress"]["type"] == "snapshot", first
        message = await socket.receive()
        assert await socket.receive() == {"id": "1", "type": "complete"}
    assert message["type"] == "next"
    [error] = message["payload"]["errors"]
    assert error["message"] == "The event stream was interrupted; subscribe again"
    assert error["extensions"] == {"code": "stream_interrupted"}
    assert "internal-host" not in json.dumps(message)
    assert harness.resources.subscriptions.open_count(tenant.organization_id) == 0
