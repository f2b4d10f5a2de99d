"""AI replies on WhatsApp end to end: a signed platform webhook → the inbound handler → the
reply job on the engine queue (a real Dramatiq worker: StubBroker on SQLite and PostgreSQL,
RedisBroker on PostgreSQL) → the conversation engine on the OpenAI SDK against the local fake
model (tool calls included) → the reply sent through the channel's governed send path (a
test-mode channel: the simulator) → the conversation message and the events."""

from __future__ import annotations

import asyncio
import itertools
import os
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from app.ai_replies import repository, service
from app.ai_replies import tasks as reply_tasks
from app.ai_replies.models import AiReplyState
from app.ai_replies.service import REPLY_ACTOR, reply_job_id
from app.ai_replies.tasks import reply
from app.events.models import Event
from app.integrations.whatsapp import payloads
from app.kit.outbox import StaleRun
from app.kit.outbox_models import OutboxJob
from app.organizations.service import create_user
from tests.conftest import Tenant, graphql
from tests.conversations.conftest import post_signed
from tests.engine.fakes import FakeProviders
from tests.engine.fixtures import backend_fixture, engine_fixture
from tests.engine.fixtures import providers as providers
from tests.webhooks.receiver import running_receiver
from tests.webhooks.test_delivery_engine import Engine, eventually, running_engine, wait_for
from tests.workers.test_redis_engine import worker_env
from tests.workers.worker_process import WorkerProcess
from workers.runtime import JobRuntime, run_job

APP_SECRET = "meta-app-secret-for-ai-replies"
WABA = "102290129340398"
CUSTOMER = "+14155550100"
BURST = 0.4
GREETING = "Hello! How can I help you today?"
_numbers = itertools.count(1)
_messages = itertools.count(1)


backend = backend_fixture("ai_replies")

SETTINGS: dict[str, Any] = {
    "whatsapp_app_secret": APP_SECRET,
    "llm_retry_backoff_seconds": 0.0,
    "engine_turn_deadline_seconds": 10.0,
    "ai_reply_burst_seconds": BURST,
    "ai_reply_max_wait_seconds": 5.0,
    "job_lease_seconds": 30.0,
    "knowledge_extraction_seconds": 3.0,
}


engine = engine_fixture(**SETTINGS)


class Chat:
    """A tenant, its agent on the fake model, its test-mode channel answered by the agent."""

    def __init__(self, engine: Engine, tenant: Tenant, agent_id: str, channel: dict[str, Any]):
        self.engine = engine
        self.tenant = tenant
        self.agent_id = agent_id
        self.channel = channel

    async def say(
        self,
        text: str | None = None,
        message_id: str | None = None,
        at: float | None = None,
        **part: Any,
    ) -> str:
        """The customer writes (a signed platform webhook; `at`: when they sent it, unix
        seconds); returns the platform message id."""
        message_id = message_id or f"wamid.ai{next(_messages)}"
        payload = self.payload(message_id, text, at, **part)
        response = await post_signed(self.engine.client, payload, APP_SECRET)
        assert response.status_code == 200, response.text
        return message_id

    def payload(
        self, message_id: str, text: str | None, at: float | None = None, **part: Any
    ) -> dict[str, Any]:
        if text is not None:
            return payloads.inbound_text(
                WABA,
                self.channel["phone_number_id"],
                "+14155550142",
                message_id,
                CUSTOMER,
                text,
                profile_name="Ada",
                timestamp=None if at is None else int(at),
            )
        kind, content = next(iter(part.items()))
        message = {
            "from": CUSTOMER.lstrip("+"),
            "id": message_id,
            "timestamp": str(int(at or time.time())),
            "type": kind,
            kind: content,
        }
        return payloads.messages_change(
            WABA,
            self.channel["phone_number_id"],
            "+14155550142",
            contacts=[{"profile": {"name": "Ada"}, "wa_id": CUSTOMER.lstrip("+")}],
            messages=[message],
        )

    async def ticket_id(self) -> str:
        response = await self.engine.client.get(
            "/api/v1/inbox/tickets?status=open", headers=self.tenant.headers
        )
        assert response.status_code == 200, response.text
        assert len(response.json()["data"]) == 1, response.json()
        [ticket] = response.json()["data"]
        return str(ticket["id"])

    async def messages(self, ticket_id: str) -> list[dict[str, Any]]:
        response = await self.engine.client.get(
            f"/api/v1/inbox/tickets/{ticket_id}/messages?limit=100", headers=self.tenant.headers
        )
        assert response.status_code == 200, response.text
        return list(reversed(response.json()["data"]))

    async def replies(self, ticket_id: str) -> list[dict[str, Any]]:
        return [m for m in await self.messages(ticket_id) if m["direction"] == "outbound"]

    async def wait_replies(self, ticket_id: str, count: int) -> list[dict[str, Any]]:
        async def enough() -> bool:
            return len(await self.replies(ticket_id)) >= count

        await eventually(enough, 20.0)
        await self.settled(ticket_id)
        return await self.replies(ticket_id)

    async def settled(self, ticket_id: str) -> None:
        """No reply job waits and nothing is pending on the conversation."""

        async def quiet() -> bool:
            async with self.engine.sessionmaker() as session:
                job = await session.get(OutboxJob, reply_job_id(ticket_id))
                state = await session.get(AiReplyState, ticket_id)
                return job is None and (state is None or not state.pending)

        await eventually(quiet, 20.0)

    async def events(self, event_type: str) -> list[dict[str, Any]]:
        async with self.engine.sessionmaker() as session:
            rows = await session.scalars(
                select(Event)
                .where(
                    Event.organization_id == self.tenant.organization_id,
                    Event.type == event_type,
                )
                .order_by(Event.created_at, Event.id)
            )
            return [dict(row.data) for row in rows]


async def create_agent(engine: Engine, tenant: Tenant, url: str, **config: Any) -> str:
    response = await engine.client.post(
        "/api/v1/agents",
        json={
            "name": "Ava",
            "timezone": "UTC",
            "agent_config": {"llm_base_url": url + "/v1", **config},
        },
        headers=tenant.headers,
    )
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


async def open_chat(engine: Engine, providers: tuple[FakeProviders, str], **config: Any) -> Chat:
    tenant = await engine.tenants.organization()
    agent_id = await create_agent(engine, tenant, providers[1], **config)
    created = await engine.client.post(
        "/api/v1/channels",
        json={
            "display_phone_number": "+14155550142",
            "phone_number_id": f"77{os.getpid()}{next(_numbers):04d}",
            "business_account_id": WABA,
            "access_token": "EAAGtest-token",
        },
        headers=tenant.headers,
    )
    assert created.status_code == 201, created.text
    channel = created.json()
    assert channel["agent_id"] is None
    updated = await engine.client.put(
        f"/api/v1/channels/{channel['id']}", json={"agent_id": agent_id}, headers=tenant.headers
    )
    assert updated.status_code == 200, updated.text
    assert updated.json()["agent_id"] == agent_id
    return Chat(engine, tenant, agent_id, updated.json())


async def test_the_agent_replies_through_the_channel(
    engine: Engine, providers: tuple[FakeProviders, str]
) -> None:
    chat = await open_chat(engine, providers)
    await chat.say("Hello there")
    ticket_id = await chat.ticket_id()
    [reply] = await chat.wait_replies(ticket_id, 1)
    assert (reply["direction"], reply["text"], reply["agent_id"]) == (
        "outbound",
        GREETING,
        chat.agent_id,
    )
    assert reply["status"] in ("sent", "delivered", "read")
    [generated] = await chat.events("ai.reply.generated")
    assert generated["ticket_id"] == ticket_id
    assert generated["message_id"] == reply["id"]
    assert generated["reply"] == GREETING
    assert generated["usage"] == {"input_tokens": 120, "output_tokens": 30}
    assert generated["tool_calls"] == []
    assert generated["latency_ms"] >= 0
    assert (generated["provider"], generated["channel_id"]) == ("openai", chat.channel["id"])
    sent = [e for e in await chat.events("message.sent") if e["id"] == reply["id"]]
    assert [e["agent_id"] for e in sent] == [chat.agent_id]
    # The model read the customer's words after the agent's system prompt.
    request = providers[0].model_requests()[-1].body
    assert request["messages"][-1] == {"role": "user", "content": "Hello there"}
    # GraphQL: the message's author and the channel's agent.
    found = await graphql(
        engine.client,
        "query($id: ID!, $cid: ID!) { ticketMessages(ticketId: $id) { nodes { direction agentId } }"
        " channel(id: $cid) { agentId } }",
        {"id": ticket_id, "cid": chat.channel["id"]},
        chat.tenant.headers,
    )
    assert {"direction": "outbound", "agentId": chat.agent_id} in found["data"]["ticketMessages"][
        "nodes"
    ]
    assert found["data"]["channel"]["agentId"] == chat.agent_id


async def test_a_replys_events_reach_the_webhooks_from_its_own_transaction(
    engine: Engine, providers: tuple[FakeProviders, str]
) -> None:
    """The reply job fans its events out itself, in the transaction that records them: the
    subscriber gets `message.sent` and `ai.reply.generated`, each once, recorded in that order
    (each is delivered on its own, so they may arrive in either)."""
    chat = await open_chat(engine, providers)
    with running_receiver() as receiver:
        await engine.subscribe(
            chat.tenant, f"{receiver.url}/hook", ["message.sent", "ai.reply.generated"]
        )
        await chat.say("Hello there")
        ticket_id = await chat.ticket_id()
        [reply] = await chat.wait_replies(ticket_id, 1)
        received = sorted(
            await wait_for(receiver, 2), key=lambda r: datetime.fromisoformat(r.json["created_at"])
        )
    assert [r.json["type"] for r in received] == ["message.sent", "ai.reply.generated"]
    assert received[0].json["data"]["id"] == reply["id"]
    assert received[1].json["data"]["message_id"] == reply["id"]
    [generated] = await chat.events("ai.reply.generated")
    assert generated["ticket_id"] == ticket_id
    assert len(receiver.of_type("message.sent")) == 1  # delivered once


async def test_replies_deliver_a_worker_threads_worth_at_once(
    engine: Engine, providers: tuple[FakeProviders, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Replies are detached, but each delivery holds a database connection (through a paced
    send): at most `worker_threads` of them run at once, whatever the number of replies."""
    deliver = service.deliver
    running = most = 0

    async def slow_deliver(*args: Any, **kwargs: Any) -> Any:
        nonlocal running, most
        running += 1
        most = max(most, running)
        try:
            await asyncio.sleep(0.2)  # a slow send, its transaction open
            return await deliver(*args, **kwargs)
        finally:
            running -= 1

    monkeypatch.setattr(service, "deliver", slow_deliver)
    chats = [await open_chat(engine, providers) for _ in range(engine.settings.worker_threads + 2)]
    for chat in chats:
        await chat.say("Hello there")
    for chat in chats:
        await chat.wait_replies(await chat.ticket_id(), 1)
    assert 1 <= most <= engine.settings.worker_threads


async def test_one_organization_never_holds_every_delivery_slot(
    engine: Engine, providers: tuple[FakeProviders, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tenant whose deliveries hang (a throttled channel's paced send, its transaction
    open) holds all but one of the worker's delivery slots: another tenant's reply is
    delivered meanwhile, and the hung tenant's replies follow once their sends return."""
    if engine.settings.database_url.startswith("sqlite"):
        pytest.skip(
            "on SQLite a delivery's transaction holds the one write lock: every write waits"
        )
    slots = engine.settings.worker_threads
    assert slots >= 2
    slow, other = await open_chat(engine, providers), await open_chat(engine, providers)
    deliver = service.deliver
    released = threading.Event()
    hung: list[str] = []

    async def hangs_for_one_tenant(*args: Any, **kwargs: Any) -> Any:
        turn = args[2]
        if turn.agent.organization_id == slow.tenant.organization_id:
            hung.append(turn.ticket_id)
            while not released.is_set():  # noqa: ASYNC110 (set from the test's loop)
                await asyncio.sleep(0.01)
        return await deliver(*args, **kwargs)

    async def slots_taken() -> bool:
        return len(hung) >= slots - 1

    monkeypatch.setattr(service, "deliver", hangs_for_one_tenant)
    try:
        for customer in range(slots + 1):  # more of its conversations than there are slots
            payload = payloads.inbound_text(
                WABA,
                slow.channel["phone_number_id"],
                "+14155550142",
                f"wamid.hung{next(_messages)}",
                f"+1415555{customer:04d}",
                "Where is my order?",
                profile_name="Ada",
            )
            response = await post_signed(engine.client, payload, APP_SECRET)
            assert response.status_code == 200, response.text
        await eventually(slots_taken, 20.0)
        await other.say("Hello there")
        [reply] = await other.wait_replies(await other.ticket_id(), 1)
        assert reply["text"] == GREETING
        assert len(hung) == slots - 1  # the last slot stayed free for other tenants
    finally:
        released.set()

    async def all_answered() -> bool:
        return len(await slow.events("ai.reply.generated")) == slots + 1

    await eventually(all_answered, 20.0)


async def test_a_reply_whose_run_lost_the_job_records_nothing(
    engine: Engine, providers: tuple[FakeProviders, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another run claimed the reply job while this one's model answered (its lease ran
    out): settling the job refuses this run, and the reply's record (message, events, the
    state's answered messages) rolls back with it; the other run owns the job. On PostgreSQL
    the state's write and the job's finish are one statement; elsewhere they are two."""
    answer, deliver = reply_tasks._answer, service.deliver
    refused: list[str] = []

    async def answer_while_another_run_claims(job: Any, turn: Any) -> Any:
        # On the worker's loop: its own resources.
        async with job.runtime.resources.session(writes=True) as session:
            stored = await session.get(OutboxJob, job.job_id)
            assert stored is not None
            assert stored.claim_token == job.token
            stored.claim_token = "another-run"
            await session.commit()
        return await answer(job, turn)

    async def refused_deliver(*args: Any, **kwargs: Any) -> Any:
        try:
            return await deliver(*args, **kwargs)
        except StaleRun:
            refused.append(kwargs["job_id"])
            raise

    async def refused_once() -> bool:
        return bool(refused)

    monkeypatch.setattr(reply_tasks, "_answer", answer_while_another_run_claims)
    monkeypatch.setattr(service, "deliver", refused_deliver)
    chat = await open_chat(engine, providers)
    await chat.say("Hello there")
    ticket_id = await chat.ticket_id()
    await eventually(refused_once, 20.0)
    assert refused == [reply_job_id(ticket_id)]
    assert await chat.replies(ticket_id) == []
    assert await chat.events("ai.reply.generated") == []
    assert await chat.events("message.sent") == []
    async with engine.sessionmaker() as session:
        state = await session.get(AiReplyState, ticket_id)
        job = await session.get(OutboxJob, reply_job_id(ticket_id))
    assert state is not None
    assert len(state.pending) == 1
    assert job is not None
    assert job.claim_token == "another-run"


async def test_a_message_stored_after_the_claim_waits_for_the_next_reply(
    engine: Engine, providers: tuple[FakeProviders, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim holds no lock while the turn's history is read: a message the customer sends
    in between is neither answered nor shown to the model by this reply; the next one
    answers it."""
    if engine.settings.database_url.startswith("sqlite"):
        pytest.skip(
            "on SQLite the claim's statements share one transaction, which holds the write lock"
        )
    chat = await open_chat(engine, providers)
    test_loop = asyncio.get_running_loop()
    read_history = repository.history_rows
    interleaved: list[str] = []

    async def a_message_then_the_history(runner: Any, ticket_id: str, *args: Any) -> Any:
        if not interleaved:  # the first reply's claim is taken: the customer writes again
            interleaved.append(ticket_id)
            sent = asyncio.run_coroutine_threadsafe(chat.say("Second question"), test_loop)
            await asyncio.wrap_future(sent)
        return await read_history(runner, ticket_id, *args)

    monkeypatch.setattr(repository, "history_rows", a_message_then_the_history)
    await chat.say("First question")
    ticket_id = await chat.ticket_id()
    await chat.wait_replies(ticket_id, 2)
    assert interleaved == [ticket_id]
    first, second = [r.body["messages"] for r in providers[0].model_requests()]
    assert first[1:] == [{"role": "user", "content": "First question"}]
    assert second[-1] == {"role": "user", "content": "Second question"}
    generated = await chat.events("ai.reply.generated")
    # Both messages carry the same second: read them by id, not in the list's order.
    text_of = {m["id"]: m["text"] for m in await chat.messages(ticket_id)}
    assert [[text_of[id_] for id_ in g["in_reply_to"]] for g in generated] == [
        ["First question"],
        ["Second question"],
    ]


async def test_no_reply_leaves_once_the_customers_24_hour_window_has_closed(
    engine: Engine, providers: tuple[FakeProviders, str]
) -> None:
    """The answered message itself sets when the window closes: one the customer sent 25 hours
    ago (a late delivery) gets an answer from the model, but nothing is sent."""
    chat = await open_chat(engine, providers)
    await chat.say("Are you still open?", at=time.time() - 25 * 3600)
    ticket_id = await chat.ticket_id()
    await chat.settled(ticket_id)
    [generated] = await chat.events("ai.reply.generated")
    assert (generated["ticket_id"], generated["message_id"]) == (ticket_id, None)
    assert await chat.replies(ticket_id) == []
    assert await chat.events("message.sent") == []
    # The customer writes again: the window is open, and this message is answered.
    await chat.say("Hello?")
    [reply] = await chat.wait_replies(ticket_id, 1)
    assert reply["agent_id"] == chat.agent_id


async def test_a_tool_round_trip_and_a_non_text_message(
    engine: Engine, providers: tuple[FakeProviders, str]
) -> None:
    chat = await open_chat(engine, providers)
    await chat.say("What are your hours?")
    ticket_id = await chat.ticket_id()
    [reply] = await chat.wait_replies(ticket_id, 1)
    assert reply["text"].startswith("Here is what I found:")
    [tool] = await chat.events("ai.tool.executed")
    assert (tool["name"], tool["ticket_id"]) == ("search_knowledge", ticket_id)
    [generated] = await chat.events("ai.reply.generated")
    assert generated["tool_calls"] == ["search_knowledge"]
    assert generated["usage"] == {"input_tokens": 240, "output_tokens": 60}  # two rounds
    # An image reaches the model as a short description with its caption.
    await chat.say(image={"id": "media-1", "mime_type": "image/jpeg", "caption": "my receipt"})
    await chat.wait_replies(ticket_id, 2)
    last = providers[0].model_requests()[-1].body["messages"][-1]
    assert last == {
        "role": "user",
        "content": '[The customer sent an image with the caption "my receipt"]',
    }


async def test_one_reply_per_burst_and_per_platform_message(
    engine: Engine, providers: tuple[FakeProviders, str]
) -> None:
    chat = await open_chat(engine, providers)
    first = await chat.say("Hi")
    await chat.say("I have a question")
    await chat.say("Hi", message_id=first)  # the platform delivers the first one again
    ticket_id = await chat.ticket_id()
    [reply] = await chat.wait_replies(ticket_id, 1)
    [generated] = await chat.events("ai.reply.generated")
    inbound = [m["id"] for m in await chat.messages(ticket_id) if m["direction"] == "inbound"]
    assert len(inbound) == 2
    assert sorted(generated["in_reply_to"]) == sorted(inbound)
    assert generated["message_id"] == reply["id"]
    # Both messages reached the model, as one turn of the customer's.
    assert providers[0].model_requests()[-1].body["messages"][-1] == {
        "role": "user",
        "content": "Hi\nI have a question",
    }
    # The same message again, after the reply: still one reply.
    await chat.say("Hi", message_id=first)
    await asyncio.sleep(BURST * 3)
    await chat.settled(ticket_id)
    assert len(await chat.replies(ticket_id)) == 1


async def test_transfer_to_human_leaves_the_ticket_to_a_person(
    engine: Engine, providers: tuple[FakeProviders, str]
) -> None:
    chat = await open_chat(engine, providers)
    await chat.say("Can I speak to a person?")
    ticket_id = await chat.ticket_id()
    [said] = await chat.wait_replies(ticket_id, 1)
    [handoff] = await chat.events("agent.handoff")
    assert (handoff["reason"], handoff["ticket_id"]) == (
        "the customer asked for a person",
        ticket_id,
    )
    assert handoff["message_id"] == said["id"]
    # What the agent said while handing off is reported as the reply it generated.
    [generated] = await chat.events("ai.reply.generated")
    assert (generated["message_id"], generated["reply"]) == (said["id"], said["text"])
    ticket = await engine.client.get(
        f"/api/v1/inbox/tickets/{ticket_id}", headers=chat.tenant.headers
    )
    assert (ticket.json()["status"], ticket.json()["assigned_user_id"]) == ("open", None)
    requests = len(providers[0].model_requests())
    await chat.say("Hello?")
    await asyncio.sleep(BURST * 3)
    await chat.settled(ticket_id)
    assert len(await chat.replies(ticket_id)) == 1
    assert len(providers[0].model_requests()) == requests  # the model was not even asked
    # Closed: the next message opens a new conversation, which the agent answers again.
    closed = await engine.client.post(
        f"/api/v1/inbox/tickets/{ticket_id}/close", headers=chat.tenant.headers
    )
    assert closed.status_code == 200, closed.text
    await chat.say("Hello again")
    second = await chat.ticket_id()
    assert second != ticket_id
    assert [r["text"] for r in await chat.wait_replies(second, 1)] == [GREETING]


async def test_a_ticket_assigned_to_a_person_silences_the_agent(
    engine: Engine, providers: tuple[FakeProviders, str]
) -> None:
    chat = await open_chat(engine, providers)
    async with engine.sessionmaker() as session:
        # A writer from the start: a SQLite reader that then writes meets the worker's writes.
        await session.connection(execution_options={"sqlite_begin": "IMMEDIATE"})
        user = await create_user(
            session,
            chat.tenant.organization_id,
            f"agent{next(_numbers)}@example.com",
            "pw-1234567890",
        )
        await session.commit()
    user_id = user.id
    await chat.say("Hello")
    ticket_id = await chat.ticket_id()
    await chat.wait_replies(ticket_id, 1)
    assigned = await engine.client.post(
        f"/api/v1/inbox/tickets/{ticket_id}/assign",
        json={"user_id": user_id},
        headers=chat.tenant.headers,
    )
    assert assigned.status_code == 200, assigned.text
    await chat.say("Are you still there?")
    await asyncio.sleep(BURST * 3)
    await chat.settled(ticket_id)
    assert len(await chat.replies(ticket_id)) == 1
    # A person still replies through the same path.
    human = await engine.client.post(
        f"/api/v1/inbox/tickets/{ticket_id}/messages",
        json={"text": "Hi, Grace here"},
        headers=chat.tenant.headers,
    )
    assert human.status_code == 201, human.text
    assert human.json()["agent_id"] is None


async def test_a_model_that_stays_down_hands_off_and_says_nothing(
    engine: Engine, providers: tuple[FakeProviders, str]
) -> None:
    chat = await open_chat(engine, providers)
    providers[0].failures = [500] * 3  # the first attempt and both retries
    await chat.say("Hello there")
    ticket_id = await chat.ticket_id()

    async def handed_off() -> bool:
        return bool(await chat.events("agent.handoff"))

    await eventually(handed_off, 20.0)
    await chat.settled(ticket_id)
    [handoff] = await chat.events("agent.handoff")
    assert handoff["reason"] == "llm_unavailable"
    assert handoff["error"]["code"] == "llm_unavailable"
    assert (handoff["ticket_id"], handoff["message_id"]) == (ticket_id, None)
    assert await chat.replies(ticket_id) == []
    assert await chat.events("ai.reply.generated") == []


async def test_the_channel_agent_input(
    engine: Engine, providers: tuple[FakeProviders, str]
) -> None:
    chat = await open_chat(engine, providers)
    other = await engine.tenants.organization("Globex")
    foreign = await create_agent(engine, other, providers[1])
    path = f"/api/v1/channels/{chat.channel['id']}"
    for agent_id in (foreign, "5f0c1b9e-0000-4000-8000-000000000000"):
        refused = await engine.client.put(
            path, json={"agent_id": agent_id}, headers=chat.tenant.headers
        )
        assert (refused.status_code, refused.json()) == (
            404,
            {"error": 404, "message": "Agent not found"},
        )
    bad = await engine.client.put(path, json={"agent_id": "nope"}, headers=chat.tenant.headers)
    assert bad.status_code == 400
    missing = await engine.client.put(
        "/api/v1/channels/5f0c1b9e-0000-4000-8000-000000000000",
        json={"agent_id": chat.agent_id},
        headers=chat.tenant.headers,
    )
    assert missing.json() == {"detail": "Channel not found"}
    # GraphQL sets and clears it; a cleared channel's messages are left to people.
    mutation = (
        "mutation($id: ID!, $input: ChannelUpdateInput!) { updateChannel(id: $id, input: $input)"
        " { channel { agentId } errors { code message } } }"
    )
    unknown = await graphql(
        engine.client,
        mutation,
        {"id": chat.channel["id"], "input": {"agentId": foreign}},
        chat.tenant.headers,
    )
    assert unknown["data"]["updateChannel"]["errors"][0]["code"] == "not_found"
    cleared = await graphql(
        engine.client,
        mutation,
        {"id": chat.channel["id"], "input": {"agentId": None}},
        chat.tenant.headers,
    )
    assert cleared["data"]["updateChannel"] == {"channel": {"agentId": None}, "errors": []}
    got = await engine.client.get(path, headers=chat.tenant.headers)
    assert got.json()["agent_id"] is None
    await chat.say("Anyone?")
    ticket_id = await chat.ticket_id()
    await asyncio.sleep(BURST * 3)
    assert await chat.replies(ticket_id) == []
    async with engine.sessionmaker() as session:
        assert await session.get(OutboxJob, reply_job_id(ticket_id)) is None
    # An inactive agent stays silent too.
    again = await graphql(
        engine.client,
        mutation,
        {"id": chat.channel["id"], "input": {"agentId": chat.agent_id}},
        chat.tenant.headers,
    )
    assert again["data"]["updateChannel"]["channel"]["agentId"] == chat.agent_id
    paused = await engine.client.put(
        f"/api/v1/agents/{chat.agent_id}",
        json={"is_active": "inactive"},
        headers=chat.tenant.headers,
    )
    assert paused.status_code == 200, paused.text
    await chat.say("Hello?")
    await asyncio.sleep(BURST * 3)
    await chat.settled(ticket_id)
    assert await chat.replies(ticket_id) == []


async def test_twenty_messages_two_workers_one_ordered_set_of_replies(
    engine: Engine, providers: tuple[FakeProviders, str]
) -> None:
    """20 webhooks on one conversation (four bursts of five at once), answered by two workers
    racing for it: the in-process Dramatiq worker (StubBroker, or RedisBroker) and a second
    worker runtime with its own pools that runs the reply jobs it finds. Every message is
    answered exactly once, in order."""
    chat = await open_chat(engine, providers)
    texts = [f"message {n}" for n in range(20)]
    # The conversation opens first: concurrent first messages of a new number each create
    # a contact of their own (the contacts domain does not serialise them).
    await chat.say("start")
    ticket_id = await chat.ticket_id()
    await chat.wait_replies(ticket_id, 1)

    async def burst_of_webhooks() -> None:
        for group in range(4):  # four bursts of five, each posted at once
            await asyncio.gather(*(chat.say(text) for text in texts[group * 5 : group * 5 + 5]))
            await asyncio.sleep(BURST * 1.5)

    second = JobRuntime(engine.settings)  # another worker's runtime, its own pools
    await second.open()
    stop = asyncio.Event()

    async def compete() -> None:
        while not stop.is_set():
            async with engine.sessionmaker() as session:
                ids = list(
                    await session.scalars(
                        select(OutboxJob.id).where(OutboxJob.actor == REPLY_ACTOR)
                    )
                )
            for job_id in ids:
                await run_job(second, job_id, reply)
            await asyncio.sleep(0.01)

    racer = asyncio.create_task(compete())
    try:
        await burst_of_webhooks()
        await chat.settled(ticket_id)
    finally:
        stop.set()
        await racer
        await second.close()
    inbound = [m["id"] for m in await chat.messages(ticket_id) if m["direction"] == "inbound"]
    assert len(inbound) == 21
    generated = await chat.events("ai.reply.generated")
    answered = [message_id for event in generated for message_id in event["in_reply_to"]]
    # Each message answered once, the replies in the order the messages came: the bursts
    # (posted one after the other; the five of one burst at once) in order.
    assert sorted(answered) == sorted(inbound)
    assert len(answered) == len(set(answered))
    burst_of = {
        m["id"]: texts.index(m["text"]) // 5 if m["text"] in texts else -1
        for m in await chat.messages(ticket_id)
        if m["direction"] == "inbound"
    }
    bursts = [burst_of[message_id] for message_id in answered]
    assert bursts == sorted(bursts)
    replies = await chat.replies(ticket_id)
    assert [r["id"] for r in replies] == [event["message_id"] for event in generated]
    assert all(r["text"] == GREETING for r in replies)


# What the worker processes are told, as the in-test engine is (SETTINGS).
WORKER_SETTINGS = {
    "SWITCHBOARD_WHATSAPP_APP_SECRET": APP_SECRET,
    "SWITCHBOARD_LLM_RETRY_BACKOFF_SECONDS": 0,
    "SWITCHBOARD_ENGINE_TURN_DEADLINE_SECONDS": 10,
    "SWITCHBOARD_AI_REPLY_BURST_SECONDS": BURST,
    "SWITCHBOARD_AI_REPLY_MAX_WAIT_SECONDS": 5,
    "SWITCHBOARD_JOB_LEASE_SECONDS": 30,
    "SWITCHBOARD_KNOWLEDGE_EXTRACTION_SECONDS": 3,
    "SWITCHBOARD_OUTBOX_REDISPATCH_SECONDS": 2,
}
# Worker processes boot slowly on a loaded machine; replies then take a few round trips.
WORKER_WAIT_SECONDS = 90.0


async def test_twenty_messages_two_worker_processes_one_ordered_set_of_replies(
    backend: tuple[str, str | None], tmp_path: Path, providers: tuple[FakeProviders, str]
) -> None:
    """20 webhooks on one conversation (four bursts of five at once), answered by two real
    `switchboard worker` processes consuming the same Redis queues (no worker in the test's
    process): every message is answered exactly once, the replies in order."""
    url, redis_url = backend
    if redis_url is None:
        pytest.skip("worker processes share the jobs through Redis (the RedisBroker variant)")
    providers[0].reset()
    async with running_engine(
        url, tmp_path, redis_url=redis_url, in_process_worker=False, **SETTINGS
    ) as engine:
        workers = [
            WorkerProcess(
                worker_env(url, redis_url, tmp_path / f"worker{n}", **WORKER_SETTINGS),
                tmp_path / f"worker{n}.log",
                threads=2,
            )
            for n in range(2)
        ]
        try:
            for worker in workers:
                await asyncio.to_thread(worker.wait_ready, WORKER_WAIT_SECONDS)
            await _twenty_messages(await open_chat(engine, providers))
        finally:
            for worker in workers:
                await asyncio.to_thread(worker.stop)


async def _twenty_messages(chat: Chat) -> None:
    texts = [f"message {n}" for n in range(20)]
    await chat.say("start")  # the conversation opens first (one contact, one ticket)
    ticket_id = await chat.ticket_id()

    async def answered_start() -> bool:
        return len(await chat.replies(ticket_id)) >= 1

    await eventually(answered_start, WORKER_WAIT_SECONDS)
    for group in range(4):  # four bursts of five, each posted at once
        await asyncio.gather(*(chat.say(text) for text in texts[group * 5 : group * 5 + 5]))
        await asyncio.sleep(BURST * 1.5)

    async def all_answered() -> bool:
        async with chat.engine.sessionmaker() as session:
            job = await session.get(OutboxJob, reply_job_id(ticket_id))
            state = await session.get(AiReplyState, ticket_id)
            pending = state is None or bool(state.pending)
        return job is None and not pending

    await eventually(all_answered, WORKER_WAIT_SECONDS)
    inbound = [m for m in await chat.messages(ticket_id) if m["direction"] == "inbound"]
    assert len(inbound) == 21
    generated = await chat.events("ai.reply.generated")
    answered = [message_id for event in generated for message_id in event["in_reply_to"]]
    assert sorted(answered) == sorted(m["id"] for m in inbound)  # none lost
    assert len(answered) == len(set(answered))  # none answered twice
    burst_of = {m["id"]: texts.index(m["text"]) // 5 if m["text"] in texts else -1 for m in inbound}
    bursts = [burst_of[message_id] for message_id in answered]
    assert bursts == sorted(bursts)  # in the order they came
    replies = await chat.replies(ticket_id)
    assert [r["id"] for r in replies] == [event["message_id"] for event in generated]
    assert all(r["text"] == GREETING for r in replies)
