"""A WhatsApp phone number id belongs to one organization: who may register it (verified with
the platform when live), and that its inbound messages and statuses reach the channel holding
it and nothing else. REST and GraphQL, on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.campaigns.models import Campaign, CampaignRecipient
from app.channels import service as channels
from app.channels.models import Channel
from app.conversations.models import Message, ParkedStatus
from app.conversations.tasks import deliver_callback
from app.core.ids import new_id
from app.events.models import Event
from app.integrations.whatsapp import payloads
from app.resources import Resources
from tests.conftest import Tenant, TenantFactory, graphql
from tests.conversations.conftest import APP_SECRET
from tests.conversations.test_whatsapp_webhooks import post_signed
from tests.integrations.whatsapp.fake_graph import FakeGraph

CHANNELS = "/api/v1/channels"
NUMBER = "222000222"
WABA = "102290129340398"
A_TOKEN = "EAAGorg-a-live-token"
B_TOKEN = "EAAGorg-b-token"
IN_USE = {"detail": "Phone number is already in use"}
CREATE = """
mutation($input: ChannelCreateInput!) {
  createChannel(input: $input) { channel { id livemode } errors { code message field } }
}"""


def channel_body(token: str, number: str = NUMBER, **fields: Any) -> dict[str, Any]:
    return {
        "display_phone_number": "+14155550142",
        "phone_number_id": number,
        "business_account_id": WABA,
        "access_token": token,
        **fields,
    }


async def register(
    client: httpx.AsyncClient, tenant: Tenant, token: str, number: str = NUMBER
) -> httpx.Response:
    return await client.post(CHANNELS, json=channel_body(token, number), headers=tenant.headers)


def inbound(message_id: str, text: str, number: str = NUMBER) -> dict[str, Any]:
    return payloads.inbound_text(
        WABA,
        number,
        "+14155550142",
        message_id,
        "+14155550100",
        text,
        profile_name="Alice Customer",
    )


async def events_of(sessionmaker: async_sessionmaker[AsyncSession], tenant: Tenant) -> list[str]:
    async with sessionmaker() as session:
        rows = await session.scalars(
            select(Event.type)
            .where(Event.organization_id == tenant.organization_id)
            .order_by(Event.created_at)
        )
        return list(rows)


async def inbox_texts(client: httpx.AsyncClient, tenant: Tenant) -> list[str | None]:
    tickets = (await client.get("/api/v1/inbox/tickets", headers=tenant.headers)).json()["data"]
    texts: list[str | None] = []
    for ticket in tickets:
        messages = await client.get(
            f"/api/v1/inbox/tickets/{ticket['id']}/messages", headers=tenant.headers
        )
        texts.extend(message["text"] for message in messages.json()["data"])
    return texts


@pytest.fixture
async def org_a(tenants: TenantFactory, acme: Tenant, platform: FakeGraph) -> Tenant:
    """Acme's live key; acme's business account owns NUMBER on the platform."""
    platform.add_phone_number(NUMBER, token=A_TOKEN)
    return await tenants.key(acme, ["full_access"], livemode=True)


async def test_a_test_key_cannot_take_a_number_held_live_and_never_reads_its_messages(
    client: httpx.AsyncClient,
    org_a: Tenant,
    globex: Tenant,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    """The reproduction: org A (live) holds 222000222; org B, with only a test key, asks for
    a channel with 222000222; a signed inbound message reaches org A only."""
    held = await register(client, org_a, A_TOKEN)
    assert held.status_code == 201, held.text
    taken = await register(client, globex, B_TOKEN)
    assert taken.status_code == 409
    assert taken.json() == IN_USE
    card = "My card number is 4111 1111 1111 1111"
    assert (await post_signed(client, inbound("wamid.card", card))).status_code == 200

    assert await inbox_texts(client, org_a) == [card]
    assert await inbox_texts(client, globex) == []
    assert (await client.get("/api/v1/contacts", headers=globex.headers)).json()["data"] == []
    assert "message.received" in await events_of(sessionmaker, org_a)
    # Nothing for org B to deliver to its webhooks or subscriptions: no event at all.
    assert await events_of(sessionmaker, globex) == []


async def test_a_live_channel_is_never_refused_because_of_a_test_channel(
    client: httpx.AsyncClient,
    org_a: Tenant,
    acme: Tenant,
    globex: Tenant,
    resources: Resources,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    # Org B registered the number first, in test mode (nothing verifies a test channel).
    squatted = await register(client, globex, B_TOKEN)
    assert squatted.status_code == 201
    live = await register(client, org_a, A_TOKEN)
    assert live.status_code == 201, live.text
    live_id = live.json()["id"]
    # The platform's traffic goes to the live holder only.
    assert (await post_signed(client, inbound("wamid.real", "Hello Acme"))).status_code == 200
    assert await inbox_texts(client, org_a) == ["Hello Acme"]
    assert await inbox_texts(client, globex) == []
    # The simulator's traffic for the number goes to the test-mode channel that holds it.
    body = orjson.dumps(inbound("wamid.simulated", "Simulated hello"))
    await deliver_callback(resources, body.decode(), payloads.sign(APP_SECRET, body))
    assert await inbox_texts(client, globex) == ["Simulated hello"]
    assert await inbox_texts(client, org_a) == ["Hello Acme"]
    async with sessionmaker() as session:
        channel_of = dict(
            (await session.execute(select(Message.platform_message_id, Message.channel_id))).all()
        )
    assert channel_of == {"wamid.real": live_id, "wamid.simulated": squatted.json()["id"]}
    # The number's test-mode slot stays org B's: another organization is refused, acme too.
    for tenant in (acme, org_a):
        again = await register(client, tenant, A_TOKEN)
        assert again.status_code == 409


async def test_an_organization_holds_its_number_in_both_modes(
    client: httpx.AsyncClient,
    org_a: Tenant,
    acme: Tenant,
    resources: Resources,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    test_mode = await register(client, acme, A_TOKEN)  # test mode first
    assert test_mode.status_code == 201
    live = await register(client, org_a, A_TOKEN)
    assert live.status_code == 201
    assert (await post_signed(client, inbound("wamid.platform", "From the platform"))).is_success
    body = orjson.dumps(inbound("wamid.simulator", "From the simulator"))
    await deliver_callback(resources, body.decode(), payloads.sign(APP_SECRET, body))
    async with sessionmaker() as session:
        channel_of = dict(
            (await session.execute(select(Message.platform_message_id, Message.channel_id))).all()
        )
    assert channel_of == {
        "wamid.platform": live.json()["id"],
        "wamid.simulator": test_mode.json()["id"],
    }


async def test_live_channels_are_verified_with_the_platform(
    client: httpx.AsyncClient,
    org_a: Tenant,
    globex: Tenant,
    tenants: TenantFactory,
    platform: FakeGraph,
) -> None:
    globex_live = await tenants.key(globex, ["full_access"], livemode=True)
    platform.add_phone_number("999111", token=B_TOKEN)  # globex's account has a number too
    # A token of another business account cannot read the number: 400, nothing stored.
    refused = await register(client, globex_live, B_TOKEN)
    assert refused.status_code == 400
    detail = refused.json()["detail"]
    assert detail.startswith(f"The access token cannot read phone number {NUMBER}")
    assert "(code 100)" in detail
    # What the platform was asked: the number's node, the token as a bearer header only.
    (seen,) = platform.seen(f"/v19.0/{NUMBER}")
    assert (seen.method, seen.query["fields"]) == ("GET", "id,display_phone_number,verified_name")
    assert seen.headers["authorization"] == f"Bearer {B_TOKEN}"
    assert "access_token" not in seen.query
    # A token the platform does not know at all: 400 as well.
    assert (await register(client, globex_live, "EAAGrevoked")).status_code == 400
    # An id the token reads that is not a phone number (say, its business account): 400.
    platform.phone_numbers["999111"].display_phone_number = ""
    assert (await register(client, globex_live, B_TOKEN, "999111")).status_code == 400
    # The platform failing: 502, the request may be sent again.
    platform.fail(f"/v19.0/{NUMBER}", 503, times=2)
    unavailable = await register(client, org_a, A_TOKEN)
    assert unavailable.status_code == 502
    assert unavailable.json()["detail"].startswith("The messaging platform answered")
    assert (await client.get(CHANNELS, headers=org_a.headers)).json()["total_count"] == 0
    # The owner's token reads it: verified.
    assert (await register(client, org_a, A_TOKEN)).status_code == 201
    # Test-mode channels are never verified: nothing more reached the platform.
    before = len(platform.requests)
    assert (await register(client, globex, B_TOKEN, "333000333")).status_code == 201
    assert len(platform.requests) == before


async def test_graphql_answers_the_same_typed_errors(
    client: httpx.AsyncClient, org_a: Tenant, globex: Tenant, tenants: TenantFactory
) -> None:
    def variables(token: str) -> dict[str, Any]:
        return {
            "input": {
                "displayPhoneNumber": "+14155550142",
                "phoneNumberId": NUMBER,
                "businessAccountId": WABA,
                "accessToken": token,
            }
        }

    globex_live = await tenants.key(globex, ["full_access"], livemode=True)
    unverified = await graphql(client, CREATE, variables(B_TOKEN), globex_live.headers)
    (error,) = unverified["data"]["createChannel"]["errors"]
    assert (error["code"], error["field"]) == ("phone_number_not_verified", "accessToken")
    created = await graphql(client, CREATE, variables(A_TOKEN), org_a.headers)
    assert created["data"]["createChannel"]["errors"] == []
    taken = await graphql(client, CREATE, variables(B_TOKEN), globex.headers)
    assert taken["data"]["createChannel"] == {
        "channel": None,
        "errors": [
            {
                "code": "conflict",
                "message": "Phone number is already in use",
                "field": "phoneNumberId",
            }
        ],
    }


async def test_concurrent_creates_are_settled_by_the_database(
    client: httpx.AsyncClient,
    acme: Tenant,
    globex: Tenant,
    sessionmaker: async_sessionmaker[AsyncSession],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert (await register(client, acme, A_TOKEN)).status_code == 201
    # Globex's check runs before acme's create commits (a race): it finds no holder, and the
    # unique index refuses the row.
    real = channels.holder_of
    calls = 0

    async def raced(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        return None if calls == 1 else await real(*args, **kwargs)

    monkeypatch.setattr(channels, "holder_of", raced)
    response = await register(client, globex, B_TOKEN)
    assert response.status_code == 409
    assert response.json() == IN_USE
    async with sessionmaker() as session:
        count = await session.scalar(select(func.count()).select_from(Channel))
        assert count == 1
        # The index itself: a second holder of the number in one mode is refused.
        session.add(
            Channel(
                organization_id=globex.organization_id,
                display_phone_number="+14155550142",
                phone_number_id=NUMBER,
                business_account_id=WABA,
                livemode=False,
                access_token_encrypted="sealed",
            )
        )
        with pytest.raises(IntegrityError):
            await session.flush()


async def campaign_message(
    sessionmaker: async_sessionmaker[AsyncSession], tenant: Tenant, channel_id: str, wamid: str
) -> str:
    """A sending campaign of the channel with one recipient the platform accepted as `wamid`."""
    campaign_id = new_id()
    async with sessionmaker() as session:
        session.add(
            Campaign(
                id=campaign_id,
                organization_id=tenant.organization_id,
                name="Spring sale",
                chat_phone_number_id=channel_id,
                audience_type="all",
                status="sending",
                total_contacts_count=1,
                sent_count=1,
                livemode=False,
            )
        )
        await session.flush()
        session.add(
            CampaignRecipient(
                campaign_id=campaign_id,
                contact_id=new_id(),
                phone_number="+14155550100",
                name="Ada",
                status="sent",
                platform_message_id=wamid,
            )
        )
        await session.commit()
    return campaign_id


async def test_a_status_reaches_only_the_channel_holding_its_number(
    client: httpx.AsyncClient,
    acme: Tenant,
    globex: Tenant,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    ours = (await register(client, acme, A_TOKEN, "444000444")).json()
    theirs = (await register(client, globex, B_TOKEN, "555000555")).json()
    campaign_id = await campaign_message(sessionmaker, acme, ours["id"], "wamid.acme-1")

    def failed(number: str) -> dict[str, Any]:
        return payloads.message_status(WABA, number, "+1", "wamid.acme-1", "+14155550100", "failed")

    # Posted under globex's number: acme's ledger does not move; kept for globex's channel.
    assert (await post_signed(client, failed("555000555"))).status_code == 200
    campaign = (await client.get(f"/api/v1/campaigns/{campaign_id}", headers=acme.headers)).json()
    assert (campaign["sent_count"], campaign["failed_count"]) == (1, 0)
    async with sessionmaker() as session:
        parked = (await session.execute(select(ParkedStatus.channel_id))).scalars().all()
    assert parked == [theirs["id"]]
    # Under acme's own number it applies.
    assert (await post_signed(client, failed("444000444"))).status_code == 200
    campaign = (await client.get(f"/api/v1/campaigns/{campaign_id}", headers=acme.headers)).json()
    assert campaign["failed_count"] == 1
