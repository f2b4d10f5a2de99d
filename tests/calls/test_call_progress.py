"""callProgress(id) over graphql-transport-ws: the call's current state, then its steps as
the worker plays the simulated call, until call.completed ends the subscription."""

from __future__ import annotations

from typing import Any

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
