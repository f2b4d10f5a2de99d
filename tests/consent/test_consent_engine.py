"""A STOP keyword through the real job engine: a Dramatiq worker (StubBroker on SQLite and
PostgreSQL, RedisBroker on PostgreSQL) sends the confirmation reply, and the campaign
launched next is dispatched by the worker to everyone but the contact who opted out."""

from __future__ import annotations

import time

import orjson
from sqlalchemy import select

from app.campaigns.models import CampaignRecipient
from app.conversations.models import Message
from app.integrations.whatsapp import payloads
from tests.campaigns.conftest import CAMPAIGNS, simulated_campaign_body
from tests.campaigns.test_meta_limits import CHANNEL_NUMBER, HOOK
from tests.engine.fixtures import backend_fixture, stack_fixture
from tests.templates.conftest import WABA
from tests.webhooks.test_delivery_engine import Engine, eventually

STOPPED = "+14155550310"
KEPT = "+14155550311"
REPLY = "You will get no more offers. Reply START to come back."


backend = backend_fixture("consent")
engine = stack_fixture()


async def test_stop_opts_out_confirms_and_the_next_campaign_skips_the_contact(
    engine: Engine,
) -> None:
    client = engine.client
    tenant = await engine.tenants.organization()
    body = await simulated_campaign_body(client, tenant, [STOPPED, KEPT], "After stop", eventually)
    changed = await client.put(
        "/api/v1/consent/settings", json={"opt_out_reply": REPLY}, headers=tenant.headers
    )
    assert changed.status_code == 200, changed.text
    channel = (await client.get("/api/v1/channels", headers=tenant.headers)).json()["data"][0]
    inbound = payloads.inbound_text(
        WABA,
        channel["phone_number_id"],
        CHANNEL_NUMBER,
        "wamid.stop-engine",
        STOPPED,
        " STOP ",
        profile_name="Ada",
        timestamp=int(time.time()),
    )
    raw = orjson.dumps(inbound)
    response = await client.post(
        HOOK,
        content=raw,
        headers={
            "Content-Type": "application/json",
            payloads.SIGNATURE_HEADER: payloads.sign(
                engine.settings.whatsapp_app_secret_value(), raw
            ),
        },
    )
    assert response.status_code == 200, response.text
    contacts = await client.get(
        "/api/v1/contacts", params={"search": STOPPED}, headers=tenant.headers
    )
    [stopped] = contacts.json()["data"]
    assert stopped["marketing_opt_out"]["source"] == "keyword"
    assert stopped["do_not_call"] is True

    async def confirmed() -> bool:
        async with engine.sessionmaker() as session:
            sent = list(
                await session.scalars(
                    select(Message).where(Message.direction == "outbound", Message.status == "sent")
                )
            )
        return [message.text for message in sent] == [REPLY]

    await eventually(confirmed, 20.0)  # the worker sent the confirmation

    created = await client.post(CAMPAIGNS, json=body, headers=tenant.headers)
    campaign_id = created.json()["id"]
    launched = await client.post(f"{CAMPAIGNS}/{campaign_id}/launch", headers=tenant.headers)
    assert launched.status_code == 200, launched.text
    assert launched.json()["total_contacts_count"] == 1

    async def completed() -> bool:
        found = (await client.get(f"{CAMPAIGNS}/{campaign_id}", headers=tenant.headers)).json()
        return bool(found["status"] == "completed")

    await eventually(completed, 20.0)
    async with engine.sessionmaker() as session:
        recipients = list(
            await session.scalars(
                select(CampaignRecipient.contact_id).where(
                    CampaignRecipient.campaign_id == campaign_id
                )
            )
        )
    assert recipients == [
        row["id"]
        for row in (
            await client.get("/api/v1/contacts", params={"search": KEPT}, headers=tenant.headers)
        ).json()["data"]
    ]
