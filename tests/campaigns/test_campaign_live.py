"""A live-mode campaign: the real Graph API client against the local fake Graph API, which
records every send. Claims commit before the network call; each recipient is sent once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.config import Settings
from app.kit.ids import new_id
from app.templates.models import MessageTemplate
from tests.campaigns.conftest import CAMPAIGNS, Jobs, campaign_body, create_contact
from tests.conftest import Tenant, TenantFactory, make_settings
from tests.integrations.whatsapp.fake_graph import FakeGraph, running_fake_graph
from tests.templates.conftest import VALID_BODY, WABA, create_channel

TOKEN = "EAAGtest-token"


@pytest.fixture(scope="module")
def graph() -> Iterator[FakeGraph]:
    with running_fake_graph(TOKEN) as fake:
        yield fake


@pytest.fixture
def settings(database_url: str, tmp_path: Path, graph: FakeGraph) -> Settings:
    return make_settings(database_url, tmp_path, graph_api_url=graph.base_url)


async def approved_live_template(
    sessionmaker: async_sessionmaker[AsyncSession], tenant: Tenant, channel_id: str
) -> dict[str, Any]:
    """An APPROVED live template, as a sync from the platform would have stored it."""
    template_id = new_id()
    async with sessionmaker() as session:
        session.add(
            MessageTemplate(
                id=template_id,
                organization_id=tenant.organization_id,
                channel_id=channel_id,
                business_account_id=WABA,
                platform_template_id="1234567890",
                name="order_shipped",
                language="en_US",
                category="UTILITY",
                status="APPROVED",
                components=[VALID_BODY],
                quality_score="GREEN",
                livemode=True,
            )
        )
        await session.commit()
    return {"id": template_id}


async def test_live_campaign_sends_each_recipient_once_through_the_graph_api(
    client: httpx.AsyncClient,
    acme: Tenant,
    tenants: TenantFactory,
    graph: FakeGraph,
    jobs: Jobs,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    live = await tenants.key(acme, ["full_access"], livemode=True)
    channel = await create_channel(
        client, live, phone_number_id="live-106540352242922", platform=graph
    )
    template = await approved_live_template(sessionmaker, acme, channel["id"])
    phones = ["+14155550100", "+14155550101", "+14155550102"]
    for n, phone in enumerate(phones):
        await create_contact(client, live, phone, f"Person {n}")
    before = len(graph.messages)
    # The platform refuses the first send (an invalid number): that recipient fails.
    graph.fail_with("/messages", 400, 131009, "(#131009) Parameter value is not valid")
    created = await client.post(
        CAMPAIGNS, json=campaign_body(channel, template), headers=live.headers
    )
    assert created.status_code == 201, created.text
    campaign_id = created.json()["id"]
    # A test key does not see the live campaign.
    hidden = await client.get(f"{CAMPAIGNS}/{campaign_id}", headers=acme.headers)
    assert hidden.status_code == 403
    assert hidden.json()["error"]["code"] == "livemode_mismatch"
    launched = await client.post(f"{CAMPAIGNS}/{campaign_id}/launch", headers=live.headers)
    assert launched.json()["status"] == "sending"
    await jobs.drain()
    settled = (await client.get(f"{CAMPAIGNS}/{campaign_id}", headers=live.headers)).json()
    assert (settled["status"], settled["sent_count"], settled["failed_count"]) == (
        "completed",
        2,
        1,
    )
    sent = graph.messages[before:]
    assert len(sent) == 2
    assert len({message["to"] for message in sent}) == 2
    by_phone = {message["to"]: message for message in sent}
    for phone, message in by_phone.items():
        parameters = message["template"]["components"][0]["parameters"]
        assert parameters == [
            {"type": "text", "text": f"Person {phones.index(phone)}"},
            {"type": "text", "text": "A-1001"},
        ]
