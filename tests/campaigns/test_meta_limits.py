"""Meta's limits and ratings on campaigns: 131049 deferral and retry, RED pauses, YELLOW
steps the rate down, pricing on the ledger and the campaign's cost; through signed webhook
posts on both databases."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.campaigns.meta_limits import retry_job_id
from app.campaigns.models import CampaignRecipient
from app.config import Settings
from app.core.clock import utcnow
from app.integrations.whatsapp import payloads
from app.kit.outbox_models import OutboxJob
from app.resources import Resources
from tests.campaigns.conftest import (
    CAMPAIGNS,
    Jobs,
    campaign_body,
    create_contact,
    fetch_campaign,
    launch_campaign,
    ledger,
)
from tests.conftest import Tenant, graphql, make_settings
from tests.integrations.whatsapp.fake_graph import FakeGraph
from tests.templates.conftest import WABA

HOOK = "/webhooks/whatsapp"
CHANNEL_NUMBER = "+14155550142"
RATE_CARD = {
    "currency": "USD",
    "rates": {"utility": {"US": 0.01, "*": 0.02}, "marketing": {"US": 0.025, "*": 0.05}},
}
LIMITED = [
    {
        "code": 131049,
        "title": "This message was not delivered to maintain healthy ecosystem engagement.",
        "message": "This message was not delivered to maintain healthy ecosystem engagement.",
        "error_data": {"details": "In order to maintain a healthy ecosystem engagement"},
    }
]


@pytest.fixture
def settings(database_url: str, tmp_path: Path, platform: FakeGraph) -> Settings:
    return make_settings(
        database_url,
        tmp_path,
        graph_api_url=platform.base_url,
        campaign_deferral_seconds=3600.0,
        campaign_deferral_max_retries=1,
        message_rate_card=orjson.dumps(RATE_CARD).decode(),
    )


async def post_signed(
    client: httpx.AsyncClient, resources: Resources, payload: dict[str, Any]
) -> None:
    body = orjson.dumps(payload)
    secret = resources.settings.whatsapp_app_secret_value()
    response = await client.post(
        HOOK,
        content=body,
        headers={
            "Content-Type": "application/json",
            payloads.SIGNATURE_HEADER: payloads.sign(secret, body),
        },
    )
    assert response.status_code == 200, response.text


async def launched(
    client: httpx.AsyncClient,
    acme: Tenant,
    channel: dict[str, Any],
    template: dict[str, Any],
    phones: list[str],
) -> dict[str, Any]:
    for n, phone in enumerate(phones):
        await create_contact(client, acme, phone, f"Customer {n}")
    return await launch_campaign(client, acme, campaign_body(channel, template))


async def an_hour_passes(sessionmaker: async_sessionmaker[AsyncSession], campaign_id: str) -> None:
    """The deferral's wait (an hour here), without waiting: the deferred recipients and the
    campaign's retry job are due now."""
    past = utcnow() - timedelta(seconds=1)
    async with sessionmaker() as session:
        await session.execute(
            update(CampaignRecipient)
            .where(
                CampaignRecipient.campaign_id == campaign_id,
                CampaignRecipient.status == "deferred",
            )
            .values(deferred_until=past)
        )
        await session.execute(
            update(OutboxJob)
            .where(OutboxJob.id == retry_job_id(campaign_id))
            .values(available_at=past)
        )
        await session.commit()


def failed_limited(channel: dict[str, Any], message_id: str, to: str) -> dict[str, Any]:
    return payloads.message_status(
        WABA, channel["phone_number_id"], CHANNEL_NUMBER, message_id, to, "failed", errors=LIMITED
    )


# --- 131049: deferred, then sent on retry ------------------------------------------------


async def test_marketing_limit_defers_then_retry_sends(
    client: httpx.AsyncClient,
    acme: Tenant,
    channel: dict[str, Any],
    template: dict[str, Any],
    jobs: Jobs,
    resources: Resources,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    limited, other = "+14155550171", "+14155550172"
    body = await launched(client, acme, channel, template, [limited, other])
    await jobs.drain(delayed=False)  # the sends and their `sent` statuses, not the later ones
    assert (await fetch_campaign(client, acme, body["id"]))["status"] == "completed"
    first_attempt = (await ledger(sessionmaker, body["id"]))[limited].platform_message_id
    assert first_attempt

    # Meta holds the message back (131049), twice (a redelivery): deferred once.
    for _ in range(2):
        await post_signed(client, resources, failed_limited(channel, first_attempt, limited))
    deferred = await fetch_campaign(client, acme, body["id"])
    assert deferred["status"] == "sending"  # not completed while a recipient waits
    assert (deferred["sent_count"], deferred["failed_count"], deferred["deferred_count"]) == (
        1,
        0,
        1,
    )
    row = (await ledger(sessionmaker, body["id"]))[limited]
    assert (row.status, row.deferrals) == ("deferred", 1)
    assert row.deferred_until is not None
    assert "131049" in (row.error or "")
    # A late status about the held-back attempt changes nothing.
    late = payloads.message_status(
        WABA, channel["phone_number_id"], CHANNEL_NUMBER, first_attempt, limited, "sent"
    )
    await post_signed(client, resources, late)
    assert (await ledger(sessionmaker, body["id"]))[limited].status == "deferred"

    await jobs.drain(delayed=False)  # the retry is not due yet
    assert (await ledger(sessionmaker, body["id"]))[limited].status == "deferred"
    await an_hour_passes(sessionmaker, body["id"])
    ran = await jobs.drain(delayed=False)
    assert "campaigns.deferred_retry" in ran
    assert "campaigns.dispatch" in ran
    retried = (await ledger(sessionmaker, body["id"]))[limited]
    assert retried.status == "sent"
    assert retried.platform_message_id not in (None, first_attempt)
    done = await fetch_campaign(client, acme, body["id"])
    assert (done["status"], done["sent_count"], done["deferred_count"]) == ("completed", 2, 0)

    # Held back again beyond the retries allowed (1): failed, with Meta's reason.
    second = retried.platform_message_id
    assert second is not None
    await post_signed(client, resources, failed_limited(channel, second, limited))
    row = (await ledger(sessionmaker, body["id"]))[limited]
    assert row.status == "failed"
    assert "131049" in (row.error or "")
    final = await fetch_campaign(client, acme, body["id"])
    assert (final["sent_count"], final["failed_count"], final["deferred_count"]) == (1, 1, 0)

    query = """query($id: ID!) { campaign(id: $id) { deferredCount failedCount
        recipients { nodes { phoneNumber status deferrals } } } }"""
    data = (await graphql(client, query, {"id": body["id"]}, acme.headers))["data"]
    assert data["campaign"]["deferredCount"] == 0
    by_phone = {node["phoneNumber"]: node for node in data["campaign"]["recipients"]["nodes"]}
    assert (by_phone[limited]["status"], by_phone[limited]["deferrals"]) == ("failed", 1)


async def test_other_failures_are_not_deferred(
    client: httpx.AsyncClient,
    acme: Tenant,
    channel: dict[str, Any],
    template: dict[str, Any],
    jobs: Jobs,
    resources: Resources,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    phone = "+14155550173"
    body = await launched(client, acme, channel, template, [phone])
    await jobs.drain(delayed=False)
    message_id = (await ledger(sessionmaker, body["id"]))[phone].platform_message_id
    assert message_id
    failed = payloads.message_status(
        WABA,
        channel["phone_number_id"],
        CHANNEL_NUMBER,
        message_id,
        phone,
        "failed",
        errors=[{"code": 131026, "title": "Message undeliverable"}],
    )
    await post_signed(client, resources, failed)
    assert (await ledger(sessionmaker, body["id"]))[phone].status == "failed"
    assert (await fetch_campaign(client, acme, body["id"]))["deferred_count"] == 0


# --- ratings ----------------------------------------------------------------------------


def quality(event: str, at: int, **extra: Any) -> dict[str, Any]:
    update = payloads.phone_number_quality_update(WABA, CHANNEL_NUMBER, event, "TIER_10K", **extra)
    return payloads.at_time(update, at)


async def test_red_rating_pauses_a_sending_campaign(
    client: httpx.AsyncClient,
    acme: Tenant,
    channel: dict[str, Any],
    template: dict[str, Any],
    jobs: Jobs,
    resources: Resources,
    sessionmaker: async_sessionmaker[AsyncSession],
) -> None:
    body = await launched(client, acme, channel, template, ["+14155550181", "+14155550182"])
    assert body["status"] == "sending"
    await post_signed(client, resources, quality("FLAGGED", 1_800_000_000))
    paused = await fetch_campaign(client, acme, body["id"])
    assert paused["status"] == "paused"
    assert paused["paused_reason"] == "The channel's quality rating fell to RED"
    await jobs.drain(delayed=False)
    rows = await ledger(sessionmaker, body["id"])
    assert {row.status for row in rows.values()} == {"pending"}  # nothing sent while paused

    shown = (await client.get(f"/api/v1/channels/{channel['id']}", headers=acme.headers)).json()
    assert (shown["quality_rating"], shown["messaging_limit"], shown["quality_event"]) == (
        "RED",
        "TIER_10K",
        "FLAGGED",
    )
    query = """query($id: ID!) { channel(id: $id) { qualityRating messagingLimit }
        campaign(id: $cid) { status pausedReason } }""".replace("$cid", '"' + body["id"] + '"')
    data = (await graphql(client, query, {"id": channel["id"]}, acme.headers))["data"]
    assert data["channel"] == {"qualityRating": "RED", "messagingLimit": "TIER_10K"}
    assert data["campaign"]["pausedReason"] == paused["paused_reason"]

    # An older update that arrives late, and the same one twice, leave the latest state.
    await post_signed(client, resources, quality("UNFLAGGED", 1_700_000_000))
    await post_signed(client, resources, quality("FLAGGED", 1_800_000_000))
    shown = (await client.get(f"/api/v1/channels/{channel['id']}", headers=acme.headers)).json()
    assert shown["quality_rating"] == "RED"

    resumed = await client.post(f"{CAMPAIGNS}/{body['id']}/resume", headers=acme.headers)
    assert (resumed.json()["status"], resumed.json()["paused_reason"]) == ("sending", None)


async def test_yellow_rating_steps_the_campaign_rate_down(
    client: httpx.AsyncClient,
    acme: Tenant,
    channel: dict[str, Any],
    template: dict[str, Any],
    jobs: Jobs,
    resources: Resources,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rates: list[int] = []
    governor = resources.send_governor
    acquire = governor.acquire

    async def spy(channel_id: str, rate: int, wanted: int) -> int:
        rates.append(rate)
        return await acquire(channel_id, rate, wanted)

    monkeypatch.setattr(governor, "acquire", spy)
    await post_signed(client, resources, quality("FLAGGED", 1_800_000_000, quality_rating="YELLOW"))
    body = await launched(client, acme, channel, template, ["+14155550191"])
    await jobs.drain(delayed=False)
    assert rates
    assert set(rates) == {channel["messages_per_second"] // 2}
    assert (await fetch_campaign(client, acme, body["id"]))["status"] == "completed"

    rates.clear()
    await post_signed(client, resources, quality("UNFLAGGED", 1_800_000_100))
    second = await client.post(
        CAMPAIGNS, json=campaign_body(channel, template), headers=acme.headers
    )
    await client.post(f"{CAMPAIGNS}/{second.json()['id']}/launch", headers=acme.headers)
    await jobs.drain(delayed=False)
    assert set(rates) == {channel["messages_per_second"]}


# --- pricing and cost ----------------------------------------------------------------------


async def test_pricing_is_stored_and_cost_shown(
    client: httpx.AsyncClient,
    acme: Tenant,
    channel: dict[str, Any],
    template: dict[str, Any],
    jobs: Jobs,
    sessionmaker: async_sessionmaker[AsyncSession],
    globex: Tenant,
) -> None:
    for n, phone in enumerate(["+14155550201", "+14155550202", "+447700900123"]):
        await create_contact(client, acme, phone, f"Buyer {n}")
    created = await client.post(
        CAMPAIGNS, json=campaign_body(channel, template), headers=acme.headers
    )
    campaign_id = created.json()["id"]
    estimate = (await client.get(f"{CAMPAIGNS}/{campaign_id}/cost", headers=acme.headers)).json()
    assert estimate == {
        "currency": "USD",
        "category": "utility",
        "recipients": 3,
        "estimated_cost": 0.04,  # two US numbers at 0.01, one GB number at the default 0.02
        "billable_messages": 0,
        "cost_so_far": 0.0,
    }
    await client.post(f"{CAMPAIGNS}/{campaign_id}/launch", headers=acme.headers)
    await jobs.drain()  # every status, `pricing` included
    rows = await ledger(sessionmaker, campaign_id)
    assert {(row.pricing_category, row.billable) for row in rows.values()} == {("utility", True)}
    cost = (await client.get(f"{CAMPAIGNS}/{campaign_id}/cost", headers=acme.headers)).json()
    assert (cost["billable_messages"], cost["cost_so_far"], cost["estimated_cost"]) == (
        3,
        0.04,
        0.04,
    )
    query = """query($id: ID!) { campaign(id: $id) {
        cost { currency estimatedCost costSoFar billableMessages }
        recipients { nodes { pricingCategory billable } } } }"""
    data = (await graphql(client, query, {"id": campaign_id}, acme.headers))["data"]["campaign"]
    assert data["cost"] == {
        "currency": "USD",
        "estimatedCost": 0.04,
        "costSoFar": 0.04,
        "billableMessages": 3,
    }
    assert {(n["pricingCategory"], n["billable"]) for n in data["recipients"]["nodes"]} == {
        ("utility", True)
    }
    other = await client.get(f"{CAMPAIGNS}/{campaign_id}/cost", headers=globex.headers)
    assert other.status_code == 404
