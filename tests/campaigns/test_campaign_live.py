"""A live-mode campaign: the real Graph API client against the local fake Graph API, which
records every send. Claims commit before the network call; each recipient is sent once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.campaigns.meta_limits import retry_job_id
from app.config import Settings
from app.core.ids import new_id
from app.kit.outbox_models import OutboxJob
from app.templates.models import MessageTemplate
from tests.campaigns.conftest import CAMPAIGNS, Jobs, campaign_body, create_contact
from tests.campaigns.test_meta_limits import an_hour_passes, ledger
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


async def live_audience(
    client: httpx.AsyncClient,
    acme: Tenant,
    tenants: TenantFactory,
    graph: FakeGraph,
    sessionmaker: async_sessionmaker[AsyncSession],
    phone_number_id: str,
    phones: list[str],
) -> tuple[Tenant, dict[str, Any], dict[str, Any]]:
    """A live key, its live channel on the fake Graph API, an approved template, and one
    contact per phone ("Person n"): (key, channel, template)."""
    live = await tenants.key(acme, ["full_access"], livemode=True)
    channel = await create_channel(client, live, phone_number_id=phone_number_id, platform=graph)
    template = await approved_live_template(sessionmaker, acme, channel["id"])
    for n, phone in enumerate(phones):
        await create_contact(client, live, phone, f"Person {n}")
    return live, channel, template


async def test_live_campaign_sends_each_recipient_once_through_the_graph_api(
    client: httpx.AsyncClient,
    acme: Tenant,
    tenants: TenantFactory,
    graph: FakeGraph,
    jobs: Jobs,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    phones = ["+14155550100", "+14155550101", "+14155550102"]
    live, channel, template = await live_audience(
        client, acme, tenants, graph, sessionmaker, "live-106540352242922", phones
    )
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


async def test_a_send_refused_with_131049_defers_the_recipient_like_the_status_does(
    client: httpx.AsyncClient,
    acme: Tenant,
    tenants: TenantFactory,
    graph: FakeGraph,
    jobs: Jobs,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    phones = ["+14155550180", "+14155550181"]
    live, channel, template = await live_audience(
        client, acme, tenants, graph, sessionmaker, "live-106540352242923", phones
    )
    # Meta answers the send call itself with its per-user marketing limit.
    graph.fail_with(
        "/messages",
        400,
        131049,
        "This message was not delivered to maintain healthy ecosystem engagement.",
    )
    created = await client.post(
        CAMPAIGNS, json=campaign_body(channel, template), headers=live.headers
    )
    campaign_id = created.json()["id"]
    await client.post(f"{CAMPAIGNS}/{campaign_id}/launch", headers=live.headers)
    await jobs.drain(delayed=False)
    held = (await client.get(f"{CAMPAIGNS}/{campaign_id}", headers=live.headers)).json()
    # Deferred, not failed: the campaign waits for the retry, as after a 131049 status.
    assert (held["status"], held["sent_count"], held["failed_count"]) == ("sending", 1, 0)
    assert held["deferred_count"] == 1
    rows = await ledger(sessionmaker, campaign_id)
    [deferred] = [row for row in rows.values() if row.status == "deferred"]
    assert deferred.deferrals == 1
    assert deferred.deferred_until is not None
    assert deferred.platform_message_id is None
    assert "131049" in (deferred.error or "")
    async with sessionmaker() as session:
        retry = await session.get(OutboxJob, retry_job_id(campaign_id))
    assert retry is not None
    assert retry.actor == "campaigns.deferred_retry"

    await an_hour_passes(sessionmaker, campaign_id)
    await jobs.drain(delayed=False)
    done = (await client.get(f"{CAMPAIGNS}/{campaign_id}", headers=live.headers)).json()
    assert (done["status"], done["sent_count"], done["deferred_count"]) == ("completed", 2, 0)
    retried = (await ledger(sessionmaker, campaign_id))[deferred.phone_number]
    assert (retried.status, retried.deferrals) == ("sent", 1)
    assert retried.platform_message_id is not None


async def test_a_131049_send_beyond_the_retries_fails_with_metas_reason(
    client: httpx.AsyncClient,
    acme: Tenant,
    tenants: TenantFactory,
    graph: FakeGraph,
    jobs: Jobs,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    live, channel, template = await live_audience(
        client, acme, tenants, graph, sessionmaker, "live-106540352242924", ["+14155550182"]
    )
    created = await client.post(
        CAMPAIGNS, json=campaign_body(channel, template), headers=live.headers
    )
    campaign_id = created.json()["id"]
    # Refused each time (the default policy allows 3 retries): deferred 3 times, then failed.
    graph.fail_with("/messages", 400, 131049, "Per-user marketing limit", times=4)
    await client.post(f"{CAMPAIGNS}/{campaign_id}/launch", headers=live.headers)
    for _ in range(4):
        await jobs.drain(delayed=False)
        await an_hour_passes(sessionmaker, campaign_id)
    await jobs.drain(delayed=False)
    [row] = (await ledger(sessionmaker, campaign_id)).values()
    assert (row.status, row.deferrals) == ("failed", 3)
    assert "131049" in (row.error or "")
    final = (await client.get(f"{CAMPAIGNS}/{campaign_id}", headers=live.headers)).json()
    assert (final["status"], final["failed_count"], final["deferred_count"]) == (
        "completed",
        1,
        0,
    )
