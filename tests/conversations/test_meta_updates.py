"""Meta's webhooks beyond messages: template category and status words, account updates,
business-scoped user ids (BSUID) on inbound messages and replies, and message pricing;
signed posts on both databases, redelivered and out of order."""

from __future__ import annotations

from typing import Any

import httpx
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.contacts.models import Contact
from app.conversations.models import Message
from app.integrations.whatsapp import payloads
from tests.conftest import Tenant, graphql
from tests.conversations.conftest import PHONE_ID
from tests.conversations.test_whatsapp_webhooks import post_signed, reply, the_outbound
from tests.templates.conftest import WABA, Jobs, template_body

USER_ID = "US.13491208655302741918"
CHANNEL_NUMBER = "+14155550142"


async def approved_template(client: httpx.AsyncClient, acme: Tenant, channel_id: str) -> str:
    created = await client.post(
        "/api/v1/templates", json=template_body(channel_id), headers=acme.headers
    )
    assert created.status_code == 201, created.text
    return str(created.json()["id"])


async def template_of(client: httpx.AsyncClient, acme: Tenant, template_id: str) -> Any:
    return (await client.get(f"/api/v1/templates/{template_id}", headers=acme.headers)).json()


async def test_category_update_is_applied_in_order(
    client: httpx.AsyncClient, acme: Tenant, channel: dict[str, Any], jobs: Jobs
) -> None:
    template_id = await approved_template(client, acme, channel["id"])
    await jobs.run_only("templates.submit")
    platform_id = (await template_of(client, acme, template_id))["platform_template_id"]
    name, language = "order_shipped", "en_US"
    approved = payloads.template_status_update(WABA, platform_id, name, language, "APPROVED")
    assert (await post_signed(client, payloads.at_time(approved, 1_799_000_000))).status_code == 200

    # Meta's notice of a change to come changes nothing yet.
    notice = payloads.envelope(
        WABA,
        "template_category_update",
        {
            "message_template_id": int(platform_id),
            "message_template_name": name,
            "message_template_language": language,
            "correct_category": "MARKETING",
            "new_category": "UTILITY",
            "category_update_timestamp": 1_900_000_000,
        },
    )
    assert (await post_signed(client, payloads.at_time(notice, 1_800_000_000))).status_code == 200
    assert (await template_of(client, acme, template_id))["category"] == "UTILITY"

    change = payloads.template_category_update(
        WABA, platform_id, name, language, "UTILITY", "MARKETING"
    )
    for _ in range(2):  # delivered twice
        response = await post_signed(client, payloads.at_time(change, 1_800_000_100))
        assert response.status_code == 200
    older = payloads.template_category_update(
        WABA, platform_id, name, language, "MARKETING", "UTILITY"
    )
    assert (await post_signed(client, payloads.at_time(older, 1_800_000_050))).status_code == 200
    template = await template_of(client, acme, template_id)
    assert (template["category"], template["previous_category"]) == ("MARKETING", "UTILITY")
    assert template["category_updated_at"].startswith("2027-01-15")

    # Meta's own status word is kept beside the folded status.
    paused = payloads.template_status_update(WABA, platform_id, name, language, "PAUSED")
    assert (await post_signed(client, payloads.at_time(paused, 1_800_000_200))).status_code == 200
    stale = payloads.template_status_update(WABA, platform_id, name, language, "REJECTED")
    assert (await post_signed(client, payloads.at_time(stale, 1_800_000_150))).status_code == 200
    template = await template_of(client, acme, template_id)
    assert (template["status"], template["platform_status"]) == ("APPROVED", "PAUSED")

    query = """query($id: ID!) {
        messageTemplate(id: $id) { category previousCategory platformStatus } }"""
    data = (await graphql(client, query, {"id": template_id}, acme.headers))["data"]
    assert data["messageTemplate"] == {
        "category": "MARKETING",
        "previousCategory": "UTILITY",
        "platformStatus": "PAUSED",
    }


async def test_account_update_reaches_the_accounts_channels(
    client: httpx.AsyncClient, acme: Tenant, channel: dict[str, Any]
) -> None:
    update = payloads.envelope(
        WABA, "account_update", {"phone_number": CHANNEL_NUMBER, "event": "ACCOUNT_VIOLATION"}
    )
    assert (await post_signed(client, payloads.at_time(update, 1_800_000_000))).status_code == 200
    other = payloads.envelope("999999", "account_update", {"event": "DISABLED_UPDATE"})
    assert (await post_signed(client, other)).status_code == 200
    shown = (await client.get(f"/api/v1/channels/{channel['id']}", headers=acme.headers)).json()
    assert shown["account_status"] == "ACCOUNT_VIOLATION"


async def test_bsuid_only_inbound_message_is_stored_and_replied(
    client: httpx.AsyncClient,
    acme: Tenant,
    channel: dict[str, Any],
    jobs: Jobs,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    message = payloads.inbound_text(
        WABA, PHONE_ID, CHANNEL_NUMBER, "wamid.bsuid1", USER_ID, "hello", profile_name="Kim"
    )
    value = message["entry"][0]["changes"][0]["value"]
    assert "from" not in value["messages"][0]
    assert "wa_id" not in value["contacts"][0]
    for _ in range(2):  # delivered twice: stored once
        assert (await post_signed(client, message)).status_code == 200
    async with sessionmaker() as session:
        contacts = list(await session.scalars(select(Contact)))
        stored = list(await session.scalars(select(Message)))
    assert [(c.platform_user_id, c.phone_number, c.name) for c in contacts] == [
        (USER_ID, "", "Kim")
    ]
    assert [(m.direction, m.text) for m in stored] == [("inbound", "hello")]
    contact = (await client.get(f"/api/v1/contacts/{contacts[0].id}", headers=acme.headers)).json()
    assert contact["platform_user_id"] == USER_ID

    tickets = (await client.get("/api/v1/inbox/tickets", headers=acme.headers)).json()["data"]
    (ticket,) = tickets
    sent = await reply(client, acme, ticket["id"], text="Hi Kim")
    assert sent.status_code == 201, sent.text
    assert sent.json()["status"] == "sent"
    await jobs.drain()  # the simulator's statuses name the user by id (`recipient_user_id`)
    outbound = await the_outbound(client, acme, ticket["id"])
    assert outbound["status"] == "read"
    # Replies are priced by Meta as service conversations: not billed.
    assert (outbound["pricing_category"], outbound["billable"]) == ("service", False)

    # A later message that names both the number and the id joins the same person.
    both = payloads.inbound_text(
        WABA, PHONE_ID, CHANNEL_NUMBER, "wamid.phone1", "+14155550177", "again"
    )
    value = both["entry"][0]["changes"][0]["value"]
    value["contacts"][0]["user_id"] = "US.999"
    assert (await post_signed(client, both)).status_code == 200
    async with sessionmaker() as session:
        linked = await session.scalar(select(Contact).where(Contact.phone_number == "+14155550177"))
    assert linked is not None
    assert linked.platform_user_id == "US.999"


async def test_inbound_without_any_sender_is_skipped(
    client: httpx.AsyncClient,
    channel: dict[str, Any],
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    message = payloads.inbound_text(
        WABA, PHONE_ID, CHANNEL_NUMBER, "wamid.nobody", USER_ID, "hello"
    )
    value = message["entry"][0]["changes"][0]["value"]
    del value["messages"][0]["from_user_id"]
    value["contacts"][0]["user_id"] = "not a bsuid"
    assert (await post_signed(client, message)).status_code == 200
    async with sessionmaker() as session:
        assert list(await session.scalars(select(Message))) == []
