"""The platform's webhooks: handshake, signatures, inbound messages, delivery statuses,
template status and quality updates; and replies (24-hour window, simulator numbers)."""

from __future__ import annotations

import time
from typing import Any

import httpx
import orjson
import pytest
from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.contacts.models import Contact
from app.conversations.models import Message, ParkedStatus
from app.conversations.statuses import (
    RETRY_INTERVAL,
    STATUS_RETRY_ACTOR,
    STATUS_RETRY_QUEUE,
    retry_job_id,
)
from app.core.clock import utcnow
from app.events.models import Event
from app.inbox.models import Ticket
from app.integrations.whatsapp import payloads
from app.kit.outbox_models import OutboxJob
from app.webhooks.delivery import DELIVER_ACTOR
from app.webhooks.models import WebhookDelivery, WebhookSubscription
from tests.conftest import Tenant, TenantFactory
from tests.conversations.conftest import (
    APP_SECRET,
    PHONE_ID,
    VERIFY_TOKEN,
    JobWorker,
    post_signed,
)
from tests.integrations.whatsapp.fake_graph import FakeGraph
from tests.templates.conftest import WABA, Jobs, create_channel, template_body

HOOK = "/webhooks/whatsapp"
CUSTOMER = "+14155550100"


def inbound(
    message_id: str, text: str, sender: str = CUSTOMER, *, at: int | None = None
) -> dict[str, Any]:
    return payloads.inbound_text(
        WABA, PHONE_ID, "+14155550142", message_id, sender, text, profile_name="Ada", timestamp=at
    )


async def counts(sessionmaker: async_sessionmaker[AsyncSession]) -> dict[str, int]:
    async with sessionmaker() as session:
        return {
            model.__tablename__: int(
                await session.scalar(select(func.count()).select_from(model)) or 0
            )
            for model in (Contact, Ticket, Message, Event)
        }


async def event_types(sessionmaker: async_sessionmaker[AsyncSession]) -> list[str]:
    async with sessionmaker() as session:
        rows = await session.scalars(select(Event.type).order_by(Event.created_at))
        return list(rows)


# --- handshake and signatures --------------------------------------------------------------


async def test_verification_handshake(client: httpx.AsyncClient) -> None:
    ok = await client.get(
        HOOK,
        params={"hub.mode": "subscribe", "hub.verify_token": VERIFY_TOKEN, "hub.challenge": "1158"},
    )
    assert ok.status_code == 200
    assert ok.text == "1158"
    for params in (
        {"hub.mode": "subscribe", "hub.verify_token": "wrong", "hub.challenge": "1"},
        {"hub.mode": "unsubscribe", "hub.verify_token": VERIFY_TOKEN, "hub.challenge": "1"},
        {"hub.mode": "subscribe", "hub.verify_token": VERIFY_TOKEN},
        {},
    ):
        refused = await client.get(HOOK, params=params)
        assert refused.status_code == 403
        assert "1158" not in refused.text


async def test_bad_signature_is_403_and_nothing_is_stored(
    client: httpx.AsyncClient,
    channel: dict[str, Any],
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    before = await counts(sessionmaker)
    payload = inbound("wamid.bad", "hello")
    assert (await post_signed(client, payload, secret="not-the-app-secret")).status_code == 403
    unsigned = await client.post(HOOK, json=payload)
    assert unsigned.status_code == 403
    body = orjson.dumps(payload)
    tampered = await client.post(
        HOOK,
        content=body.replace(b"hello", b"HELLO"),
        headers={payloads.SIGNATURE_HEADER: payloads.sign(APP_SECRET, body)},
    )
    assert tampered.status_code == 403
    assert await counts(sessionmaker) == before


# --- inbound messages ----------------------------------------------------------------------


async def test_inbound_message_creates_contact_ticket_message_and_events(
    client: httpx.AsyncClient,
    acme: Tenant,
    channel: dict[str, Any],
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    subscriptions = [
        await client.post(
            "/api/v1/webhooks",
            json={"url": f"https://93.184.216.34/hooks/{name}", "events": events},
            headers=acme.headers,
        )
        for name, events in (
            ("all", ["lead.created", "ticket.created", "conversation.started", "message.received"]),
            ("messages", ["message.received"]),
        )
    ]
    assert [s.status_code for s in subscriptions] == [200, 200]
    response = await post_signed(client, inbound("wamid.first", "Where is my order?"))
    assert response.status_code == 200
    contacts = (await client.get("/api/v1/contacts", headers=acme.headers)).json()["data"]
    assert [(c["phone_number"], c["name"]) for c in contacts] == [(CUSTOMER, "Ada")]
    tickets = (await client.get("/api/v1/inbox/tickets", headers=acme.headers)).json()["data"]
    assert len(tickets) == 1
    ticket = tickets[0]
    assert ticket["contact_id"] == contacts[0]["id"]
    assert ticket["chat_phone_number_id"] == channel["id"]
    messages = await client.get(
        f"/api/v1/inbox/tickets/{ticket['id']}/messages", headers=acme.headers
    )
    assert messages.status_code == 200
    (message,) = messages.json()["data"]
    assert message["direction"] == "inbound"
    assert (message["type"], message["text"]) == ("text", "Where is my order?")
    assert message["platform_message_id"] == "wamid.first"
    assert message["status"] == "received"
    assert await event_types(sessionmaker) == [
        "lead.created",
        "ticket.created",
        "conversation.started",
        "message.received",
    ]
    # The webhook fans its four events out in its own transaction: no fan-out job for a
    # worker to run, each subscription's deliveries (and their jobs) there at the 200.
    async with sessionmaker() as session:
        actors = (await session.scalars(select(OutboxJob.actor))).all()
        deliveries = (
            await session.execute(
                select(WebhookSubscription.url, WebhookDelivery.event_type).join(
                    WebhookSubscription, WebhookSubscription.id == WebhookDelivery.subscription_id
                )
            )
        ).all()
    assert "events.fan_out" not in actors
    assert actors.count(DELIVER_ACTOR) == 5
    assert sorted(deliveries) == sorted(
        [("https://93.184.216.34/hooks/all", kind) for kind in await event_types(sessionmaker)]
        + [("https://93.184.216.34/hooks/messages", "message.received")]
    )


async def test_redelivered_message_is_stored_once(
    client: httpx.AsyncClient,
    channel: dict[str, Any],
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    payload = inbound("wamid.dup", "hi")
    assert (await post_signed(client, payload)).status_code == 200
    once = await counts(sessionmaker)
    assert (await post_signed(client, payload)).status_code == 200
    assert await counts(sessionmaker) == once
    # A new message from the same contact joins the open ticket.
    assert (await post_signed(client, inbound("wamid.next", "again"))).status_code == 200
    after = await counts(sessionmaker)
    assert (after["contacts"], after["inbox_tickets"], after["conversation_messages"]) == (1, 1, 2)
    assert (await event_types(sessionmaker)).count("ticket.created") == 1


async def test_unknown_phone_number_id_is_acknowledged(
    client: httpx.AsyncClient,
    channel: dict[str, Any],
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    before = await counts(sessionmaker)
    payload = payloads.inbound_text(WABA, "000000000", "+1", "wamid.x", CUSTOMER, "hi")
    response = await post_signed(client, payload)
    assert response.status_code == 200
    assert await counts(sessionmaker) == before
    weird = await post_signed(client, {"object": "whatsapp_business_account", "entry": [{}]})
    assert weird.status_code == 200
    not_json = b"{not json"
    response = await client.post(
        HOOK,
        content=not_json,
        headers={payloads.SIGNATURE_HEADER: payloads.sign(APP_SECRET, not_json)},
    )
    assert response.status_code == 400


async def test_another_organizations_channel_for_the_number_is_refused(
    client: httpx.AsyncClient, acme: Tenant, globex: Tenant, channel: dict[str, Any]
) -> None:
    taken = await client.post(
        "/api/v1/channels",
        json={
            "display_phone_number": "+14155550142",
            "phone_number_id": PHONE_ID,
            "business_account_id": WABA,
            "access_token": "EAAGother",
        },
        headers=globex.headers,
    )
    assert taken.status_code == 409
    assert taken.json() == {"detail": "Phone number is already in use"}
    assert (await post_signed(client, inbound("wamid.only", "hi"))).status_code == 200
    for tenant, count in ((acme, 1), (globex, 0)):
        tickets = (await client.get("/api/v1/inbox/tickets", headers=tenant.headers)).json()
        assert tickets["total_count"] == count


# --- template status and quality -----------------------------------------------------------


async def test_template_status_and_quality_updates(
    client: httpx.AsyncClient, acme: Tenant, channel: dict[str, Any], jobs: Jobs
) -> None:
    created = await client.post(
        "/api/v1/templates", json=template_body(channel["id"]), headers=acme.headers
    )
    template_id = created.json()["id"]
    # Only the submission: the simulator's own callbacks are dropped so this test plays them.
    await jobs.run_only("templates.submit")
    platform_id = (
        await client.get(f"/api/v1/templates/{template_id}", headers=acme.headers)
    ).json()["platform_template_id"]
    assert platform_id
    update = payloads.template_status_update(
        WABA, platform_id, "order_shipped", "en_US", "REJECTED", "INCORRECT_CATEGORY"
    )
    assert (await post_signed(client, update)).status_code == 200
    template = (await client.get(f"/api/v1/templates/{template_id}", headers=acme.headers)).json()
    assert (template["status"], template["rejected_reason"]) == ("REJECTED", "INCORRECT_CATEGORY")
    approved = payloads.template_status_update(
        WABA, platform_id, "order_shipped", "en_US", "APPROVED"
    )
    quality = payloads.template_quality_update(
        WABA, platform_id, "order_shipped", "en_US", "GREEN", "YELLOW"
    )
    for payload in (approved, quality):
        assert (await post_signed(client, payload)).status_code == 200
    template = (await client.get(f"/api/v1/templates/{template_id}", headers=acme.headers)).json()
    assert (template["status"], template["quality_score"]) == ("APPROVED", "YELLOW")
    unknown = payloads.template_status_update(WABA, "424242", "nope", "en_US", "APPROVED")
    assert (await post_signed(client, unknown)).status_code == 200


# --- replies and statuses ------------------------------------------------------------------


async def open_conversation(
    client: httpx.AsyncClient, acme: Tenant, sender: str = CUSTOMER, at: int | None = None
) -> str:
    assert (
        await post_signed(client, inbound(f"wamid.in{sender}{at}", "hi", sender, at=at))
    ).status_code == 200
    tickets = (await client.get("/api/v1/inbox/tickets", headers=acme.headers)).json()["data"]
    ticket: str = next(t["id"] for t in tickets if t["contact"]["phone_number"] == sender)
    return ticket


async def reply(
    client: httpx.AsyncClient, acme: Tenant, ticket_id: str, **body: Any
) -> httpx.Response:
    return await client.post(
        f"/api/v1/inbox/tickets/{ticket_id}/messages", json=body, headers=acme.headers
    )


async def messages_of(client: httpx.AsyncClient, acme: Tenant, ticket_id: str) -> list[Any]:
    response = await client.get(f"/api/v1/inbox/tickets/{ticket_id}/messages", headers=acme.headers)
    data: list[Any] = response.json()["data"]
    return data


async def the_outbound(client: httpx.AsyncClient, acme: Tenant, ticket_id: str) -> dict[str, Any]:
    """The ticket's one outbound message."""
    messages = await messages_of(client, acme, ticket_id)
    (outbound,) = [message for message in messages if message["direction"] == "outbound"]
    return outbound


async def settle_as(
    sessionmaker: async_sessionmaker[AsyncSession], message_id: str, platform_message_id: str
) -> None:
    """The send settles: its platform id is stored (as a campaign's ledger or a reply's
    commit does)."""
    async with sessionmaker() as session:
        stored = await session.get(Message, message_id)
        assert stored is not None
        stored.platform_message_id = platform_message_id
        await session.commit()


def status(message_id: str, value: str, at: int, recipient: str = CUSTOMER) -> dict[str, Any]:
    return payloads.message_status(
        WABA, PHONE_ID, "+14155550142", message_id, recipient, value, timestamp=at
    )


async def test_statuses_only_move_forward(
    client: httpx.AsyncClient,
    acme: Tenant,
    channel: dict[str, Any],
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    ticket_id = await open_conversation(client, acme)
    sent = await reply(client, acme, ticket_id, text="On its way!")
    assert sent.status_code == 201, sent.text
    message = sent.json()
    assert (message["direction"], message["status"]) == ("outbound", "sent")
    wamid = message["platform_message_id"]
    now = int(time.time())
    # Out of order: read arrives first (read implies delivered), then a late delivered, then
    # a duplicate read, then a failed that cannot follow read.
    for value, at in (
        ("read", now + 5),
        ("delivered", now + 3),
        ("read", now + 5),
        ("failed", now + 9),
        ("sent", now + 1),
    ):
        assert (await post_signed(client, status(wamid, value, at))).status_code == 200
    outbound = await the_outbound(client, acme, ticket_id)
    assert outbound["status"] == "read"
    assert outbound["delivered_at"] is not None
    assert outbound["read_at"] is not None
    assert outbound["failed_at"] is None
    types = await event_types(sessionmaker)
    assert types.count("message.sent") == 1
    assert "message.failed" not in types


async def test_failed_status_records_the_reason(
    client: httpx.AsyncClient,
    acme: Tenant,
    channel: dict[str, Any],
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    ticket_id = await open_conversation(client, acme)
    wamid = (await reply(client, acme, ticket_id, text="Hello")).json()["platform_message_id"]
    failed = status(wamid, "failed", int(time.time()))
    failed["entry"][0]["changes"][0]["value"]["statuses"][0]["errors"] = [
        {"code": 131026, "title": "Message undeliverable"}
    ]
    for _ in range(2):  # the duplicate changes nothing
        assert (await post_signed(client, failed)).status_code == 200
    outbound = await the_outbound(client, acme, ticket_id)
    assert outbound["status"] == "failed"
    assert "131026" in outbound["error"]
    assert (await event_types(sessionmaker)).count("message.failed") == 1


async def retry_jobs(sessionmaker: async_sessionmaker[AsyncSession]) -> list[OutboxJob]:
    async with sessionmaker() as session:
        rows = await session.scalars(
            select(OutboxJob)
            .where(OutboxJob.actor == STATUS_RETRY_ACTOR)
            .order_by(OutboxJob.created_at)
        )
        return list(rows.all())


async def parked(sessionmaker: async_sessionmaker[AsyncSession]) -> list[str]:
    async with sessionmaker() as session:
        rows = await session.scalars(select(ParkedStatus.platform_message_id))
        return sorted(rows)


async def test_a_status_that_overtakes_its_send_is_applied_once_the_id_is_stored(
    client: httpx.AsyncClient,
    acme: Tenant,
    channel: dict[str, Any],
    sessionmaker: async_sessionmaker[AsyncSession],
    worker: JobWorker,
) -> None:
    ticket_id = await open_conversation(client, acme)
    sent = await reply(client, acme, ticket_id, text="On its way!")
    message_id = sent.json()["id"]
    now = int(time.time())
    # "delivered" about an id no message holds yet: acknowledged, kept for a later try.
    before = utcnow()
    early = await post_signed(client, status("wamid.settling", "delivered", now))
    assert early.status_code == 200
    (waiting,) = await retry_jobs(sessionmaker)
    assert (waiting.id, waiting.queue, waiting.args) == (
        retry_job_id(channel["id"]),
        STATUS_RETRY_QUEUE,
        [channel["id"]],
    )
    assert waiting.available_at >= before + RETRY_INTERVAL
    assert await parked(sessionmaker) == ["wamid.settling"]
    await settle_as(sessionmaker, message_id, "wamid.settling")
    await worker.run(waiting.id)
    outbound = await the_outbound(client, acme, ticket_id)
    assert outbound["status"] == "delivered"
    assert outbound["delivered_at"] is not None
    assert await parked(sessionmaker) == []
    assert await retry_jobs(sessionmaker) == []  # nothing left: the job finished


async def test_a_status_about_an_unknown_message_is_tried_until_its_window_ends(
    client: httpx.AsyncClient,
    channel: dict[str, Any],
    sessionmaker: async_sessionmaker[AsyncSession],
    worker: JobWorker,
) -> None:
    unknown = await post_signed(client, status("wamid.never", "read", 1_700_000_000))
    assert unknown.status_code == 200
    (job,) = await retry_jobs(sessionmaker)
    await worker.run(job.id)
    (again,) = await retry_jobs(sessionmaker)  # still unknown: the same job, run again later
    assert again.id == job.id
    assert again.available_at > utcnow()
    assert await parked(sessionmaker) == ["wamid.never"]
    async with sessionmaker() as session:  # the window ends
        await session.execute(update(ParkedStatus).values(expires_at=utcnow()))
        await session.commit()
    await worker.run(job.id)
    assert await parked(sessionmaker) == []
    assert await retry_jobs(sessionmaker) == []


async def test_statuses_parked_while_the_job_waits_join_it(
    client: httpx.AsyncClient,
    acme: Tenant,
    channel: dict[str, Any],
    sessionmaker: async_sessionmaker[AsyncSession],
    worker: JobWorker,
) -> None:
    now = int(time.time())
    for n in range(3):
        assert (await post_signed(client, status(f"wamid.wait{n}", "sent", now))).status_code == 200
    assert [job.id for job in await retry_jobs(sessionmaker)] == [retry_job_id(channel["id"])]
    assert len(await parked(sessionmaker)) == 3
    # A job run that finds its channel deleted ends quietly (the parked statuses went too).
    deleted = await client.delete(f"/api/v1/channels/{channel['id']}", headers=acme.headers)
    assert deleted.status_code == 204
    await worker.run(retry_job_id(channel["id"]))
    assert await retry_jobs(sessionmaker) == []
    assert await parked(sessionmaker) == []


async def test_24_hour_window(
    client: httpx.AsyncClient, acme: Tenant, channel: dict[str, Any], jobs: Jobs
) -> None:
    long_ago = int(time.time()) - 25 * 3600
    ticket_id = await open_conversation(client, acme, at=long_ago)
    refused = await reply(client, acme, ticket_id, text="Still there?")
    assert refused.status_code == 400
    assert "24-hour" in refused.json()["detail"]
    # No approved template yet: refused too.
    assert (await reply(client, acme, ticket_id, template_name="order_shipped")).status_code == 400
    await client.post("/api/v1/templates", json=template_body(channel["id"]), headers=acme.headers)
    await jobs.drain()
    sent = await reply(
        client, acme, ticket_id, template_name="order_shipped", body_parameters=["Ada", "A-1"]
    )
    assert sent.status_code == 201, sent.text
    assert (sent.json()["type"], sent.json()["status"]) == ("template", "sent")
    # The customer writes again: free text is allowed once more.
    assert (await post_signed(client, inbound("wamid.back", "yes"))).status_code == 200
    assert (await reply(client, acme, ticket_id, text="Great")).status_code == 201


async def test_quick_reply_shortcut_is_expanded(
    client: httpx.AsyncClient, acme: Tenant, channel: dict[str, Any]
) -> None:
    created = await client.post(
        "/api/v1/quick-replies",
        json={"shortcut": "/thanks", "content": "Thank you for reaching out!"},
        headers=acme.headers,
    )
    assert created.status_code in (200, 201), created.text
    ticket_id = await open_conversation(client, acme)
    sent = await reply(client, acme, ticket_id, text="/thanks")
    assert sent.json()["text"] == "Thank you for reaching out!"


async def test_reply_input_and_isolation(
    client: httpx.AsyncClient, acme: Tenant, globex: Tenant, channel: dict[str, Any]
) -> None:
    ticket_id = await open_conversation(client, acme)
    assert (await reply(client, acme, ticket_id)).status_code == 422
    assert (await reply(client, acme, ticket_id, text="a", template_name="b")).status_code == 422
    assert (await reply(client, globex, ticket_id, text="hi")).status_code == 404
    listed = await client.get(f"/api/v1/inbox/tickets/{ticket_id}/messages", headers=globex.headers)
    assert listed.status_code == 404


@pytest.mark.parametrize(
    ("number", "final", "read"),
    [
        ("+15005550009", "failed", False),
        ("+15005550010", "delivered", False),
        ("+14155550177", "read", True),
    ],
)
async def test_simulator_numbers_through_the_status_callbacks(
    client: httpx.AsyncClient,
    acme: Tenant,
    channel: dict[str, Any],
    jobs: Jobs,
    number: str,
    final: str,
    read: bool,
) -> None:
    ticket_id = await open_conversation(client, acme, sender=number)
    sent = await reply(client, acme, ticket_id, text="Hello")
    assert sent.status_code == 201
    await jobs.drain()
    outbound = await the_outbound(client, acme, ticket_id)
    assert outbound["status"] == final
    assert (outbound["read_at"] is not None) is read


async def test_simulator_invalid_number_fails_at_once(
    client: httpx.AsyncClient,
    acme: Tenant,
    channel: dict[str, Any],
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    ticket_id = await open_conversation(client, acme, sender="+15005550001")
    sent = await reply(client, acme, ticket_id, text="Hello")
    assert sent.status_code == 201
    assert sent.json()["status"] == "failed"
    assert "131009" in sent.json()["error"]
    assert "message.failed" in await event_types(sessionmaker)


async def test_test_key_cannot_use_a_live_ticket_channel(
    client: httpx.AsyncClient, acme: Tenant, tenants: TenantFactory, platform: FakeGraph
) -> None:
    live = await tenants.key(acme, ["full_access"], livemode=True)
    await create_channel(client, live, PHONE_ID, platform=platform)
    ticket_id = await open_conversation(client, live)
    # The live conversation is live data: the test key neither lists nor answers it.
    listed = await client.get("/api/v1/inbox/tickets", headers=acme.headers)
    assert listed.json()["data"] == []
    assert (await reply(client, acme, ticket_id, text="hi")).status_code == 403
