"""Calls end to end: REST dispatch → outbox → Dramatiq worker (StubBroker) → simulator or the
real carrier client (against a local Twilio-format carrier) → status handler → call log and
signed webhook events. Runs on a committed SQLite file and PostgreSQL database."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
from collections.abc import AsyncIterator, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from app.auth.service import create_api_key
from app.calls.telephony import STATUS_PATH
from tests.calls.fake_carrier import ACCOUNT_SID, AUTH_TOKEN, RunningCarrier, signed_status
from tests.conftest import TEST_SECRET, Tenant, fresh_database
from tests.webhooks.receiver import Answer, running_receiver
from tests.webhooks.test_delivery_engine import Engine, eventually, running_engine

PUBLIC_URL = "https://switchboard.example.com"
CALL_EVENTS = [
    "call.started",
    "ai.reply.generated",
    "ai.tool.executed",
    "agent.handoff",
    "call.completed",
]


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def committed_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    with fresh_database(request.param, tmp_path_factory.mktemp("calls"), "sb_calls") as url:
        yield url


@pytest.fixture(scope="module")
def carrier() -> Iterator[RunningCarrier]:
    with RunningCarrier() as running:
        yield running


@pytest.fixture
async def engine(
    committed_url: str, tmp_path: Path, carrier: RunningCarrier
) -> AsyncIterator[Engine]:
    async with running_engine(
        committed_url,
        tmp_path,
        telephony_api_url=carrier.url,
        telephony_account_sid=ACCOUNT_SID,
        telephony_auth_token=AUTH_TOKEN,
        telephony_public_url=PUBLIC_URL,
        agent_tool_timeout_seconds=2.0,
        storage_url=f"file://{tmp_path / 'objects'}",
    ) as running:
        carrier.carrier.requests.clear()
        yield running


async def live_key(engine: Engine, tenant: Tenant) -> Tenant:
    """A live full-access key; written under the write lock taken up front, as the app
    writes (a read-then-write SQLite transaction loses to the worker's concurrent writes)."""
    async with engine.sessionmaker() as session:
        if session.get_bind().dialect.name == "sqlite":
            await session.connection(execution_options={"sqlite_begin": "IMMEDIATE"})
        created = await create_api_key(
            session,
            tenant.organization_id,
            name="live",
            scopes=["full_access"],
            secret_key=TEST_SECRET,
            livemode=True,
        )
        await session.commit()
    return Tenant(tenant.organization_id, created.secret, created.key.id)


async def create_agent(engine: Engine, tenant: Tenant, **config: Any) -> str:
    response = await engine.client.post(
        "/api/v1/agents",
        json={"name": "Ava", "agent_config": {"welcome_message": "Hi, this is Ava.", **config}},
        headers=tenant.headers,
    )
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


async def dispatch(engine: Engine, tenant: Tenant, **body: Any) -> dict[str, Any]:
    response = await engine.client.post("/api/v1/calls", json=body, headers=tenant.headers)
    assert response.status_code == 201, response.text
    result: dict[str, Any] = response.json()
    return result


async def call_log(engine: Engine, tenant: Tenant, call_log_id: str) -> dict[str, Any]:
    response = await engine.client.get(f"/api/v1/call-logs/{call_log_id}", headers=tenant.headers)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


async def ended(
    engine: Engine, tenant: Tenant, call_log_id: str, seconds: float = 15.0
) -> dict[str, Any]:
    found: dict[str, Any] = {}

    async def check() -> bool:
        found.update(await call_log(engine, tenant, call_log_id))
        return found["status"] != "in-progress"

    await eventually(check, seconds)
    return found


@pytest.mark.parametrize(
    ("number", "status"),
    [("+15005550002", "busy"), ("+15005550003", "no-answer"), ("+15005550004", "failed")],
)
async def test_magic_numbers_end_the_call(engine: Engine, number: str, status: str) -> None:
    tenant = await engine.tenants.organization()
    agent_id = await create_agent(engine, tenant)
    started = await dispatch(engine, tenant, agent_id=agent_id, to_number=number)
    assert started["status"] == "in-progress"
    assert started["direction"] == "outbound"
    assert started["livemode"] is False
    assert started["agent_id"] == agent_id
    assert started["from_number"] == "+15005550006"
    log = await ended(engine, tenant, started["id"])
    assert log["status"] == status
    assert log["duration_seconds"] == 0
    assert log["transcript"] == []
    assert log["cost"] == 0
    assert log["call_id"].startswith("CA")
    assert log["ended_at"] is not None


async def test_answered_call_completes_with_transcript_and_never_reaches_the_carrier(
    engine: Engine, carrier: RunningCarrier
) -> None:
    tenant = await engine.tenants.organization()
    agent_id = await create_agent(engine, tenant)
    started = await dispatch(engine, tenant, agent_id=agent_id, to_number="+1 (415) 555-0123")
    assert started["to_number"] == "+14155550123"
    log = await ended(engine, tenant, started["id"])
    assert log["status"] == "completed"
    assert log["duration_seconds"] > 0
    # The simulator plays the call out in a moment, on its own clock: its times agree.
    started_at, ended_at = (datetime.fromisoformat(log[k]) for k in ("started_at", "ended_at"))
    assert (ended_at - started_at).total_seconds() == log["duration_seconds"]
    assert log["transcript"][-1]["timestamp"] <= log["duration_seconds"]
    assert log["cost"] == 0
    assert log["summary"]
    assert log["transcript"][0] == {"speaker": "agent", "text": "Hi, this is Ava.", "timestamp": 0}
    speakers = {segment["speaker"] for segment in log["transcript"]}
    assert speakers == {"agent", "caller"}
    stamps = [segment["timestamp"] for segment in log["transcript"]]
    assert stamps == sorted(stamps)
    # The carrier client is configured (live settings point at the fake), yet a test key's
    # call never reaches it.
    assert carrier.carrier.requests == []


async def indexed_document(engine: Engine, tenant: Tenant, name: str, text: str) -> str:
    response = await engine.client.post(
        "/api/v1/knowledge-base/upload",
        files={"file": (name, text.encode(), "text/plain")},
        headers=tenant.headers,
    )
    assert response.status_code == 201, response.text
    document_id = str(response.json()["id"])

    async def ready() -> bool:
        found = await engine.client.get(
            f"/api/v1/knowledge-base/{document_id}", headers=tenant.headers
        )
        return bool(found.json()["index_status"] == "ready")

    await eventually(ready)
    return document_id


HOURS_FACT = "Our support line is open Monday to Friday from 8 am to 6 pm."


async def test_events_of_a_simulated_call_arrive_signed(engine: Engine) -> None:
    tenant = await engine.tenants.organization()
    other = await engine.tenants.organization("Globex")
    await indexed_document(engine, other, "other.txt", "The support line is open on Sundays.")
    document_id = await indexed_document(
        engine,
        tenant,
        "support.txt",
        f"Welcome to Acme. {HOURS_FACT} Refunds are processed within five business days.",
    )
    with running_receiver() as tool_server, running_receiver() as hooks:
        tool_server.default = Answer(body=b'{"answer": "Order 1234 shipped on Monday."}')
        agent_id = await create_agent(
            engine,
            tenant,
            custom_tools=[
                {
                    "name": "order_status",
                    "description": "Look up where an order is",
                    "url": f"{tool_server.url}/orders",
                    "parameters": {
                        "type": "object",
                        "properties": {"order_id": {"type": "string"}},
                        "required": ["order_id"],
                    },
                }
            ],
        )
        subscription = await engine.subscribe(tenant, f"{hooks.url}/hook", CALL_EVENTS)
        started = await dispatch(
            engine,
            tenant,
            agent_id=agent_id,
            to_number="+14155550123",
            metadata={
                "script": [
                    "When is the support line open?",
                    "Where is my order 1234?",
                    "Can I talk to a real person please?",
                ]
            },
        )
        log = await ended(engine, tenant, started["id"])
        received = await asyncio.to_thread(hooks.wait_for, 7, 15.0)
        [tool_request] = tool_server.requests

    texts = [segment["text"] for segment in log["transcript"]]
    assert HOURS_FACT in texts  # retrieved from this organization's document only
    assert "Sundays" not in " ".join(texts)
    assert "Order 1234 shipped on Monday." in texts
    assert log["transcript"][-1]["speaker"] == "agent"
    assert "handed off" in log["summary"]
    assert "order_status" in log["summary"]
    assert orjson.loads(tool_request.body) == {"order_id": "1234"}

    by_type: dict[str, dict[str, Any]] = {}
    replies: list[dict[str, Any]] = []
    for delivery in received:
        expected = hmac.new(subscription.secret.encode(), delivery.body, hashlib.sha256)
        assert delivery.headers["x-service-signature"] == f"sha256={expected.hexdigest()}"
        by_type[delivery.json["type"]] = delivery.json
        if delivery.json["type"] == "ai.reply.generated":
            replies.append(delivery.json["data"])
    # Three answers (the last one said while handing off), a tool, the handoff, start and end.
    assert len(received) == 7
    assert len(replies) == 3
    assert set(by_type) == set(CALL_EVENTS)
    assert by_type["call.started"]["data"]["status"] == "in-progress"
    assert by_type["call.completed"]["data"]["status"] == "completed"
    assert by_type["call.completed"]["data"]["id"] == started["id"]
    tool_event = by_type["ai.tool.executed"]["data"]
    assert tool_event["tool"] == "order_status"
    assert tool_event["success"] is True
    assert tool_event["result"] == "Order 1234 shipped on Monday."
    assert tool_event["call_log_id"] == started["id"]
    assert by_type["agent.handoff"]["data"]["reason"] == "Can I talk to a real person please?"
    by_source = {reply["source"]: reply for reply in replies}
    assert by_source["tool"]["reply"] == "Order 1234 shipped on Monday."
    assert by_source["knowledge_base"]["reply"] == HOURS_FACT
    assert by_source["knowledge_base"]["document_id"] == document_id
    assert all(event["livemode"] is False for event in by_type.values())


async def test_a_failing_tool_is_reported_and_the_call_still_completes(engine: Engine) -> None:
    tenant = await engine.tenants.organization()
    with running_receiver() as tool_server:
        tool_server.default = Answer(status=500, body=b"boom")
        agent_id = await create_agent(
            engine,
            tenant,
            custom_tools=[
                {"name": "order_status", "description": "Orders", "url": tool_server.url}
            ],
        )
        started = await dispatch(
            engine,
            tenant,
            agent_id=agent_id,
            to_number="+14155550123",
            metadata={"script": ["What is the status of my order 77?"]},
        )
        log = await ended(engine, tenant, started["id"])
    assert log["status"] == "completed"
    assert "I'm sorry, I couldn't look that up right now." in [
        segment["text"] for segment in log["transcript"]
    ]


async def live_call(engine: Engine, tenant: Tenant, carrier: RunningCarrier) -> dict[str, Any]:
    """A live key's call, placed with the (fake) carrier."""
    live = await live_key(engine, tenant)
    agent_id = await create_agent(engine, live)
    started = await dispatch(
        engine, live, agent_id=agent_id, to_number="+14155550123", from_number="+14155550100"
    )
    assert started["livemode"] is True

    async def placed() -> bool:
        return (await call_log(engine, live, started["id"]))["call_id"].startswith("CA")

    await eventually(placed)
    return {**(await call_log(engine, live, started["id"])), "key": live}


async def post_status(
    engine: Engine, call: dict[str, Any], params: dict[str, str], *, token: str = AUTH_TOKEN
) -> int:
    path = f"{STATUS_PATH}?call_log_id={call['id']}"
    form, headers = signed_status(PUBLIC_URL + path, params, token)
    response = await engine.client.post(path, data=form, headers=headers)
    return response.status_code


def callback(call: dict[str, Any], status: str, **extra: str) -> dict[str, str]:
    return {
        "CallSid": call["call_id"],
        "AccountSid": ACCOUNT_SID,
        "From": call["from_number"],
        "To": call["to_number"],
        "CallStatus": status,
        "Direction": "outbound-api",
        "ApiVersion": "2010-04-01",
        **extra,
    }


async def test_live_call_goes_to_the_carrier_and_follows_signed_callbacks(
    engine: Engine, carrier: RunningCarrier
) -> None:
    tenant = await engine.tenants.organization()
    call = await live_call(engine, tenant, carrier)
    live: Tenant = call["key"]
    placed = carrier.carrier.calls[call["call_id"]]
    assert placed["to"] == "+14155550123"
    assert placed["status_callback"] == f"{PUBLIC_URL}{STATUS_PATH}?call_log_id={call['id']}"

    assert await post_status(engine, call, callback(call, "ringing")) == 204
    assert (await call_log(engine, live, call["id"]))["status"] == "in-progress"

    # A forged or tampered callback changes nothing.
    assert await post_status(engine, call, callback(call, "busy"), token="not-the-token") == 403
    response = await engine.client.post(
        f"{STATUS_PATH}?call_log_id={call['id']}", data=callback(call, "busy")
    )
    assert response.status_code == 403
    assert (await call_log(engine, live, call["id"]))["status"] == "in-progress"

    carrier.carrier.finish(
        call["call_id"], duration=37, price="-0.02100", recording_sid="RE" + "2" * 32
    )
    done = callback(call, "completed", CallDuration="37")
    assert await post_status(engine, call, done) == 204
    # Late and repeated callbacks never move a finished call back.
    assert await post_status(engine, call, callback(call, "in-progress")) == 204
    assert await post_status(engine, call, callback(call, "busy")) == 204
    log = await call_log(engine, live, call["id"])
    assert log["status"] == "completed"
    assert log["duration_seconds"] == 37

    async def priced() -> bool:
        found = await call_log(engine, live, call["id"])
        return found["cost"] > 0 and found["recording_url"] is not None

    await eventually(priced)
    log = await call_log(engine, live, call["id"])
    assert log["cost"] == pytest.approx(0.021)
    assert log["recording_url"].endswith(f"/Recordings/{'RE' + '2' * 32}.mp3")
    assert log["status"] == "completed"


async def test_callbacks_for_other_calls_are_refused(
    engine: Engine, carrier: RunningCarrier
) -> None:
    tenant = await engine.tenants.organization()
    call = await live_call(engine, tenant, carrier)
    wrong_sid = {**call, "call_id": "CA" + "9" * 32}
    assert await post_status(engine, call, callback(wrong_sid, "completed")) == 404
    unknown = {**call, "id": "00000000-0000-4000-8000-000000000000"}
    assert await post_status(engine, unknown, callback(call, "completed")) == 404
    assert await post_status(engine, call, callback(call, "exploded")) == 400

    # A test-mode call is never moved by the real carrier's callbacks.
    agent_id = await create_agent(engine, tenant)
    test_call = await dispatch(engine, tenant, agent_id=agent_id, to_number="+15005550002")
    await ended(engine, tenant, test_call["id"])
    test_log = await call_log(engine, tenant, test_call["id"])
    assert await post_status(engine, test_log, callback(test_log, "completed")) == 404


async def test_carrier_refusal_fails_the_call(engine: Engine, carrier: RunningCarrier) -> None:
    tenant = await engine.tenants.organization()
    live = await live_key(engine, tenant)
    agent_id = await create_agent(engine, live)
    started = await dispatch(
        engine, live, agent_id=agent_id, to_number="+15005550001", from_number="+14155550100"
    )
    log = await ended(engine, live, started["id"])
    assert log["status"] == "failed"
    assert any(path.endswith("/Calls.json") for _m, path, _f in carrier.carrier.requests)
